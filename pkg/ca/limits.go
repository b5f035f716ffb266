package ca

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/peer"
)

// Bounds of the per-identity and per-peer limiter maps: far above the
// service accounts of a cluster, small enough (a few MB) that a flood from
// many addresses cannot grow memory without end.
const (
	maxIdentityLimiters = 10000
	maxPeerLimiters     = 10000
)

// expiringMap is a map whose entries expire, bounded in size: when full it
// drops expired entries, then arbitrary ones (an eighth of the map, so a
// flood of new keys pays for eviction once per many inserts).
type expiringMap[K comparable, V any] struct {
	max int

	mu sync.Mutex
	m  map[K]expiring[V]
}

type expiring[V any] struct {
	v     V
	until time.Time
}

func newExpiringMap[K comparable, V any](max int) *expiringMap[K, V] {
	return &expiringMap[K, V]{max: max, m: map[K]expiring[V]{}}
}

// get returns the live value of k.
func (e *expiringMap[K, V]) get(k K, now time.Time) (V, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[k]
	if !ok || !now.Before(x.until) {
		var zero V
		return zero, false
	}
	return x.v, true
}

// put sets k to v until the given time.
func (e *expiringMap[K, V]) put(k K, v V, until, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.makeRoom(now)
	e.m[k] = expiring[V]{v: v, until: until}
}

// touch returns the live value of k, or a new one from create, and keeps
// it until the given time.
func (e *expiringMap[K, V]) touch(k K, until, now time.Time, create func() V) V {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[k]
	if !ok || !now.Before(x.until) {
		e.makeRoom(now)
		x.v = create()
	}
	x.until = until
	e.m[k] = x
	return x.v
}

func (e *expiringMap[K, V]) makeRoom(now time.Time) {
	if len(e.m) < e.max {
		return
	}
	for k, x := range e.m {
		if !now.Before(x.until) {
			delete(e.m, k)
		}
	}
	for k := range e.m {
		if len(e.m) < e.max-e.max/8 {
			break
		}
		delete(e.m, k)
	}
}

func (e *expiringMap[K, V]) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.m)
}

// limiterMap holds one token bucket per key (an identity, a peer address).
// An entry is kept while its bucket is not full again: forgetting a full
// bucket loses nothing, so eviction of idle keys is free.
type limiterMap struct {
	limit rate.Limit
	burst int
	idle  time.Duration // time for an empty bucket to fill
	m     *expiringMap[string, *rate.Limiter]
}

// newLimiterMap returns nil (no limit) for a limit of 0.
func newLimiterMap(limit float64, burst, max int) *limiterMap {
	if limit <= 0 {
		return nil
	}
	return &limiterMap{
		limit: rate.Limit(limit), burst: burst,
		idle: time.Duration(float64(burst) / limit * float64(time.Second)),
		m:    newExpiringMap[string, *rate.Limiter](max),
	}
}

// get returns key's bucket, created full, and keeps it while in use.
func (l *limiterMap) get(key string, now time.Time) *rate.Limiter {
	return l.m.touch(key, now.Add(l.idle), now, func() *rate.Limiter { return rate.NewLimiter(l.limit, l.burst) })
}

// peek returns key's bucket if it is not full (it was used recently).
func (l *limiterMap) peek(key string, now time.Time) (*rate.Limiter, bool) {
	return l.m.get(key, now)
}

// Why a failure budget refused to run a TokenReview.
var (
	errPeerBudget   = errors.New("not reviewed: the peer is over its authentication failure budget")
	errGlobalBudget = errors.New("not reviewed: the authentication failure budget is spent and the peer failed recently")
)

// failureBudget bounds the expensive work (TokenReviews) spent on callers
// that fail to authenticate. Every failed authentication takes a token
// from the global bucket and from its peer address's bucket; a review in
// flight holds one of each until it is known to have failed (the hold
// becomes the charge) or succeeded (given back), so concurrent reviews
// cannot overdraw. Before a review, admit refuses a peer whose own bucket
// is empty, and, while the global bucket is empty, every peer that failed
// recently (whose bucket is not full). A peer with no recent failure is
// always reviewed, so valid callers elsewhere are not locked out by
// someone else's flood; a flood from N fresh addresses costs at most N
// extra reviews.
type failureBudget struct {
	global *rate.Limiter // nil: none
	peers  *limiterMap   // nil: none
	now    func() time.Time

	mu       sync.Mutex // guards the inflight counts
	inflight map[*rate.Limiter]int
}

func newFailureBudget(o Options) *failureBudget {
	b := &failureBudget{
		peers: newLimiterMap(o.AuthnFailureRateLimitPerPeer, o.AuthnFailureBurstPerPeer, maxPeerLimiters),
		now:   time.Now, inflight: map[*rate.Limiter]int{},
	}
	if o.AuthnFailureRateLimit > 0 {
		b.global = rate.NewLimiter(rate.Limit(o.AuthnFailureRateLimit), o.AuthnFailureBurst)
	}
	if b.global == nil && b.peers == nil {
		return nil
	}
	return b
}

