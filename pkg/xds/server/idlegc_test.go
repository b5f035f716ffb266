package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meshplane/discovery/pkg/xds/push"
)

// idleGCProbe is an idleGC whose heap, queue and clock the test sets.
type idleGCProbe struct {
	mu              sync.Mutex
	live, now, goal uint64
	quiet           []bool // what successive quiet calls answer (the last repeats)
	handled         []uint64
	waits           int
	collected       int
}

func (p *idleGCProbe) gc() *idleGC {
	return &idleGC{
		quiet: func() (bool, uint64) {
			p.mu.Lock()
			defer p.mu.Unlock()
			q, h := p.quiet[0], p.handled[0]
			if len(p.quiet) > 1 {
				p.quiet, p.handled = p.quiet[1:], p.handled[1:]
			}
			return q, h
		},
		heap: func() (uint64, uint64, uint64) { return p.live, p.now, p.goal },
		collect: func() {
			p.mu.Lock()
			p.collected++
			p.mu.Unlock()
		},
		wait: func(time.Duration) bool { p.waits++; return true },
	}
}

// The collector collects after a drain only when the queue stayed
// drained and idle, and the heap has used half its room or more.
func TestIdleGCCollectsWhenQuietAndPastHalfTheRoom(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name            string
		live, now, goal uint64
		quiet           []bool
		handled         []uint64
		want            int
		waits           int
	}{
		{"quiet, half the room used", 80 * mb, 120 * mb, 160 * mb, []bool{true}, []uint64{7}, 1, 1},
		{"quiet, most of the room used", 80 * mb, 150 * mb, 160 * mb, []bool{true}, []uint64{7}, 1, 1},
		{"quiet, less than half used", 80 * mb, 119 * mb, 160 * mb, []bool{true}, []uint64{7}, 0, 1},
		{"no room (GOGC=off or a limit)", 80 * mb, 90 * mb, 80 * mb, []bool{true}, []uint64{7}, 0, 1},
		{"swept below live", 80 * mb, 70 * mb, 160 * mb, []bool{true}, []uint64{7}, 0, 1},
		// A drain, pushes again, then drained for good: it waits until
		// the queue has stayed quiet for a whole period.
		{"busy, then quiet", 80 * mb, 150 * mb, 160 * mb, []bool{true, false, true, true}, []uint64{7, 8, 9, 9}, 1, 3},
		{"drained again in between", 80 * mb, 150 * mb, 160 * mb, []bool{true, true, true}, []uint64{7, 8, 8}, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &idleGCProbe{live: tc.live, now: tc.now, goal: tc.goal, quiet: tc.quiet, handled: tc.handled}
			p.gc().maybeCollect()
			if p.collected != tc.want || p.waits != tc.waits {
				t.Errorf("collected %d times after %d waits, want %d after %d", p.collected, p.waits, tc.want, tc.waits)
			}
		})
	}
}

// A stopping server ends the wait without collecting.
func TestIdleGCStopsWithTheServer(t *testing.T) {
	p := &idleGCProbe{live: 1, now: 100, goal: 101, quiet: []bool{true}, handled: []uint64{1}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ig := newIdleGC(ctx, p.gc().quiet)
	ig.heap, ig.collect = p.gc().heap, p.gc().collect
	ig.maybeCollect()
	if p.collected != 0 {
		t.Error("collected after the server stopped")
	}
}

// Wired to a real queue and Go's own heap figures: a drained queue with
// the heap past half its room gets one collection, counted.
func TestIdleGCRunsOnARealQueue(t *testing.T) {
	q := push.NewQueue(2, func(a, b int) int { return a + b }, func(context.Context, int, int) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ig := newIdleGC(ctx, q.Quiet)
	var mu sync.Mutex
	collected := 0
	ig.collect = func() { mu.Lock(); collected++; mu.Unlock() }
	live, now, goal := readHeap()
	if goal == 0 || now == 0 || live == 0 {
		t.Fatalf("the runtime's heap figures read 0: live %d, now %d, goal %d", live, now, goal)
	}
	ig.heap = func() (uint64, uint64, uint64) { return 10, 60, 100 }
	q.OnIdle(ig.drained)
	done := make(chan error)
	go func() { done <- q.Start(ctx) }()
	defer func() { cancel(); <-done }()
	q.Push(1, 1)
	eventually(t, "an idle collection", func() bool { return ig.runs.Load() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if collected != 1 {
		t.Errorf("collected %d times, want 1", collected)
	}
}
