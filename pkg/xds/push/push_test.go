package push

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshplane/discovery/pkg/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func update(v uint64, kind model.Kind, name string) *model.Update {
	return &model.Update{World: &model.World{Version: v}, Changes: []model.Change{{Key: model.Key{Kind: kind, Namespace: "ns", Name: name}}}}
}

func TestDebouncer(t *testing.T) {
	tests := map[string]struct {
		quiet, max time.Duration
		updates    int
		gap        time.Duration
		wantMin    int // fewest pushes expected
		wantMax    int
	}{
		"merges a burst into one push once the World is quiet":  {quiet: 50 * time.Millisecond, max: 10 * time.Second, updates: 20, gap: time.Millisecond, wantMin: 1, wantMax: 1},
		"pushes at the maximum delay while updates keep coming": {quiet: 200 * time.Millisecond, max: 100 * time.Millisecond, updates: 60, gap: 5 * time.Millisecond, wantMin: 2, wantMax: 30},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var got []*Request
			d := NewDebouncer(tc.quiet, tc.max, func(_ context.Context, r *Request) {
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- d.Start(ctx) }()
			for i := 0; i < tc.updates; i++ {
				d.Enqueue(update(uint64(i+1), model.KindService, "s"+string(rune('a'+i%26))))
				time.Sleep(tc.gap)
			}
			waitFor(t, "every update to be pushed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, r := range got {
					n += r.Updates
				}
				return n == tc.updates
			})
			cancel()
			<-done
			if len(got) < tc.wantMin || len(got) > tc.wantMax {
				t.Errorf("%d pushes, want %d to %d", len(got), tc.wantMin, tc.wantMax)
			}
			if last := got[len(got)-1]; last.World.Version != uint64(tc.updates) {
				t.Errorf("last push has World %d, want the newest %d", last.World.Version, tc.updates)
			}
		})
	}
}

func TestRequestEndpointsOnly(t *testing.T) {
	r := &Request{Changes: map[model.Key]model.Op{{Kind: model.KindEndpoints, Name: "a"}: model.OpUpsert}}
	if !r.EndpointsOnly() {
		t.Error("an endpoints change is not EndpointsOnly")
	}
	r.Changes[model.Key{Kind: model.KindVirtualService, Name: "v"}] = model.OpUpsert
	if r.EndpointsOnly() {
		t.Error("a VirtualService change is EndpointsOnly")
	}
}

func TestQueueMergesAndBoundsConcurrency(t *testing.T) {
	var running, peak, handled atomic.Int32
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[int]int{}
	q := NewQueue(3, func(a, b int) int { return a + b }, func(_ context.Context, k, v int) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		mu.Lock()
		seen[k] += v
		mu.Unlock()
		running.Add(-1)
		handled.Add(1)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- q.Start(ctx) }()
	for k := 0; k < 10; k++ {
		q.Push(k, 1)
	}
	waitFor(t, "three workers to start", func() bool { return running.Load() == 3 })
	// Keys waiting merge; the ones being handled are queued again.
	for k := 0; k < 10; k++ {
		q.Push(k, 10)
	}
	close(release)
	waitFor(t, "every key to be handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := 0; k < 10; k++ {
			if seen[k] != 11 {
				return false
			}
		}
		return true
	})
	cancel()
	<-done
	if peak.Load() > 3 {
		t.Errorf("%d handlers ran at once, want at most 3", peak.Load())
	}
	if h := handled.Load(); h > 13 {
		t.Errorf("%d handler calls for 10 keys pushed twice: pushes did not merge", h)
	}
}

