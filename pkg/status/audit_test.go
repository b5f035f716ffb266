package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshplane/discovery/pkg/model"
)

// logRecorder keeps the messages logged at Warn and above.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "resource" {
			l.msgs = append(l.msgs, r.Message+" "+a.Value.String())
		}
		return true
	})
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.msgs)
}

type setCall struct {
	key        model.Key
	generation int64
	typ        string
	c          *Condition
}

// fakeSetter records SetCondition calls. fail makes the next calls fail.
// With a store, it applies the condition to the config there, as the
// API server and the informer would.
type fakeSetter struct {
	mu    sync.Mutex
	calls []setCall
	fail  int
	store *model.Store
}

func (f *fakeSetter) SetCondition(_ context.Context, key model.Key, gen int64, typ string, c *Condition) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, setCall{key, gen, typ, c})
	if f.fail > 0 {
		f.fail--
		return "", errors.New("injected conflict")
	}
	outcome := OutcomeSet
	if c == nil {
		outcome = OutcomeCleared
	}
	if f.store == nil {
		return outcome, nil
	}
	cur := f.store.World().Config(key.Kind, key.Namespace, key.Name)
	if cur == nil {
		return OutcomeGone, nil
	}
	obj := cur.Object.DeepCopyObject()
	st := field(obj, "Status").(*metav1alpha1.IstioStatus)
	st.Conditions = slices.DeleteFunc(st.Conditions, func(x *metav1alpha1.IstioCondition) bool { return x.GetType() == typ })
	if c != nil {
		st.Conditions = append(st.Conditions, &metav1alpha1.IstioCondition{
			Type: typ, Status: c.Status, Reason: c.Reason,
			Message: c.Message, ObservedGeneration: c.ObservedGeneration,
		})
	}
	m := obj.(metav1.Object)
	m.SetResourceVersion(m.GetResourceVersion() + "s")
	if _, err := f.store.Apply(model.Event{Op: model.OpUpsert, Key: key, Object: obj}); err != nil {
		return "", err
	}
	return outcome, nil
}

func (f *fakeSetter) all() []setCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func upsert(t *testing.T, s *model.Store, objs ...runtime.Object) {
	t.Helper()
	var evs []model.Event
	for _, o := range objs {
		evs = append(evs, model.Event{Op: model.OpUpsert, Key: config(o).Key, Object: o})
	}
	if _, err := s.Apply(evs...); err != nil {
		t.Fatal(err)
	}
}

func newAuditor(t *testing.T, store *model.Store, w ConditionSetter) (*Auditor, *logRecorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &logRecorder{}
	a, err := NewAuditor(DefaultOptions(), store.World, w, slog.New(logs), reg)
	if err != nil {
		t.Fatal(err)
	}
	a.retry = time.Millisecond
	store.Subscribe(a.Observe)
	return a, logs, reg
}

// leading gives a a leader's queue without running Lead, and returns it.
func leading(a *Auditor) workqueue.TypedRateLimitingInterface[model.Key] {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[model.Key](time.Millisecond, time.Second))
	a.queue.Store(&q)
	return q
}

func drain(q workqueue.TypedRateLimitingInterface[model.Key]) []string {
	var out []string
	for q.Len() > 0 {
		k, _ := q.Get()
		out = append(out, k.Name)
		q.Done(k)
	}
	slices.Sort(out)
	return out
}

func TestAuditQueuesOnlyResourcesOutOfStep(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	c := config(virtualService("x", 2, true))
	msg := Unsupported(c).Message(model.KindVirtualService)
	ours := func(gen int64) *metav1alpha1.IstioCondition {
		return cond(UnsupportedConditionType, "True", ReasonFieldsNotSupported, msg, gen)
	}
	rejected := cond(ConditionType, "True", ReasonRejected, "proxy p rejected", 2)
	upsert(t, store,
		virtualService("ignored-no-condition", 2, true),
		virtualService("ignored-condition-right", 2, true, rejected, ours(2)),
		virtualService("ignored-condition-old-generation", 2, true, ours(1)),
		virtualService("fine-stale-condition", 2, false, ours(1)),
		virtualService("fine-no-condition", 2, false, rejected),
		unreadKind("jwt"),
	)
	a, _, _ := newAuditor(t, store, &fakeSetter{})
	q := leading(a)
	defer q.ShutDown()
	a.audit()
	want := []string{"fine-stale-condition", "ignored-condition-old-generation", "ignored-no-condition", "jwt"}
	if got := drain(q); !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}

	// Not leading: judged, never queued.
	a.queue.Store(nil)
	upsert(t, store, virtualService("later", 1, true))
	a.audit()
	if q.Len() != 0 {
		t.Errorf("queued %d while not leading", q.Len())
	}
}

