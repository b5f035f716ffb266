package server

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Admission of new streams with back-pressure. A stream's first
// configuration is the server's most expensive answer (8.9 MB per
// sidecar at M1), and when a thousand proxies reconnect at once (a
// replica killed, a rollout) answering all of them together shares the
// cores and the sockets between them: every proxy gets its configuration
// late, at the same time, and the slowest readers trip the send timeout
// and start over (RELIABILITY.md, scenario 4 at 3,000 proxies: 822
// streams closed). So at most Options.WarmingStreams streams are being
// given their first configuration at once; the first request of any
// other waits (its stream is open, nothing is refused, nothing is sent)
// until a slot frees. istiod instead rate-limits new streams
// (PILOT_MAX_REQUESTS_PER_SECOND, sized by the machine when unset;
// pilot/pkg/xds/discovery.go WaitForRequestLimit): a stream waits at most
// a second for the limiter and is then refused with ResourceExhausted, and
// the proxy retries with back-off. A bound on concurrent work rather than
// on a rate needs no tuning to the machine's speed.
//
// A stream holds its slot until it has answered (ACK or NACK) a listener
// or route configuration response: an Envoy asks for clusters, their
// endpoints, then listeners (the bulk of a sidecar's configuration is
// sent by then; its routes follow outside the bound) and proxyless gRPC
// for listeners first (its configuration is small). A stream that never
// asks for listeners, or stops answering, holds it until
// Options.WarmingTimeout; one that ends, no longer.

// warming holds the slots; nil when admission is unbounded.
type warming struct {
	slots   chan struct{}
	timeout time.Duration
}

func newWarming(n int, timeout time.Duration) *warming {
	if n <= 0 {
		return nil
	}
	return &warming{slots: make(chan struct{}, n), timeout: timeout}
}

// warmState is a stream's place in admission; the stream's request
// callbacks (one at a time) set admitted, the release runs once from
// whichever of its triggers comes first (a timer that fires after
// another trigger finds it done).
type warmState struct {
	admitted bool
	release  sync.Once
}

// admitWarming returns once c may be given its first configuration: at once if
// it has been admitted before or admission is unbounded, otherwise when
// a slot frees. It fails if the stream ends meanwhile.
func (s *Server) admitWarming(c *conn) error {
	w := s.warming
	if w == nil || c.warm.admitted {
		return nil
	}
	select {
	case w.slots <- struct{}{}:
	default:
		s.m.streamsWaiting.Inc()
		defer s.m.streamsWaiting.Dec()
		select {
		case w.slots <- struct{}{}:
		case <-c.done:
			return status.Error(codes.Canceled, "stream ended while waiting to be admitted")
		case <-c.ctl.done:
			return status.Error(codes.Unavailable, c.ctl.reason)
		}
	}
	c.warm.admitted = true
	if w.timeout > 0 {
		time.AfterFunc(w.timeout, c.warmed)
	}
	return nil
}

// warmed frees c's slot, once, if it holds one.
func (c *conn) warmed() {
	w := c.s.warming
	if w == nil {
		return
	}
	c.warm.release.Do(func() {
		// Only a stream that took a slot gives one back. admitted is
		// written by the stream's own callbacks, before the timer that
		// can call this exists; closed, the other caller from outside
		// them, runs after them.
		if c.warm.admitted {
			<-w.slots
		}
	})
}
