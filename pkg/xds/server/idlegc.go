package server

import (
	"context"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"time"
)

// Collecting while the pushes are idle.
//
// Go collects when the heap reaches its goal, wherever the pushes are. A
// collection that lands on a fan-out slows it: it takes a quarter of the
// cores for its workers and makes allocating goroutines assist. At M1
// (1,000 proxies, 2 cores shared with the load tool), the endpoint
// changes whose fan-out a collection overlapped reached their last proxy
// in 108 ms on average, the others in 68 ms, and those few set the p99
// (BENCHMARKS.md, "Collections while the pushes are idle"). istiod
// leaves collections to Go's pacer; this is discovery's own.
//
// So when the push queue drains and stays drained for idleGCQuiet, and
// the heap has used at least half its room (from what the last
// collection found live to the goal), the server collects then: the next
// push starts with the room a collection gives, and a fan-out that
// allocates less than the other half of it meets none. The cost is at
// most one collection per half of the room, and none while pushes keep
// coming or the heap is small for its goal.
const (
	idleGCQuiet = 20 * time.Millisecond
	// idleGCShare is the share of the room the heap must have used.
	idleGCShare = 0.5
)

// idleGC runs a collection after the push queue drains, when the heap
// has used enough of its room (see above).
type idleGC struct {
	// quiet reports whether the queue is drained and how many items it
	// has handled (push.Queue.Quiet).
	quiet func() (bool, uint64)
	// heap reads what the last collection found live, the heap now, and
	// the goal, in bytes.
	heap    func() (live, now, goal uint64)
	collect func()
	// wait sleeps, false when the server stops first; tests return at
	// once.
	wait    func(time.Duration) bool
	running atomic.Bool
	// runs counts the collections it ran.
	runs atomic.Int64
}

func newIdleGC(ctx context.Context, quiet func() (bool, uint64)) *idleGC {
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	return &idleGC{quiet: quiet, heap: readHeap, collect: runtime.GC, wait: wait}
}

// drained is the queue's idle hook. It returns at once: the wait and the
// collection run on a goroutine of their own, one at a time, which sees
// any drain that comes while it runs.
func (ig *idleGC) drained() {
	if !ig.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer ig.running.Store(false)
		ig.maybeCollect()
	}()
}

// maybeCollect waits until the queue has been drained for idleGCQuiet,
// having handled nothing in between, and collects if the heap has used
// idleGCShare of its room then.
func (ig *idleGC) maybeCollect() {
	_, n := ig.quiet()
	for {
		if !ig.wait(idleGCQuiet) {
			return
		}
		quiet, m := ig.quiet()
		if quiet && m == n {
			break
		}
		n = m // pushing again, or drained again since: wait anew
	}
	live, now, goal := ig.heap()
	if goal <= live || now < live || float64(now-live) < idleGCShare*float64(goal-live) {
		return
	}
	ig.collect()
	ig.runs.Add(1)
}

var heapMetrics = []string{"/gc/heap/live:bytes", "/memory/classes/heap/objects:bytes", "/gc/heap/goal:bytes"}

// readHeap reads the runtime's heap figures: what the last collection
// marked live, the heap's objects now (live and not yet swept), and the
// goal at which the next collection starts.
func readHeap() (live, now, goal uint64) {
	s := make([]rtmetrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	rtmetrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != rtmetrics.KindUint64 {
			return 0, 0, 0 // not this runtime's: never collect
		}
	}
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
}