func TestAuditLogsOncePerVersionAndCounts(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	a, logs, reg := newAuditor(t, store, nil)
	gauge := func(kind, field string) float64 {
		return testutil.ToFloat64(a.m.configs.WithLabelValues(kind, field))
	}
	upsert(t, store, virtualService("a", 1, true), unreadKind("jwt"), virtualService("fine", 1, false))
	a.audit()
	if logs.count() != 2 {
		t.Errorf("%d warnings for one VirtualService with an ignored field and one TrafficExtension: %v", logs.count(), logs.msgs)
	}
	if g := gauge("VirtualService", "http.retries.retryRemoteLocalities"); g != 1 {
		t.Errorf("field gauge = %v, want 1", g)
	}
	if g := gauge("TrafficExtension", "*"); g != 1 {
		t.Errorf("kind gauge = %v, want 1", g)
	}

	// A status write (new resourceVersion, same generation) is not a new
	// version of the spec: no second log line.
	again := virtualService("a", 1, true, cond("Other", "True", "R", "m", 1))
	again.ResourceVersion = "101"
	upsert(t, store, again)
	a.audit()
	if logs.count() != 2 {
		t.Errorf("a status-only change logged again: %v", logs.msgs)
	}

	// A second VirtualService counts 2; the first's next generation without
	// the field takes it back to 1, without a warning.
	upsert(t, store, virtualService("b", 1, true))
	a.audit()
	if g := gauge("VirtualService", "http.retries.retryRemoteLocalities"); g != 2 || logs.count() != 3 {
		t.Errorf("after b: gauge %v, %d warnings", g, logs.count())
	}
	upsert(t, store, virtualService("a", 2, false))
	a.audit()
	if g := gauge("VirtualService", "http.retries.retryRemoteLocalities"); g != 1 || logs.count() != 3 {
		t.Errorf("after a's fix: gauge %v, %d warnings", g, logs.count())
	}

	// Deleting the last of a series removes it.
	if _, err := store.Apply(model.Event{Op: model.OpDelete, Key: config(unreadKind("jwt")).Key}); err != nil {
		t.Fatal(err)
	}
	a.audit()
	if n := testutil.CollectAndCount(reg, "discovery_config_unsupported_fields"); n != 1 {
		t.Errorf("%d gauge series after the TrafficExtension went, want 1 (the VirtualService field)", n)
	}
}

func TestObserveRecordsIstioKeysOnly(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	a, _, _ := newAuditor(t, store, nil)
	a.take() // the initial full audit
	// Nobody reads: Observe must still return (the Store calls it under
	// its lock, on the xDS path's side).
	for i := range 3 {
		a.Observe(&model.Update{Changes: []model.Change{
			{Key: model.Key{Kind: model.KindService, Namespace: "shop", Name: "s"}},
			{Key: model.Key{Kind: model.KindVirtualService, Namespace: "shop", Name: fmt.Sprint("vs", i%2)}},
		}})
	}
	keys, full := a.take()
	if full || len(keys) != 2 {
		t.Errorf("pending %v (full %v), want the two VirtualServices", keys, full)
	}
}

