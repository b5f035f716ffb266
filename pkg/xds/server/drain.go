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
	step := period / time.Duration(len(conns))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, c := range conns {
		if i > 0 {
			timer.Reset(step)
			select {
			case <-ctx.Done():
				return i
			case <-timer.C:
			}
		}
		c.ctl.kill("the server is shutting down; reconnect to another replica")
	}
	return len(conns)
}