// hold is what a review in flight holds of the budget.
type hold struct {
	b     *failureBudget
	held  []*rate.Limiter
	ended bool
}

// release gives the held tokens back: the review succeeded, or could not
// be made (neither is the caller's failure). A nil hold is a no-op.
func (h *hold) release() { h.end(false) }

// charge turns the held tokens into the charge of a failed review.
func (h *hold) charge() { h.end(true) }

func (h *hold) end(charge bool) {
	if h == nil || h.ended {
		return
	}
	h.ended = true
	now := h.b.now()
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	for _, lim := range h.held {
		if h.b.inflight[lim]--; h.b.inflight[lim] <= 0 {
			delete(h.b.inflight, lim)
		}
		if charge {
			lim.AllowN(now, 1)
		}
	}
}

// admit returns the hold for an expensive authentication of the caller of
// ctx, or errPeerBudget or errGlobalBudget.
func (b *failureBudget) admit(ctx context.Context) (*hold, error) {
	if b == nil {
		return nil, nil
	}
	now := b.now()
	var peerLim *rate.Limiter
	if b.peers != nil {
		peerLim = b.peers.get(peerKey(ctx), now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h := &hold{b: b}
	free := func(lim *rate.Limiter) float64 { return lim.TokensAt(now) - float64(b.inflight[lim]) }
	recent := true // without per-peer buckets every peer counts as recent
	if peerLim != nil {
		left := free(peerLim)
		if left < 1 {
			return nil, errPeerBudget
		}
		recent = left < float64(b.peers.burst)-0.5
		h.held = append(h.held, peerLim)
	}
	if b.global != nil {
		switch {
		case free(b.global) >= 1:
			h.held = append(h.held, b.global)
		case recent:
			return nil, errGlobalBudget
		}
	}
	for _, lim := range h.held {
		b.inflight[lim]++
	}
	return h, nil
}

// fail charges a failed authentication that cost no review to the caller
// of ctx.
func (b *failureBudget) fail(ctx context.Context) {
	if b == nil {
		return
	}
	now := b.now()
	if b.global != nil {
		b.global.AllowN(now, 1)
	}
	if b.peers != nil {
		b.peers.get(peerKey(ctx), now).AllowN(now, 1)
	}
}

// errSettled marks a failed authentication whose cost the failure budget
// has settled already (a review's hold), so fail does not charge it again.
var errSettled = errors.New("failure budget settled")

type settledError struct{ error }

func (e settledError) Is(target error) bool { return target == errSettled }
func (e settledError) Unwrap() error        { return e.error }

// peerKey is the caller's IP address (not the port: a new connection must
// not buy a new budget); "" when the call has no peer.
func peerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		return a.IP.String()
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}

// csrLimits are the CSR budgets of authenticated callers: one bucket per
// identity the certificate is for, and one for the replica. A request
// takes a token from both or from neither.
type csrLimits struct {
	global     *rate.Limiter // nil: none
	identities *limiterMap   // nil: none
	now        func() time.Time
}

func newCSRLimits(o Options) *csrLimits {
	l := &csrLimits{identities: newLimiterMap(o.CSRRateLimitPerIdentity, o.CSRBurstPerIdentity, maxIdentityLimiters), now: time.Now}
	if o.CSRRateLimit > 0 {
		l.global = rate.NewLimiter(rate.Limit(o.CSRRateLimit), o.CSRBurst)
	}
	return l
}

// Which budget refused a CSR.
const (
	scopeIdentity = "identity"
	scopeGlobal   = "global"
)

// admit takes a token for a CSR for id, or returns the scope whose bucket
// is empty and a ReasonThrottled refusal. The identity's token is a
// reservation cancelled at the same instant when the replica's bucket is
// empty (CancelAt gives back only reservations whose time has not passed).
func (l *csrLimits) admit(id Identity) (string, error) {
	now := l.now()
	var r *rate.Reservation
	if l.identities != nil {
		r = l.identities.get(id.key(), now).ReserveN(now, 1)
		if !r.OK() || r.DelayFrom(now) > 0 {
			r.CancelAt(now)
			return scopeIdentity, refuse(ReasonThrottled, nil, "over the CSR rate limit of %g/s (burst %d) for one identity",
				float64(l.identities.limit), l.identities.burst)
		}
	}
	if l.global != nil && !l.global.AllowN(now, 1) {
		if r != nil {
			r.CancelAt(now)
		}
		return scopeGlobal, refuse(ReasonThrottled, nil, "over the replica's CSR rate limit of %g/s (burst %d)",
			float64(l.global.Limit()), l.global.Burst())
	}
	return "", nil
}
