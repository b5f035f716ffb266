package loadkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// typeIndex orders the per-type counters.
var typeIndex = map[string]int{typeCDS: 0, typeEDS: 1, typeLDS: 2, typeRDS: 3}

// proxy is one simulated sidecar: a real ADS client over gRPC that decodes
// everything it receives, ACKs it (or NACKs what Envoy would refuse), and
// reports to the tracker when it holds a change.
type proxy struct {
	f        *Fleet
	idx      int
	node     *corev3.Node
	behavior Behavior

	bytes     atomic.Int64 // received on the wire
	responses [4]atomic.Int64
	resources [4]atomic.Int64
	nacks     atomic.Int64
	streams   atomic.Int64 // streams opened
	drops     atomic.Int64 // streams that ended without being asked to
	ready     atomic.Bool  // has held a complete configuration
	reconnect chan struct{}
	remote    atomic.Value // string: the address of the last connection dialed
	dialed    atomic.Int64 // when it was dialed (Unix nanoseconds)

	// mu guards sess, the session of the current (or last) stream, and
	// the outage bookkeeping: the proxy's goroutine changes them, Verify
	// and the fleet's status read them.
	mu       sync.Mutex
	sess     *session
	lostAt   time.Time // the last complete stream ended; zero while complete
	gaps     []time.Duration
	complete bool // the current stream holds a complete configuration
	// completedAt is when a stream last became complete.
	completedAt time.Time
	// During a gap: when the current stream was opened and first
	// answered, and how many streams the gap has opened.
	openedAt, answeredAt time.Time
	gapStreams           int
	phases               []GapPhases
}

// GapPhases divides one gap (a proxy without a complete configuration)
// into the wait for the stream that ended it (back-off and dialing,
// over Streams attempts), that stream's first response, and the rest of
// the configuration.
type GapPhases struct {
	Total, Reconnect, FirstResponse, Fill time.Duration
	Streams                               int
}

var _ stats.Handler = (*proxy)(nil)

func (p *proxy) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (p *proxy) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		p.bytes.Add(int64(in.WireLength))
	}
}
func (p *proxy) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (p *proxy) HandleConn(context.Context, stats.ConnStats)                       {}

// run keeps a stream open until ctx ends: a reconnect request opens a new
// stream at once; a stream the server ends is reopened after a back-off
// (100 ms, doubling to 5 s, back to 100 ms once a stream got a response).
func (p *proxy) run(ctx context.Context, cc *grpc.ClientConn) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		var asked atomic.Bool
		go func() {
			select {
			case <-p.reconnect:
				asked.Store(true)
				cancel()
			case <-sctx.Done():
			}
		}()
		p.streams.Add(1)
		p.opened()
		s := p.newSession()
		err := p.stream(sctx, cc, s)
		cancel()
		p.ended()
		if asked.Load() || ctx.Err() != nil {
			continue
		}
		if s.answered {
			backoff = 100 * time.Millisecond
		}
		p.drops.Add(1)
		p.f.countEnded(err)
		p.f.note(fmt.Sprintf("proxy %d: stream ended: %v", p.idx, err))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// newSession starts the session of a new stream: empty, or (Resume) what
// the last stream held.
func (p *proxy) newSession() *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.sess
	if old == nil || !p.f.opts.Resume {
		p.sess = newSession(p.f.opts.Resume, p.f.opts.Verify)
	} else {
		p.sess = old.resume()
	}
	return p.sess
}

// opened records a new stream's start during a gap.
func (p *proxy) opened() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.openedAt, p.answeredAt = time.Now(), time.Time{}
	if !p.lostAt.IsZero() {
		p.gapStreams++
	}
}

// answered records a stream's first response.
func (p *proxy) answered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.answeredAt.IsZero() {
		p.answeredAt = time.Now()
	}
}

// ended records the end of a stream: a proxy that had a complete
// configuration is now without a control plane until a new stream is
// complete.
func (p *proxy) ended() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.complete && p.lostAt.IsZero() {
		p.lostAt = time.Now()
	}
	p.complete = false
}

func (p *proxy) stream(ctx context.Context, cc *grpc.ClientConn, s *session) error {
	if p.behavior.NoACK {
		return p.streamNoACK(ctx, cc)
	}
	if p.f.opts.SotW {
		return p.streamSotw(ctx, cc, s)
	}
	return p.streamDelta(ctx, cc, s)
}

// wait is a slow reader's pause before it reads the next response.
func (p *proxy) wait(ctx context.Context) {
	if p.behavior.ReadDelay <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(p.behavior.ReadDelay):
	}
}

