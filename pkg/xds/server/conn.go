package server

import (
	"iter"
	"log/slog"
	"sort"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// streamKey names a stream: go-control-plane numbers state-of-the-world
// and delta streams separately.
type streamKey struct {
	delta bool
	id    int64
}

// typeStatus is what /debug/syncz shows of one type on one stream.
type typeStatus struct {
	SentVersion  string    `json:"sentVersion,omitempty"`
	SentNonce    string    `json:"sentNonce,omitempty"`
	Sent         time.Time `json:"sent,omitzero"`
	AckedVersion string    `json:"ackedVersion,omitempty"`
	AckedNonce   string    `json:"ackedNonce,omitempty"`
	Acked        time.Time `json:"acked,omitzero"`
	NACKs        int       `json:"nacks,omitempty"`
	LastNACK     *nack     `json:"lastNack,omitempty"`
	// pending is set while a response awaits the proxy's answer.
	pending bool
}

type nack struct {
	Version string    `json:"version"`
	Nonce   string    `json:"nonce"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

type sotwWatch struct {
	req *discovery.DiscoveryRequest
	sub cachev3.Subscription
	ch  chan cachev3.Response
}

// inflight is a state-of-the-world response handed to go-control-plane and
// not yet seen sent; names are the Route or Endpoint names it marked as
// returned.
type inflight struct {
	resp  *discovery.DiscoveryResponse
	names []string
}

type deltaWatch struct {
	req *discovery.DeltaDiscoveryRequest
	sub *deltaSub
	ch  chan cachev3.DeltaResponse
	// initial is set for the first request of its type on the stream,
	// which is answered even when there is nothing to send. (Delta
	// requests that change subscriptions carry no nonce either.)
	initial bool
}

// conn is one xDS stream and the proxy on it. It is the cache behind
// go-control-plane's server for that stream: a watch is answered with the
// difference between the proxy's configuration and what the stream has
// already returned, so a rejected response is never sent again unchanged.
type conn struct {
	s         *Server
	key       streamKey
	ctl       *streamCtl
	connected time.Time
	// done is closed when the stream ends; warm is its admission
	// (warming.go), touched by its request callbacks only.
	done <-chan struct{}
	warm warmState

	mu    sync.Mutex
	proxy *model.Proxy
	cfg   *gen.ProxyConfig
	// types holds the stream's state of each type URL it has requested
	// (of).
	types      map[string]*typeState
	answers    answered  // what each ACK or NACK answers, for the Observer (verdict.go)
	unanswered int       // pushes with no open watch to answer
	pushFirst  time.Time // first change of the push being delivered
	closed     bool
	secrets    secretState // gateway credentials (sds.go)
	// caller is the stream's verified identity (streamauth on the TLS
	// port); nil on the plaintext port, whose streams get no credentials.
	caller *ca.Identity
	// registered is set while the Registrar tracks this stream
	// (register.go).
	registered bool
	// debugOnly marks a stream whose first request was for a debug type
	// (debugxds.go): it is no proxy and gets no configuration.
	debugOnly bool
	// wave is the push wave this proxy is a member of, until it answers
	// (canary.go).
	wave *wave
}

// typeState is what a stream keeps of one type URL: one value per stream
// and type, as go-control-plane's Subscription is for the names asked
// for. Every field is guarded by the conn's mu.
type typeState struct {
	// status is what /debug/syncz shows; nil until something of the type
	// was sent or answered.
	status *typeStatus
	// The open watch (at most one, of the stream's protocol), and the
	// request registered for the CreateWatch call that follows it.
	sotw  *sotwWatch
	delta *deltaWatch
	req   any
	// State of the world: checked is the configuration version last
	// compared in full; prevVersion the version before the latest
	// setConfig. (A delta stream needs neither: every response brings
	// it up to date; see respondDelta.)
	checked, prevVersion string

	// State of the world: the names subscribed at the last request (a map
	// go-control-plane built for it and no longer changes), and the
	// response handed over and not yet seen sent.
	subs     map[string]struct{}
	wildcard bool
	inflight *inflight

	// Delta. started is set once the type was requested. synced is set
	// when the versions the stream has returned are right for every name
	// except those in pending, the names changed by pushes that found no
	// open watch: a push or an ACK then looks at those names only, not
	// at every resource the proxy holds (thousands of endpoint names per
	// proxy at 1,000 services). base is what the stream was last fully
	// brought up to date with. dsub is the stream's subscription
	// (subscription.go); dnew the names the request being handled
	// subscribes to that were not in it.
	started bool
	synced  bool
	pending map[string]struct{}
	base    typeBase
	dsub    *deltaSub
	dnew    []string

	// debugAnswered holds the names a debug type was last answered for
	// (debugxds.go); answered says it was.
	debugAnswered []string
	answered      bool
}

func newConn(s *Server, key streamKey, ctl *streamCtl, done <-chan struct{}) *conn {
	return &conn{s: s, key: key, ctl: ctl, done: done, connected: time.Now(), types: make(map[string]*typeState, len(gen.TypeURLs))}
}

// of returns the stream's state of type t, adding it. Called with c.mu
// held.
func (c *conn) of(t string) *typeState {
	ts := c.types[t]
	if ts == nil {
		ts = &typeState{}
		c.types[t] = ts
	}
	return ts
}

func (c *conn) logger() *slog.Logger {
	if c.proxy == nil {
		return c.s.log
	}
	return c.s.log.With("proxy", model.Clip(c.proxy.ID))
}

// statuses yields the status of each type that has one. Called with c.mu
// held.
func (c *conn) statuses() iter.Seq2[string, *typeStatus] {
	return func(yield func(string, *typeStatus) bool) {
		for t, ts := range c.types {
			if ts.status != nil && !yield(t, ts.status) {
				return
			}
		}
	}
}

func (c *conn) typeStatus(t string) *typeStatus {
	ts := c.of(t)
	if ts.status == nil {
		ts.status = &typeStatus{}
	}
	return ts.status
}

// observe records what a request answers: an ACK or a NACK of the last
// response of its type. Called with c.mu held.
func (c *conn) observe(t, nonce, version string, errDetail *status.Status) {
	st := c.typeStatus(t)
	st.pending = false
	c.unanswered = 0
	if nonce == "" {
		return
	}
	if errDetail != nil {
		st.NACKs++
		st.LastNACK = &nack{Version: st.SentVersion, Nonce: nonce, Message: errDetail.GetMessage(), Time: time.Now()}
		c.s.m.reject(gen.ShortType(t))
		c.logger().Warn("proxy rejected configuration; it keeps its last accepted version",
			"type", gen.ShortType(t), "rejected", st.SentVersion, "kept", version, "nonce", nonce, "error", errDetail.GetMessage())
		c.verdict(t, nonce, errDetail.GetMessage(), true)
		if c.wave != nil && nonce == st.SentNonce && c.cfg != nil && c.cfg.Class.WorldVersion >= c.wave.world {
			c.waveRejected(t, errDetail.GetMessage())
		}
		return
	}
	if nonce == st.SentNonce {
		if version == "" { // delta requests carry no version
			version = st.SentVersion
		}
		st.AckedVersion, st.AckedNonce = version, nonce
		st.Acked = time.Now()
		c.verdict(t, nonce, "", false)
	}
}

func knownType(t string) bool {
	for _, k := range gen.TypeURLs {
		if k == t {
			return true
		}
	}
	return false
}

// respondSotw answers w if the stream lacks something of the proxy's
// configuration, or if w is the first request of its type. Listener and
// Cluster responses carry every subscribed resource; Route and Endpoint
// responses carry only what changed or was newly subscribed. dirty, when
// not nil, limits the Route and Endpoint names to look at. Called with c.mu
// held; reports whether a response was handed over.
//
// For Route and Endpoint the map of returned resources is updated in
// place (gcp.go); a response go-control-plane drops unsent is undone in
// CreateWatch.
func (c *conn) respondSotw(w *sotwWatch, dirty []string) bool {
	if c.cfg == nil {
		return false
	}
	t := w.req.GetTypeUrl()
	initial := w.req.GetResponseNonce() == ""
	if t == gen.SecretType {
		return c.respondSecretSotw(w, initial)
	}
	if !knownType(t) {
		if !initial {
			return false
		}
		c.logger().Warn("request for a type this server does not serve; answered with no resources", "type", t)
		return c.deliverSotw(w, &discovery.DiscoveryResponse{TypeUrl: t}, map[string]string{}, nil)
	}
	returned := w.sub.ReturnedResources()
	wildcard := w.sub.IsWildcard()
	subscribed := w.sub.SubscribedResources()
	version := c.cfg.Version(t)
	if t == gen.ListenerType || t == gen.ClusterType {
		dirty = nil // every response carries the whole state
	}
	each := func(fn func(name string)) {
		switch {
		case dirty != nil:
			for _, n := range dirty {
				if _, ok := subscribed[n]; ok || wildcard {
					fn(n)
				}
			}
		case wildcard:
			for _, n := range c.cfg.Names(t) {
				fn(n)
			}
		default:
			for n := range subscribed {
				fn(n)
			}
		}
	}
	var send []*gen.Resource
	if t == gen.ListenerType || t == gen.ClusterType {
		next := map[string]string{}
		changed := initial
		each(func(n string) {
			if r := c.cfg.Get(t, n); r != nil {
				send = append(send, r)
				next[n] = r.Hash
				changed = changed || returned[n] != r.Hash
			}
		})
		c.of(t).checked = version
		if !changed && len(next) == len(returned) {
			return false
		}
		return c.deliverSotw(w, &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: t, Resources: anys(send)}, next, nil)
	}
	each(func(n string) {
		if h, ok := c.cfg.Hash(t, n); ok && returned[n] != h {
			send = append(send, c.cfg.Get(t, n))
		}
	})
	if ts := c.of(t); dirty == nil || ts.checked == ts.prevVersion {
		ts.checked = version
	}
	if len(send) == 0 && !initial {
		return false
	}
	sort.Slice(send, func(i, j int) bool { return send[i].Name < send[j].Name })
	undo := make([]string, len(send))
	for i, r := range send {
		undo[i] = r.Name
	}
	if !c.deliverSotw(w, &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: t, Resources: anys(send)}, returned, undo) {
		return false
	}
	// Still under c.mu: go-control-plane cannot prune the map before the
	// watch's cancellation, which takes c.mu (gcp.go).
	markReturned(returned, send)
	return true
}

func (c *conn) deliverSotw(w *sotwWatch, resp *discovery.DiscoveryResponse, next map[string]string, undo []string) bool {
	select {
	case w.ch <- &cachev3.PassthroughResponse{Request: w.req, DiscoveryResponse: resp, ReturnedResources: next}:
		c.of(resp.GetTypeUrl()).inflight = &inflight{resp: resp, names: undo}
		if c.s.observer != nil {
			// A state-of-the-world response carries its changed names
			// in undo (Route, Endpoint) or every name in next (Listener,
			// Cluster).
			names := undo
			if names == nil {
				names = mapKeys(next)
			}
			c.handed(resp.GetTypeUrl(), resp, nil, names)
		}
	default:
		// Each watch is answered at most once and the server's channel
		// holds one response per type, so this does not happen.
		c.logger().Error("xDS response channel full; response dropped", "type", resp.GetTypeUrl())
		return false
	}
	c.delivered(resp.GetTypeUrl(), resp.GetResources())
	return true
}

func (c *conn) delivered(t string, rs []*anypb.Any) {
	size := 0
	for _, a := range rs {
		size += len(a.GetValue())
	}
	c.deliveredSize(t, size)
}

func (c *conn) deliveredSize(t string, size int) {
	c.typeStatus(t).pending = true
	c.s.m.configSize.WithLabelValues(gen.ShortType(t)).Observe(float64(size))
	if !c.pushFirst.IsZero() {
		c.s.m.convergence.Observe(time.Since(c.pushFirst).Seconds())
		c.pushFirst = time.Time{}
	}
}

// setConfig installs a new configuration and answers the open watches of
// the types in dirty (every type when dirty is nil; a nil name list means
// every name of that type). A type changed while the proxy has not
// answered its last response counts against MaxUnackedPushes.
func (c *conn) setConfig(cfg *gen.ProxyConfig, dirty map[string][]string, first time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.cfg != nil {
		for _, t := range gen.TypeURLs {
			c.of(t).prevVersion = c.cfg.Version(t)
		}
	}
	c.cfg = cfg
	if !first.IsZero() {
		c.pushFirst = first
	}
	types := gen.TypeURLs
	if dirty != nil {
		types = sortedKeys(dirty)
	}
	if dirty == nil {
		// Unknown types wait for the first configuration like the others.
		for _, t := range sortedKeys(c.types) {
			if ts := c.types[t]; !knownType(t) && (ts.sotw != nil || ts.delta != nil) {
				types = append(types, t)
			}
		}
	}
	stalled := false
	for _, t := range types {
		names := dirty[t]
		ts := c.of(t)
		if w := ts.sotw; w != nil {
			if c.respondSotw(w, names) {
				ts.sotw = nil
			}
			continue
		}
		if w := ts.delta; w != nil {
			if c.respondDelta(w, names) {
				ts.delta = nil
			}
			continue
		}
		if c.key.delta && knownType(t) {
			c.deferDelta(t, names)
		} else if knownType(t) && t != gen.SecretType {
			// No open watch: the next request compares in full (its
			// config version alone would not tell when the push did not
			// change it).
			ts.checked = ""
		}
		if st := ts.status; st != nil && st.pending {
			stalled = true
		}
	}
	if stalled {
		c.unanswered++
		if c.unanswered > c.s.opts.MaxUnackedPushes {
			c.logger().Warn("closing xDS stream: the proxy has not answered its last response through many pushes",
				"pushes", c.unanswered, "limit", c.s.opts.MaxUnackedPushes)
			c.s.m.streamsClosed.WithLabelValues("unacked").Inc()
			c.ctl.kill("the proxy did not acknowledge configuration in time")
		}
	}
	if c.wave != nil {
		c.checkWave()
	}
}

func anys(rs []*gen.Resource) []*anypb.Any {
	out := make([]*anypb.Any, len(rs))
	for i, r := range rs {
		out[i] = r.Wire()
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
