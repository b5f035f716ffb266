package server

import (
	"context"
	"errors"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watcher is the cache behind go-control-plane's server: it finds the
// stream's conn (OnStreamRequest registered the request just before) and
// lets the conn answer or park the watch.
type watcher struct{ s *Server }

var _ cachev3.Cache = watcher{}

// CreateWatch answers or parks a state-of-the-world watch.
func (wt watcher) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	v, ok := wt.s.reqs.LoadAndDelete(req)
	if !ok {
		return nil, status.Error(codes.Internal, "request from an unknown stream")
	}
	c := v.(*conn)
	if isDebugType(req.GetTypeUrl()) {
		return c.debugWatch(req, ch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := req.GetTypeUrl()
	ts := c.of(t)
	if ts.req == req {
		ts.req = nil
	}
	if t == HealthType {
		return func() {}, nil // a health report is never answered (register.go)
	}
	c.observe(t, req.GetResponseNonce(), req.GetVersionInfo(), req.GetErrorDetail())
	w := &sotwWatch{req: req, sub: sub, ch: ch}
	if c.wave != nil {
		defer c.checkWave() // after the answer below is handed over
	}
	if !c.unchanged(t, req, sub) && c.respondSotw(w, nil) {
		return func() {}, nil
	}
	ts.sotw = w
	return func() {
		c.mu.Lock()
		if ts.sotw == w {
			ts.sotw = nil
		}
		c.mu.Unlock()
	}, nil
}

// CreateDeltaWatch is never called: delta streams are served by
// serveDelta (deltastream.go), not by go-control-plane's delta server. It
// completes the cachev3.Cache the state-of-the-world server needs.
func (watcher) CreateDeltaWatch(*cachev3.DeltaRequest, cachev3.Subscription, chan cachev3.DeltaResponse) (func(), error) {
	return nil, status.Error(codes.Internal, "delta streams are not served through go-control-plane here")
}

// deltaWatch applies a delta request to its type's subscription and
// answers it or parks a watch; the returned func cancels the watch.
func (s *Server) deltaWatch(req *discovery.DeltaDiscoveryRequest, ch chan cachev3.DeltaResponse) (func(), error) {
	v, ok := s.reqs.LoadAndDelete(req)
	if !ok {
		return nil, status.Error(codes.Internal, "request from an unknown stream")
	}
	c := v.(*conn)
	c.mu.Lock()
	defer c.mu.Unlock()
	t := req.GetTypeUrl()
	ts := c.of(t)
	if ts.req == req {
		ts.req = nil
	}
	if t == HealthType {
		return func() {}, nil // a health report is never answered (register.go)
	}
	c.observe(t, req.GetResponseNonce(), "", req.GetErrorDetail())
	c.subscribeDelta(t, req)
	w := &deltaWatch{req: req, sub: ts.dsub, ch: ch, initial: !ts.started}
	ts.started = true
	if c.wave != nil {
		defer c.checkWave() // after the answer below is handed over
	}
	// An answer that changes no subscription needs no look at an unchanged
	// configuration.
	quiet := req.GetResponseNonce() != "" && len(req.GetResourceNamesSubscribe()) == 0 &&
		len(req.GetResourceNamesUnsubscribe()) == 0 && c.cfg != nil && knownType(t) &&
		ts.synced && len(ts.pending) == 0
	if !quiet && c.respondDelta(w, nil) {
		return func() {}, nil
	}
	ts.delta = w
	return func() {
		c.mu.Lock()
		if ts.delta == w {
			ts.delta = nil
		}
		c.mu.Unlock()
	}, nil
}

// errNoFetch is returned for REST polling, which proxies here do not use.
var errNoFetch = errors.New("fetching configuration without a stream is not supported; use ADS")

// Fetch refuses REST polling.
func (watcher) Fetch(context.Context, *discovery.DiscoveryRequest) (cachev3.Response, error) {
	return nil, status.Error(codes.Unimplemented, errNoFetch.Error())
}

// unchanged reports whether answering req needs no look at the
// configuration: it answers the last response of its type, which was sent,
// the subscription is the same, and the configuration has not changed since
// it was last compared in full. It also undoes a response go-control-plane
// dropped unsent. Called with c.mu held.
func (c *conn) unchanged(t string, req *cachev3.Request, sub cachev3.Subscription) bool {
	ts := c.of(t)
	if in := ts.inflight; in != nil {
		// Dropped: the stream never sent it, so the client lacks what it
		// marked as returned.
		ts.inflight = nil
		unmarkReturned(sub, in.names)
		ts.checked = ""
	}
	// go-control-plane builds a new map for every request and never changes
	// it after, so keeping a reference is safe.
	prev, prevWild := ts.subs, ts.wildcard
	subs := sub.SubscribedResources()
	ts.subs, ts.wildcard = subs, sub.IsWildcard()
	// Secrets (sds.go) and unknown types are not in the configuration.
	if !knownType(t) || req.GetResponseNonce() == "" || c.cfg == nil || ts.checked != c.cfg.Version(t) {
		return false
	}
	if prevWild != sub.IsWildcard() || len(prev) != len(subs) {
		return false
	}
	for n := range subs {
		if _, ok := prev[n]; !ok {
			return false
		}
	}
	return true
}
