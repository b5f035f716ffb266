package autoregister

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the clients of the test API
		// server (integration_test.go); they close with their transports.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
		goleak.IgnoreAnyFunction("net/http.(*http2clientConnReadLoop).run"),
	)
}

var vmIdentity = &ca.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "ratings-vm"}

type fixture struct {
	t      *testing.T
	c      *Controller
	client *istiofake.Clientset
	store  *model.Store
}

// newFixture runs a Controller on a fake clientset holding objs, with
// the WorkloadGroup "ratings" in the World and the API server.
func newFixture(t *testing.T, grace time.Duration, objs ...runtime.Object) *fixture {
	t.Helper()
	g := group()
	client := istiofake.NewSimpleClientset(append([]runtime.Object{g}, objs...)...)
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindWorkloadGroup, Namespace: "shop", Name: "ratings"}, Object: g}); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Replica, opts.GracePeriod, opts.MaxRetryDelay = "discovery-a", grace, 100*time.Millisecond
	c, err := New(opts, store.World, client, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &fixture{t: t, c: c, client: client, store: store}
}

func vm(t *testing.T, ip string, extra ...any) *model.Proxy {
	t.Helper()
	meta := map[string]any{"AUTO_REGISTER_GROUP": "ratings", "LABELS": map[string]any{"version": "v2"}}
	for i := 0; i+1 < len(extra); i += 2 {
		meta[extra[i].(string)] = extra[i+1]
	}
	return proxy(t, ip, meta)
}