// The queue calls its idle hook once per drain, from the last worker, and
// not while a key waits or is worked on; Quiet's count tells a drain from
// the next.
func TestQueueReportsEachDrain(t *testing.T) {
	release := make(chan struct{})
	q := NewQueue(2, func(a, b int) int { return a + b }, func(context.Context, int, int) { <-release })
	var drains atomic.Int32
	var busyAtDrain atomic.Bool
	q.OnIdle(func() {
		if quiet, _ := q.Quiet(); !quiet {
			busyAtDrain.Store(true)
		}
		drains.Add(1)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- q.Start(ctx) }()
	defer func() { cancel(); <-done }()
	if quiet, n := q.Quiet(); !quiet || n != 0 {
		t.Fatalf("a new queue: quiet %v, %d handled; want quiet, 0", quiet, n)
	}
	for k := range 5 {
		q.Push(k, 1)
	}
	if quiet, _ := q.Quiet(); quiet {
		t.Fatal("quiet with five keys pushed")
	}
	for range 5 {
		release <- struct{}{}
	}
	waitFor(t, "the queue to drain", func() bool { return drains.Load() == 1 })
	_, first := q.Quiet()
	if first != 5 {
		t.Errorf("%d handled after five keys, want 5", first)
	}
	q.Push(9, 1)
	release <- struct{}{}
	waitFor(t, "the queue to drain again", func() bool { return drains.Load() == 2 })
	if _, n := q.Quiet(); n != first+1 {
		t.Errorf("%d handled after one more key, want %d", n, first+1)
	}
	if busyAtDrain.Load() {
		t.Error("the idle hook ran while a key waited or was worked on")
	}
}

// collect runs d and returns a function that reads the Requests so far.
func collect(t *testing.T, quiet, max, epQuiet time.Duration, cfgQuiet ...time.Duration) (*Debouncer, func() []*Request) {
	t.Helper()
	var mu sync.Mutex
	var got []*Request
	d := NewDebouncer(quiet, max, func(_ context.Context, r *Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
	})
	d.SetEndpointQuiet(epQuiet)
	if len(cfgQuiet) > 0 {
		d.SetConfigQuiet(cfgQuiet[0])
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d, func() []*Request {
		mu.Lock()
		defer mu.Unlock()
		return append([]*Request(nil), got...)
	}
}

// A lone endpoint change does not wait for the configuration quiet period:
// it is pushed on its own, before a configuration change enqueued after it
// and well inside the configuration's quiet period.
func TestEndpointOnlyBatchHasItsOwnQuietPeriod(t *testing.T) {
	d, got := collect(t, time.Second, 10*time.Second, 5*time.Millisecond)
	d.Enqueue(update(1, model.KindEndpoints, "a"))
	time.Sleep(100 * time.Millisecond)
	d.Enqueue(update(2, model.KindService, "b"))
	waitFor(t, "both changes to be pushed", func() bool {
		total := 0
		for _, r := range got() {
			total += r.Updates
		}
		return total == 2
	})
	if rs := got(); len(rs) != 2 || !rs[0].EndpointsOnly() || rs[0].World.Version != 1 {
		t.Fatalf("%d pushes; want the endpoint change alone first, then the configuration change", len(rs))
	}
}

// Endpoints merged with a configuration change wait for the configuration
// quiet period with it: one push, one World.
func TestEndpointsWaitWithAConfigurationChange(t *testing.T) {
	d, got := collect(t, 100*time.Millisecond, 10*time.Second, time.Millisecond)
	d.Enqueue(update(1, model.KindService, "a"))
	d.Enqueue(update(2, model.KindEndpoints, "a"))
	d.Enqueue(update(3, model.KindEndpoints, "b"))
	waitFor(t, "the push", func() bool { return len(got()) == 1 })
	time.Sleep(150 * time.Millisecond)
	if rs := got(); len(rs) != 1 || rs[0].Updates != 3 || rs[0].World.Version != 3 {
		t.Fatalf("%d pushes, first of %d updates; want one of all three", len(rs), rs[0].Updates)
	}
}

// Under a stream of endpoint changes the quiet period grows: changes 3ms
// apart, each far apart from the 1ms base, are merged into far fewer
// pushes than changes (the base alone would push each on its own).
func TestEndpointQuietGrowsUnderABurst(t *testing.T) {
	d, got := collect(t, 100*time.Millisecond, 10*time.Second, time.Millisecond)
	const n = 60
	for i := range n {
		d.Enqueue(update(uint64(i+1), model.KindEndpoints, "e"))
		time.Sleep(3 * time.Millisecond)
	}
	waitFor(t, "every update to be pushed", func() bool {
		total := 0
		for _, r := range got() {
			total += r.Updates
		}
		return total == n
	})
	if pushes := len(got()); pushes > n/4 {
		t.Fatalf("%d pushes for %d endpoint changes 3ms apart: the quiet period did not grow", pushes, n)
	}
	// After a quiet spell the base applies again: a lone change is pushed
	// on its own, not merged with a change 40ms later as the grown period
	// (100ms) would merge them.
	time.Sleep(150 * time.Millisecond)
	before := len(got())
	d.Enqueue(update(n+1, model.KindEndpoints, "e"))
	time.Sleep(40 * time.Millisecond)
	d.Enqueue(update(n+2, model.KindEndpoints, "f"))
	waitFor(t, "both lone changes", func() bool {
		rs := got()
		return len(rs) > before && rs[len(rs)-1].World.Version == n+2
	})
	if rs := got(); len(rs) != before+2 {
		t.Fatalf("%d pushes for two endpoint changes 40ms apart after a quiet spell, want 2", len(rs)-before)
	}
}

// pushesOf enqueues configuration changes gap apart and returns how many
// pushes carried them.
func pushesOf(t *testing.T, d *Debouncer, got func() []*Request, n int, gap time.Duration) int {
	t.Helper()
	for i := range n {
		d.Enqueue(update(uint64(i+1), model.KindVirtualService, fmt.Sprintf("vs-%d", i)))
		time.Sleep(gap)
	}
	waitFor(t, "every update to be pushed", func() bool {
		total := 0
		for _, r := range got() {
			total += r.Updates
		}
		return total == n
	})
	return len(got())
}

// With a configuration base period, a lone configuration change does not
// wait the whole quiet period: two changes 100ms apart are two pushes
// where a fixed 1s period merges them into one.
func TestConfigQuietStartsAtItsBase(t *testing.T) {
	d, got := collect(t, time.Second, 10*time.Second, 0, 5*time.Millisecond)
	if n := pushesOf(t, d, got, 2, 100*time.Millisecond); n != 2 {
		t.Fatalf("%d pushes for two configuration changes 100ms apart with a 5ms base, want 2", n)
	}
	d, got = collect(t, time.Second, 10*time.Second, 0)
	if n := pushesOf(t, d, got, 2, 100*time.Millisecond); n != 1 {
		t.Fatalf("%d pushes for two configuration changes 100ms apart with no base (a fixed 1s quiet period), want 1", n)
	}
}

// Under a burst of configuration changes the quiet period grows as the
// endpoints' does: changes 3ms apart (a directory applied) are merged
// into far fewer pushes than changes.
func TestConfigQuietGrowsUnderABurst(t *testing.T) {
	d, got := collect(t, 100*time.Millisecond, 10*time.Second, time.Millisecond, time.Millisecond)
	const n = 60
	if pushes := pushesOf(t, d, got, n, 3*time.Millisecond); pushes > n/4 {
		t.Fatalf("%d pushes for %d configuration changes 3ms apart: the quiet period did not grow", pushes, n)
	}
}

// A status-only change (discovery's own condition writes) pushes nothing,
// and a push already due carries the newest World.
func TestStatusOnlyChangesDoNotPush(t *testing.T) {
	d, got := collect(t, 20*time.Millisecond, 10*time.Second, time.Millisecond)
	status := update(1, model.KindVirtualService, "a")
	status.Changes[0].StatusOnly = true
	d.Enqueue(status)
	time.Sleep(100 * time.Millisecond)
	if rs := got(); len(rs) != 0 {
		t.Fatalf("a status-only change pushed %d times", len(rs))
	}
	d.Enqueue(update(2, model.KindVirtualService, "b"))
	status3 := update(3, model.KindVirtualService, "a")
	status3.Changes[0].StatusOnly = true
	d.Enqueue(status3)
	waitFor(t, "the spec change to be pushed", func() bool { return len(got()) == 1 })
	r := got()[0]
	if r.World.Version != 3 || len(r.Changes) != 1 || r.Updates != 1 {
		t.Fatalf("push of World %d with changes %v over %d updates; want World 3 with b's change only", r.World.Version, r.Changes, r.Updates)
	}
}