// decodeAll decodes a response's resources and returns the session
// updates and the expectations met; an error is a NACK.
func (p *proxy) decodeAll(s *session, typeURL string, values [][]byte, versions []string, active []*Change) ([]update, []hit, error) {
	if p.f.opts.Decode != DecodeLight {
		// A light decode makes little garbage, and waiting for a slot
		// would hold the response's buffer (lightCodec) meanwhile.
		p.f.slots <- struct{}{}
		defer func() { <-p.f.slots }()
	}
	ups := make([]update, 0, len(values))
	var hits []hit
	for j, v := range values {
		d, err := p.digest(typeURL, v)
		if err != nil {
			return nil, nil, err
		}
		u := update{name: p.f.names.id(d.name)}
		switch {
		case d.eds != "":
			u.refs = []uint32{p.f.names.id(d.eds)}
		case len(d.routes) > 0:
			u.refs = make([]uint32, len(d.routes))
			for k, n := range d.routes {
				u.refs[k] = p.f.names.id(n)
			}
		}
		if s.fp != nil {
			u.fp = fingerprint(typeURL, &d)
		}
		if s.vers[0] != nil && versions != nil {
			u.version = p.f.versions.id(versions[j])
		}
		ups = append(ups, u)
		hits = check(active, p.idx, typeURL, u.name, &d, hits)
	}
	return ups, hits, nil
}

// digest decodes one resource as the fleet's Decode mode says; an error
// is a NACK. A proxy that may reject resources (Behavior.Reject) always
// decodes them whole, since its rule reads the decoded resource.
func (p *proxy) digest(typeURL string, v []byte) (digest, error) {
	mode := p.f.opts.Decode
	if p.behavior.Reject != nil {
		mode = DecodeFull
	}
	if mode == DecodeLight {
		return scan(typeURL, v)
	}
	m, routes, err := decode(typeURL, v)
	if err != nil {
		return digest{}, err
	}
	if p.behavior.Reject != nil {
		if err := p.behavior.Reject(m); err != nil {
			return digest{}, err
		}
	}
	d := digestOf(m, routes)
	if mode == DecodeBoth {
		l, err := scan(typeURL, v)
		if err != nil {
			return digest{}, fmt.Errorf("light decode: %w", err)
		}
		if !l.equal(d) {
			return digest{}, fmt.Errorf("light decode of %s %q disagrees with the full decode: %v, want %v", shortType(typeURL), d.name, l, d)
		}
	}
	return d, nil
}

// settle, once the ACK and any new subscriptions are sent, records the
// changes the proxy now holds and whether its configuration is complete.
func (p *proxy) settle(s *session, typeURL string, hits []hit, active []*Change) {
	now := p.hold(s, typeURL, hits, active)
	if s.complete || !s.isComplete() {
		return
	}
	s.complete = true
	p.ready.Store(true)
	p.mu.Lock()
	p.complete, p.completedAt = true, now
	if !p.lostAt.IsZero() {
		p.gaps = append(p.gaps, now.Sub(p.lostAt))
		ph := GapPhases{Total: now.Sub(p.lostAt), Streams: p.gapStreams}
		if !p.openedAt.Before(p.lostAt) && !p.answeredAt.IsZero() {
			ph.Reconnect, ph.FirstResponse, ph.Fill = p.openedAt.Sub(p.lostAt), p.answeredAt.Sub(p.openedAt), now.Sub(p.answeredAt)
		}
		p.phases = append(p.phases, ph)
		p.lostAt, p.gapStreams = time.Time{}, 0
	}
	p.mu.Unlock()
	for _, c := range active {
		if c.onComplete && c.concerns(p.idx) && !s.start.Before(c.start) {
			c.finish(p.idx, s.start, now)
		}
	}
}

// hold records the changes an accepted response brought. It is also
// called when the stream broke before the ACK left: the proxy holds the
// resources all the same (Envoy applies, then ACKs), and a resumed stream
// presents their versions, so nothing would bring them again.
func (p *proxy) hold(s *session, typeURL string, hits []hit, active []*Change) time.Time {
	if typeURL == typeCDS || typeURL == typeLDS {
		hits = s.checkRemovals(active, p.idx, typeURL, hits)
	}
	now := time.Now()
	for _, h := range hits {
		h.c.progress[p.idx] |= h.bit
		if h.c.progress[p.idx]&h.c.full == h.c.full {
			h.c.finish(p.idx, h.c.start, now)
		}
	}
	return now
}
