package leader

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go's klog flush daemon and workqueue metrics start once per process.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*defaultQueueMetricsFactory).newQueueMetrics"),
	)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWithoutAClusterThisProcessLeads(t *testing.T) {
	r := NewRunner(DefaultOptions(), nil, "istio-system", LeaseName(""), "me", quiet())
	var always, leaderOnly atomic.Int32
	r.Add("always", false, func(ctx context.Context) error { always.Add(1); <-ctx.Done(); return nil })
	r.Add("singleton", true, func(ctx context.Context) error { leaderOnly.Add(1); <-ctx.Done(); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	waitFor(t, 5*time.Second, "both components", func() bool { return always.Load() == 1 && leaderOnly.Load() == 1 })
	if !r.IsLeader() {
		t.Error("IsLeader = false without a cluster")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start = %v after cancel", err)
	}
}

func TestAFailingComponentStopsTheRunner(t *testing.T) {
	r := NewRunner(DefaultOptions(), nil, "ns", "l", "me", quiet())
	stopped := make(chan struct{})
	r.Add("fails", false, func(context.Context) error { return io.ErrUnexpectedEOF })
	r.Add("waits", false, func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil })
	err := r.Start(context.Background())
	if err == nil || err.Error() != "fails: unexpected EOF" {
		t.Fatalf("Start = %v, want the component's error", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("the other component was not stopped")
	}
}

func TestValidateRefusesInconsistentTimings(t *testing.T) {
	o := Options{LeaseDuration: time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: time.Second}
	if o.Validate() == nil {
		t.Error("renew deadline above the lease duration was accepted")
	}
	d := DefaultOptions()
	if err := d.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// Two replicas on a real API server: exactly one leads; when it stops, the
// other takes over within the lease duration.
func TestOneOfTwoReplicasLeadsAndTheOtherTakesOver(t *testing.T) {
	env := testenv.Start(t)
	opts := Options{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	type replica struct {
		r      *Runner
		cancel context.CancelFunc
		done   chan error
		runs   atomic.Int32
	}
	start := func(id string) *replica {
		rp := &replica{done: make(chan error, 1)}
		rp.r = NewRunner(opts, env.Client, "default", LeaseName("canary"), id, quiet())
		rp.r.Add("singleton", true, func(ctx context.Context) error { rp.runs.Add(1); <-ctx.Done(); return nil })
		ctx, cancel := context.WithCancel(context.Background())
		rp.cancel = cancel
		go func() { rp.done <- rp.r.Start(ctx) }()
		return rp
	}
	a, b := start("a"), start("b")
	defer func() { a.cancel(); b.cancel() }()
	waitFor(t, 10*time.Second, "a leader", func() bool { return a.r.IsLeader() || b.r.IsLeader() })
	leader, standby := a, b
	if b.r.IsLeader() {
		leader, standby = b, a
	}
	// Over several renewals, never two leaders.
	for range 10 {
		if a.r.IsLeader() && b.r.IsLeader() {
			t.Fatal("both replicas lead")
		}
		time.Sleep(opts.RetryPeriod / 2)
	}
	if standby.runs.Load() != 0 {
		t.Fatal("the standby ran a leader-only component")
	}
	stoppedAt := time.Now()
	leader.cancel()
	if err := <-leader.done; err != nil {
		t.Fatalf("leader Start = %v", err)
	}
	waitFor(t, opts.LeaseDuration+opts.RetryPeriod*2, "the standby to lead", standby.r.IsLeader)
	t.Logf("standby took over %s after the leader stopped", time.Since(stoppedAt).Round(time.Millisecond))
	// Leading is reported before the components' goroutines have run:
	// wait for the component to start, then check it started once.
	waitFor(t, 5*time.Second, "the standby to run the leader-only component", func() bool { return standby.runs.Load() >= 1 })
	if standby.runs.Load() != 1 {
		t.Errorf("standby ran the leader-only component %d times, want 1", standby.runs.Load())
	}
	lease, err := env.Client.CoordinationV1().Leases("default").Get(context.Background(), "discovery-canary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != standby.r.Identity() {
		t.Errorf("lease holder = %v, want %s", lease.Spec.HolderIdentity, standby.r.Identity())
	}
}
