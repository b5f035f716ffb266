package server

import (
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
	sub cachev3.Subscription
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

	mu    sync.Mutex
	proxy *model.Proxy
	cfg   *gen.ProxyConfig
	dbase map[string]typeBase // delta: what each type's stream was last fully brought up to date with
	// dsubs is go-control-plane's set of names a delta stream subscribes
	// to, by type (its own map, read only here); dnew the names the
	// request being handled subscribes to that were not in it.
	dsubs       map[string]map[string]struct{}
	dnew        map[string][]string
	sotw        map[string]*sotwWatch
	delta       map[string]*deltaWatch
	subs        map[string]map[string]struct{} // sotw names subscribed at the last request, by type
	wildcard    map[string]bool                // sotw wildcard at the last request, by type
	checked     map[string]string              // config version last compared in full, by type
	prevVersion map[string]string              // config version before the latest setConfig, by type
	inflight    map[string]*inflight           // sotw responses not yet seen sent, by type
	// Delta streams: dsynced[t] is set when the versions the stream has
	// returned are right for every name of t except those in dpending[t],
	// the names changed by pushes that found no open watch. A push or an
	// ACK then looks at those names only, not at every resource the proxy
	// holds (thousands of endpoint names per proxy at 1,000 services).
	dsynced    map[string]bool
	dpending   map[string]map[string]struct{}
	started    map[string]bool // delta types requested at least once
	reqs       map[string]any  // outstanding request pointers, by type
	status     map[string]*typeStatus
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
	// debugAnswered holds the names each debug type was last answered for.
	debugOnly     bool
	debugAnswered map[string][]string
	// wave is the push wave this proxy is a member of, until it answers
	// (canary.go).
	wave *wave
}

func newConn(s *Server, key streamKey, ctl *streamCtl) *conn {
	return &conn{
		s: s, key: key, ctl: ctl, connected: time.Now(),
		sotw: map[string]*sotwWatch{}, delta: map[string]*deltaWatch{},
		subs: map[string]map[string]struct{}{}, wildcard: map[string]bool{}, checked: map[string]string{},
		prevVersion: map[string]string{}, inflight: map[string]*inflight{}, started: map[string]bool{},
		dsynced: map[string]bool{}, dpending: map[string]map[string]struct{}{}, dbase: map[string]typeBase{},
		dsubs: map[string]map[string]struct{}{}, dnew: map[string][]string{},
		reqs: map[string]any{}, status: map[string]*typeStatus{},
	}
}

func (c *conn) logger() *slog.Logger {
	if c.proxy == nil {
		return c.s.log
	}
	return c.s.log.With("proxy", model.Clip(c.proxy.ID))
}

func (c *conn) typeStatus(t string) *typeStatus {
	st := c.status[t]
	if st == nil {
		st = &typeStatus{}
		c.status[t] = st
	}
	return st
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
// place (it can hold thousands of names; copying it for every push to
// every proxy would dominate the push). go-control-plane only swaps it or
// prunes it between a watch's cancellation and the next CreateWatch, both
// ordered with c.mu; a response it drops unsent is undone in CreateWatch.
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
		c.checked[t] = version
		if !changed && len(next) == len(returned) {
			return false
		}
		return c.deliverSotw(w, &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: t, Resources: anys(send)}, next, nil)
	}
	each(func(n string) {
		if r := c.cfg.Get(t, n); r != nil && returned[n] != r.Hash {
			send = append(send, r)
		}
	})
	if dirty == nil || c.checked[t] == c.prevVersion[t] {
		c.checked[t] = version
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
	// watch's cancellation, which takes c.mu.
	for _, r := range send {
		returned[r.Name] = r.Hash
	}
	return true
}

func (c *conn) deliverSotw(w *sotwWatch, resp *discovery.DiscoveryResponse, next map[string]string, undo []string) bool {
	select {
	case w.ch <- &cachev3.PassthroughResponse{Request: w.req, DiscoveryResponse: resp, ReturnedResources: next}:
		c.inflight[resp.GetTypeUrl()] = &inflight{resp: resp, names: undo}
		c.handed(resp.GetTypeUrl(), resp, next, undo)
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
			c.prevVersion[t] = c.cfg.Version(t)
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
		for t := range c.sotw {
			if !knownType(t) {
				types = append(types, t)
			}
		}
		for t := range c.delta {
			if !knownType(t) {
				types = append(types, t)
			}
		}
	}
	stalled := false
	for _, t := range types {
		names := dirty[t]
		if w := c.sotw[t]; w != nil {
			if c.respondSotw(w, names) {
				delete(c.sotw, t)
			}
			continue
		}
		if w := c.delta[t]; w != nil {
			if c.respondDelta(w, names) {
				delete(c.delta, t)
			}
			continue
		}
		if c.key.delta && knownType(t) {
			c.deferDelta(t, names)
		}
		if st := c.status[t]; st != nil && st.pending {
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
		out[i] = r.Any
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
