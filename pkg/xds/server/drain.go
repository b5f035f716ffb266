package server

import (
	"context"
	"time"
)

// Drain closes every open stream, one after another, spread evenly over
// period, so that proxies reconnect to the other replicas a few at a time
// instead of all at once. Callers stop new streams first (the gRPC servers'
// GracefulStop, or an interceptor). It returns the number of streams closed,
// when the last one is closed or ctx ends.
func (s *Server) Drain(ctx context.Context, period time.Duration) int {
	var conns []*conn
	s.conns.Range(func(_, v any) bool {
		conns = append(conns, v.(*conn))
		return true
	})
	if len(conns) == 0 {
		return 0
	}
	s.log.Info("draining xDS streams", "streams", len(conns), "period", period)
	return spread(ctx, len(conns), period, realClock{}, func(i int) {
		conns[i].ctl.kill("the server is shutting down; reconnect to another replica")
	})
}

// clock is the time spread keeps: the real one, or a test's.
type clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, and reports whether d passed.
	Sleep(ctx context.Context, d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// spread calls do for 0..n-1, the i-th at period*i/n after the start,
// and returns how many it called before ctx ended. Each call is due at
// its own time from the start, not a step after the previous one: on a
// saturated machine every wake-up comes late, and 650 steps of 30 ms each
// 15 ms late made a 20 s drain take 30 s and the replica's exit miss its
// grace period (RELIABILITY.md, scenario 3 at 2,000 proxies). A call
// that is due already is made at once.
func spread(ctx context.Context, n int, period time.Duration, clk clock, do func(i int)) int {
	start := clk.Now()
	for i := 0; i < n; i++ {
		due := start.Add(period * time.Duration(i) / time.Duration(n))
		if wait := due.Sub(clk.Now()); wait > 0 && !clk.Sleep(ctx, wait) {
			return i
		}
		if ctx.Err() != nil {
			return i
		}
		do(i)
	}
	return n
}