// waitEntry polls the API server until cond holds for the entry.
func (f *fixture) waitEntry(name, what string, cond func(we *networkingv1.WorkloadEntry, err error) bool) *networkingv1.WorkloadEntry {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		we, err := f.client.NetworkingV1().WorkloadEntries("shop").Get(context.Background(), name, metav1.GetOptions{})
		if cond(we, err) {
			return we
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s; last: %v %v", what, we, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func exists(we *networkingv1.WorkloadEntry, err error) bool { return err == nil }

// idle waits until the worker has nothing left to do for the entry.
func (f *fixture) idle(name string) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := f.c.snapshot(keyOf("shop", name))
		done := !s.ok || s.settled || (s.live && s.writtenConnected.Equal(s.connectedAt) && (s.health == nil || s.writtenHealth.Equal(s.healthAt)))
		if done && f.c.queue.Len() == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("worker still busy with %s: %+v", name, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConnectCreatesTheEntry(t *testing.T) {
	f := newFixture(t, time.Hour)
	p := vm(t, "10.0.0.7")
	tracked, err := f.c.Connect(p, vmIdentity, time.Now())
	if err != nil || !tracked {
		t.Fatalf("Connect = %v, %v", tracked, err)
	}
	we := f.waitEntry("ratings-10.0.0.7", "the entry", exists)
	if we.Annotations[AnnotationController] != "discovery-a" || we.Annotations[AnnotationConnectedAt] == "" ||
		we.Annotations[AnnotationGroup] != "ratings" || we.Spec.GetLabels()["version"] != "v2" || we.Spec.GetAddress() != "10.0.0.7" {
		t.Errorf("entry %v %v", we.Annotations, &we.Spec)
	}
	if n := testutil.ToFloat64(f.c.m.success); n != 1 {
		t.Errorf("auto_registration_success_total = %v", n)
	}
}

func TestConnectRefuses(t *testing.T) {
	other := &ca.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "payments"}
	cases := map[string]struct {
		p      *model.Proxy
		caller *ca.Identity
		code   codes.Code
	}{
		"a stream without a verified identity": {vm(t, "10.0.0.7"), nil, codes.PermissionDenied},
		"a caller of another service account":  {vm(t, "10.0.0.7"), other, codes.PermissionDenied},
		"a group that does not exist":          {vm(t, "10.0.0.7", "AUTO_REGISTER_GROUP", "nope"), vmIdentity, codes.FailedPrecondition},
	}
	for name, tc := range cases {
		t.Run("refuses "+name, func(t *testing.T) {
			f := newFixture(t, time.Hour)
			tracked, err := f.c.Connect(tc.p, tc.caller, time.Now())
			if tracked || status.Code(err) != tc.code {
				t.Fatalf("Connect = %v, %v; want code %v", tracked, err, tc.code)
			}
			if l, _ := f.client.NetworkingV1().WorkloadEntries("shop").List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
				t.Errorf("entries were created: %v", l.Items)
			}
		})
	}
	t.Run("ignores a proxy that does not ask", func(t *testing.T) {
		f := newFixture(t, time.Hour)
		if tracked, err := f.c.Connect(proxy(t, "10.0.0.7", nil), nil, time.Now()); tracked || err != nil {
			t.Fatalf("Connect = %v, %v", tracked, err)
		}
	})
	t.Run("serves without an entry in file mode, and counts it", func(t *testing.T) {
		opts := DefaultOptions()
		opts.Replica = "a"
		c, err := New(opts, model.NewStore(model.StoreOptions{}).World, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if tracked, err := c.Connect(vm(t, "10.0.0.7"), vmIdentity, time.Now()); tracked || err != nil {
			t.Fatalf("Connect = %v, %v", tracked, err)
		}
		if n := testutil.ToFloat64(c.m.errors.WithLabelValues("unsupported")); n != 1 {
			t.Errorf("unsupported count %v", n)
		}
	})
}

func TestHealthReportsSetTheCondition(t *testing.T) {
	f := newFixture(t, time.Hour)
	p := vm(t, "10.0.0.7", "PROXY_CONFIG", map[string]any{"readinessProbe": map[string]any{}})
	if _, err := f.c.Connect(p, vmIdentity, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Reported before the entry may exist: it is written once it does.
	f.c.Health(p, false, "connection refused", time.Now())
	healthy := func(want string) func(*networkingv1.WorkloadEntry, error) bool {
		return func(we *networkingv1.WorkloadEntry, err error) bool {
			if err != nil {
				return false
			}
			for _, c := range we.Status.Conditions {
				if c.GetType() == ConditionHealthy {
					return c.GetStatus() == want
				}
			}
			return false
		}
	}
	we := f.waitEntry("ratings-10.0.0.7", "Healthy=False", healthy("False"))
	if we.Annotations[AnnotationHealthChecks] != "true" || we.Status.Conditions[0].GetMessage() != "connection refused" {
		t.Errorf("entry %v %v", we.Annotations, we.Status.Conditions)
	}
	f.c.Health(p, true, "", time.Now())
	f.waitEntry("ratings-10.0.0.7", "Healthy=True", healthy("True"))
}

func TestDisconnectDeletesAfterTheGracePeriod(t *testing.T) {
	f := newFixture(t, 50*time.Millisecond)
	p := vm(t, "10.0.0.7")
	if _, err := f.c.Connect(p, vmIdentity, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.waitEntry("ratings-10.0.0.7", "the entry", exists)
	f.c.Disconnect(p, time.Now())
	f.waitEntry("ratings-10.0.0.7", "the deletion", func(_ *networkingv1.WorkloadEntry, err error) bool { return apierrors.IsNotFound(err) })
	if n := testutil.ToFloat64(f.c.m.deletes); n != 1 {
		t.Errorf("auto_registration_deletes_total = %v", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.c.snapshot(keyOf("shop", "ratings-10.0.0.7")).ok {
		if time.Now().After(deadline) {
			t.Fatal("the controller still tracks the deleted entry")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReconnectWithinTheGracePeriodKeepsTheEntry(t *testing.T) {
	f := newFixture(t, time.Hour)
	p := vm(t, "10.0.0.7")
	if _, err := f.c.Connect(p, vmIdentity, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.waitEntry("ratings-10.0.0.7", "the entry", exists)
	f.c.Disconnect(p, time.Now())
	f.waitEntry("ratings-10.0.0.7", "the disconnect mark", func(we *networkingv1.WorkloadEntry, err error) bool {
		return err == nil && we.Annotations[AnnotationDisconnectedAt] != ""
	})
	p2 := vm(t, "10.0.0.7")
	if _, err := f.c.Connect(p2, vmIdentity, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.waitEntry("ratings-10.0.0.7", "the entry connected again", func(we *networkingv1.WorkloadEntry, err error) bool {
		_, dis := we.Annotations[AnnotationDisconnectedAt]
		return err == nil && !dis && we.Annotations[AnnotationConnectedAt] != ""
	})
}

func TestANewerConnectionToAnotherReplicaWins(t *testing.T) {
	later := time.Now().Add(time.Minute).UTC().Format(timeFormat)
	theirs := EntryFromGroup("ratings-10.0.0.7", vm(t, "10.0.0.7"), group())
	theirs.Annotations[AnnotationController] = "discovery-b"
	theirs.Annotations[AnnotationConnectedAt] = later
	f := newFixture(t, 50*time.Millisecond, theirs)
	p := vm(t, "10.0.0.7")
	if _, err := f.c.Connect(p, vmIdentity, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.c.Health(p, false, "ignored: not this replica's", time.Now())
	f.idle("ratings-10.0.0.7")
	f.c.Disconnect(p, time.Now())
	f.idle("ratings-10.0.0.7")
	we := f.waitEntry("ratings-10.0.0.7", "the entry", exists)
	if we.Annotations[AnnotationController] != "discovery-b" || we.Annotations[AnnotationConnectedAt] != later ||
		we.Annotations[AnnotationDisconnectedAt] != "" || len(we.Status.Conditions) != 0 {
		t.Errorf("another replica's entry was written: %v %v", we.Annotations, we.Status.Conditions)
	}
}

func TestASlowAPIServerDoesNotHoldTheStream(t *testing.T) {
	f := newFixture(t, time.Hour)
	var failures atomic.Int32
	f.client.PrependReactor("create", "workloadentries", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(1) <= 3 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is slow")
		}
		return false, nil, nil
	})
	start := make(chan struct{})
	returned := make(chan error, 1)
	go func() {
		<-start
		_, err := f.c.Connect(vm(t, "10.0.0.7"), vmIdentity, time.Now())
		returned <- err
	}()
	close(start)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Connect waited for the API server")
	}
	f.waitEntry("ratings-10.0.0.7", "the entry after retries", exists)
	if n := testutil.ToFloat64(f.c.m.retries); n < 3 {
		t.Errorf("auto_registration_retries_total = %v, want at least 3", n)
	}
}

func TestIdentityOfAnExistingEntryIsChecked(t *testing.T) {
	foreign := EntryFromGroup("ratings-10.0.0.7", vm(t, "10.0.0.7"), group())
	foreign.Spec.ServiceAccount = "payments"
	f := newFixture(t, time.Hour, foreign)
	if _, err := f.store.Apply(model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindWorkloadEntry, Namespace: "shop", Name: foreign.Name}, Object: foreign}); err != nil {
		t.Fatal(err)
	}
	_, err := f.c.Connect(vm(t, "10.0.0.7"), vmIdentity, time.Now())
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Connect = %v, want PermissionDenied", err)
	}
	if !errors.Is(CheckIdentity(vmIdentity, "shop", "payments"), ErrIdentity) {
		t.Error("CheckIdentity admits another service account")
	}
}

func keyOf(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func TestSweepDeletesWhatDeadReplicasLeft(t *testing.T) {
	old := time.Now().Add(-time.Hour).UTC().Format(timeFormat)
	entry := func(name string, kv ...string) *networkingv1.WorkloadEntry {
		we := EntryFromGroup(name, vm(t, "10.0.0.1"), group())
		for i := 0; i+1 < len(kv); i += 2 {
			we.Annotations[kv[i]] = kv[i+1]
		}
		return we
	}
	left := entry("ratings-10.0.0.1", AnnotationDisconnectedAt, old)
	stale := entry("ratings-10.0.0.2", AnnotationController, "discovery-dead", AnnotationConnectedAt, old)
	live := entry("ratings-10.0.0.3", AnnotationController, "discovery-b", AnnotationConnectedAt, time.Now().UTC().Format(timeFormat))
	byHand := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{
		Name: "by-hand", Namespace: "shop",
		Annotations: map[string]string{AnnotationDisconnectedAt: old},
	}}
	f := newFixture(t, time.Second, left, stale, live, byHand)
	f.c.opts.MaxConnectionAge = 30 * time.Minute
	for _, we := range []*networkingv1.WorkloadEntry{left, stale, live, byHand} {
		if _, err := f.store.Apply(model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindWorkloadEntry, Namespace: "shop", Name: we.Name}, Object: we}); err != nil {
			t.Fatal(err)
		}
	}
	f.c.sweepOnce(context.Background())
	for name, want := range map[string]bool{left.Name: false, stale.Name: false, live.Name: true, byHand.Name: true} {
		_, err := f.client.NetworkingV1().WorkloadEntries("shop").Get(context.Background(), name, metav1.GetOptions{})
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v (%v)", name, got, want, err)
		}
	}
}

func TestAnExistingHealthCheckedEntryGetsHealthAndLosesItOnDisconnect(t *testing.T) {
	byHand := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{
		Name: "ratings-vm-1", Namespace: "shop",
		Annotations: map[string]string{AnnotationHealthChecks: "true"},
	}}
	byHand.Spec.Address, byHand.Spec.ServiceAccount = "10.0.0.7", "ratings-vm"
	plain := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "shop"}}
	f := newFixture(t, 50*time.Millisecond, byHand, plain)
	for _, we := range []*networkingv1.WorkloadEntry{byHand, plain} {
		if _, err := f.store.Apply(model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindWorkloadEntry, Namespace: "shop", Name: we.Name}, Object: we}); err != nil {
			t.Fatal(err)
		}
	}
	named := func(name string) *model.Proxy { return proxy(t, "10.0.0.7", map[string]any{"WORKLOAD_ENTRY": name}) }
	if tracked, err := f.c.Connect(named("plain"), vmIdentity, time.Now()); tracked || err != nil {
		t.Errorf("an entry without health checks: Connect = %v, %v; want untracked", tracked, err)
	}
	if _, err := f.c.Connect(named("missing"), vmIdentity, time.Now()); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a missing entry: Connect = %v; want FailedPrecondition", err)
	}
	other := &ca.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "payments"}
	if _, err := f.c.Connect(named("ratings-vm-1"), other, time.Now()); status.Code(err) != codes.PermissionDenied {
		t.Errorf("another service account: Connect = %v; want PermissionDenied", err)
	}

	p := named("ratings-vm-1")
	if tracked, err := f.c.Connect(p, vmIdentity, time.Now()); !tracked || err != nil {
		t.Fatalf("Connect = %v, %v", tracked, err)
	}
	f.c.Health(p, false, "probe failed", time.Now())
	f.waitEntry("ratings-vm-1", "controller and Healthy=False", func(we *networkingv1.WorkloadEntry, err error) bool {
		return err == nil && we.Annotations[AnnotationController] == "discovery-a" && hasCondition(we, ConditionHealthy)
	})
	f.c.Disconnect(p, time.Now())
	we := f.waitEntry("ratings-vm-1", "the Healthy condition removed", func(we *networkingv1.WorkloadEntry, err error) bool {
		return err == nil && we.Annotations[AnnotationDisconnectedAt] != "" && !hasCondition(we, ConditionHealthy)
	})
	if we.Spec.GetAddress() != "10.0.0.7" {
		t.Errorf("entry changed: %v", &we.Spec)
	}
	if n := testutil.ToFloat64(f.c.m.deletes); n != 0 {
		t.Errorf("an entry registered by hand was deleted (%v deletes)", n)
	}
}