func TestReconcile(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	c := config(virtualService("x", 2, true))
	right := cond(UnsupportedConditionType, "True", ReasonFieldsNotSupported, Unsupported(c).Message(model.KindVirtualService), 4)
	upsert(t, store, virtualService("ignored", 4, true), virtualService("right", 4, true, right),
		virtualService("fixed", 4, false, right))
	fs := &fakeSetter{}
	a, _, _ := newAuditor(t, store, fs)
	ctx := context.Background()
	q := leading(a)
	defer q.ShutDown()
	limit := newLimiter(a.opts)

	for _, name := range []string{"gone", "right"} {
		if err := a.reconcile(ctx, model.Key{Kind: model.KindVirtualService, Namespace: "shop", Name: name}, limit); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fs.all()); n != 0 {
		t.Fatalf("%d writes for a config gone and one already right", n)
	}

	key := func(name string) model.Key {
		return model.Key{Kind: model.KindVirtualService, Namespace: "shop", Name: name}
	}
	q.Add(key("ignored"))
	q.Add(key("fixed"))
	fs.fail = 1
	// One failure, retried after the back-off (1ms here); the queue is read
	// only when it holds something, so a lost retry fails instead of hanging.
	deadline := time.Now().Add(5 * time.Second)
	for len(fs.all()) < 3 && time.Now().Before(deadline) {
		if q.Len() == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		a.next(ctx, q, limit)
	}
	calls := fs.all()
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3 (a failure, its retry, the other key): %+v", len(calls), calls)
	}
	byName := map[string]setCall{}
	for _, c := range calls {
		byName[c.key.Name] = c
	}
	if c := byName["ignored"]; c.c == nil || c.generation != 4 || c.typ != UnsupportedConditionType || c.c.ObservedGeneration != 4 {
		t.Errorf("ignored: %+v", c)
	}
	if c := byName["fixed"]; c.c != nil || c.generation != 4 {
		t.Errorf("fixed: %+v, want the condition removed", c)
	}
	if f := testutil.ToFloat64(a.m.writes.WithLabelValues("failed")); f != 1 {
		t.Errorf("failed = %v, want 1", f)
	}
	if q.Len() != 0 || q.NumRequeues(key("ignored")) != 0 || q.NumRequeues(key("fixed")) != 0 {
		t.Errorf("queue left: %d, requeues %d %d", q.Len(), q.NumRequeues(key("ignored")), q.NumRequeues(key("fixed")))
	}
}

// conditionIn returns the UnsupportedConditionType condition of ns/name in
// the store's World.
func conditionIn(s *model.Store, kind model.Kind, name string) *metav1alpha1.IstioCondition {
	c := s.World().Config(kind, "shop", name)
	if c == nil {
		return nil
	}
	for _, x := range conditionsOf(c.Object) {
		if x.GetType() == UnsupportedConditionType {
			return x
		}
	}
	return nil
}

// edited is VirtualService shop/name at a new generation, its status
// kept as the API server keeps it across spec changes.
func edited(s *model.Store, name string, gen int64, ignored bool) *networkingv1.VirtualService {
	cur := s.World().Config(model.KindVirtualService, "shop", name).Object.(*networkingv1.VirtualService)
	vs := virtualService(name, gen, ignored)
	vs.Status = *cur.Status.DeepCopy()
	return vs
}

func TestLeadKeepsConditionInStep(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	rejected := cond(ConditionType, "True", ReasonRejected, "proxy p rejected", 1)
	upsert(t, store, virtualService("vs", 1, true, rejected), unreadKind("jwt"))
	fs := &fakeSetter{store: store}
	a, _, _ := newAuditor(t, store, fs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Start(ctx) })
	leadCtx, stopLeading := context.WithCancel(ctx)
	led := make(chan struct{})
	go func() { _ = a.Lead(leadCtx); close(led) }()
	t.Cleanup(func() { stopLeading(); <-led; cancel(); wg.Wait() })

	waitFor(t, "the condition on the VirtualService", func() bool { return conditionIn(store, model.KindVirtualService, "vs") != nil })
	waitFor(t, "the condition on the TrafficExtension", func() bool {
		c := conditionIn(store, model.KindTrafficExtension, "jwt")
		return c != nil && c.GetReason() == ReasonKindNotSupported
	})
	upsert(t, store, edited(store, "vs", 2, false))
	waitFor(t, "the condition cleared", func() bool { return conditionIn(store, model.KindVirtualService, "vs") == nil })
	var vsCalls []string
	for _, c := range fs.all() {
		if c.key.Name == "vs" {
			vsCalls = append(vsCalls, fmt.Sprint(c.generation, c.c != nil))
		}
	}
	if !slices.Equal(vsCalls, []string{"1 true", "2 false"}) {
		t.Errorf("writes on the VirtualService: %v, want set at generation 1 then cleared at 2", vsCalls)
	}

	// No longer leading: judged (counted), never written.
	stopLeading()
	<-led
	if a.queue.Load() != nil {
		t.Fatal("a queue is left after leadership ended")
	}
	n := len(fs.all())
	upsert(t, store, edited(store, "vs", 3, true))
	waitFor(t, "the audit of generation 3", func() bool {
		return testutil.ToFloat64(a.m.configs.WithLabelValues("VirtualService", "http.retries.retryRemoteLocalities")) == 1
	})
	if len(fs.all()) != n {
		t.Errorf("written while not leading: %+v", fs.all()[n:])
	}
}
