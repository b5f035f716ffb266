package server

import (
	"context"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/streamauth"
)

// callbacks observe go-control-plane's streams: they register conns,
// identify proxies, and record what was sent.
type callbacks struct{ s *Server }

var _ serverv3.Callbacks = callbacks{}

func (cb callbacks) open(ctx context.Context, key streamKey) error {
	ctl, _ := ctx.Value(ctlKey{}).(*streamCtl)
	if ctl == nil {
		ctl = newStreamCtl()
	}
	c := newConn(cb.s, key, ctl, ctx.Done())
	if id, ok := streamauth.Caller(ctx); ok {
		c.caller = &id
	}
	cb.s.conns.Store(key, c)
	return nil
}

func (cb callbacks) closed(key streamKey) {
	v, ok := cb.s.conns.LoadAndDelete(key)
	if !ok {
		return
	}
	c := v.(*conn)
	c.warmed()
	cb.s.queue.Remove(c)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, ts := range c.types {
		if ts.req != nil {
			cb.s.reqs.Delete(ts.req)
		}
	}
	c.unregister()
	if c.proxy != nil {
		cb.s.m.proxies.Dec()
		c.logger().Info("proxy disconnected", "connected", time.Since(c.connected).Round(time.Millisecond).String())
	}
}

// request identifies the proxy on its first request and registers the
// request for the CreateWatch call that follows.
func (cb callbacks) request(key streamKey, typeURL string, node *corev3.Node, req any) error {
	v, ok := cb.s.conns.Load(key)
	if !ok {
		return status.Error(codes.Internal, "request on an unknown stream")
	}
	c := v.(*conn)
	if err := cb.warming(c, typeURL, req); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := cb.s.checkNode(node); err != nil {
		cb.s.refusals.Warn("node", "refused xDS stream", "error", err)
		return err
	}
	if isDebugType(typeURL) {
		if err := c.debugRequest(typeURL); err != nil {
			return err
		}
		cb.register(c, typeURL, req)
		return nil
	}
	if c.debugOnly {
		return status.Error(codes.InvalidArgument, "this stream asked for Istio's debug types; configuration needs a stream of its own")
	}
	if c.proxy == nil {
		p, err := parseNode(node)
		if err != nil {
			cb.s.refusals.Warn("node", "refused xDS stream", "error", model.Clip(err.Error()))
			return status.Error(codes.InvalidArgument, model.Clip(err.Error()))
		}
		if err := c.register(p); err != nil {
			cb.s.refusals.Warn("registration", "refused xDS stream", "proxy", model.Clip(p.ID), "error", model.Clip(err.Error()))
			return err
		}
		c.proxy = p
		cb.s.m.proxies.Inc()
		c.logger().Info("proxy connected", "class", p.Class(), "delta", key.delta)
		cb.s.enqueueInitial(c)
	}
	if typeURL == HealthType {
		// Never answered (watcher parks no watch for it).
		c.health(req)
		cb.register(c, typeURL, req)
		return nil
	}
	// misses counts the request's names c's configuration does not hold
	// (all of them before it is known), for checkNames; it counts a
	// delta request's itself.
	var misses int
	switch r := req.(type) {
	case *discovery.DiscoveryRequest:
		misses = intern(c.cfg, typeURL, r.ResourceNames)
	case *discovery.DeltaDiscoveryRequest:
		// Not interned: a delta stream keeps its names in a set shared
		// through the pool (subscription.go), whose strings are the
		// first stream's; the request's go with the request. Interning
		// looked up every name of every first request (4,000 per proxy
		// at M1), 4% of the server's CPU while proxies connected.
		c.noteDeltaRequest(typeURL, r)
	}
	if err := c.checkNames(typeURL, req, misses); err != nil {
		cb.s.refusals.Warn("names", "refused xDS stream", "proxy", model.Clip(c.proxy.ID), "type", gen.ShortType(typeURL), "error", err)
		return err
	}
	cb.register(c, typeURL, req)
	return nil
}

// warming admits a new stream's configuration requests (warming.go): a
// stream waits here, before its proxy is registered, while as many as may
// are given their first configuration, and is warm once it answers its
// first listeners or routes. Debug and health requests are not admitted.
func (cb callbacks) warming(c *conn, typeURL string, req any) error {
	if isDebugType(typeURL) || typeURL == HealthType {
		return nil
	}
	if err := cb.s.admitWarming(c); err != nil {
		return err
	}
	if (typeURL == gen.ListenerType || typeURL == gen.RouteType) && responseNonce(req) != "" {
		c.warmed()
	}
	return nil
}

// responseNonce is the nonce a request answers ("" for none).
func responseNonce(req any) string {
	switch r := req.(type) {
	case *discovery.DiscoveryRequest:
		return r.GetResponseNonce()
	case *discovery.DeltaDiscoveryRequest:
		return r.GetResponseNonce()
	}
	return ""
}

// register keeps req for the CreateWatch call that follows. Called with
// c.mu held.
func (cb callbacks) register(c *conn, typeURL string, req any) {
	ts := c.of(typeURL)
	if old := ts.req; old != nil {
		cb.s.reqs.Delete(old)
	}
	ts.req = req
	cb.s.reqs.Store(req, c)
}

// intern replaces each name that cfg holds by the resource's own name
// string, and returns how many it does not hold (all, while cfg is nil or
// for a type it does not generate). go-control-plane keeps a
// state-of-the-world stream's names for the stream's life; decoded from
// the request they were a copy per proxy (about 4,000 names, 250 KB, per
// proxy at M1), interned they are shared by the class.
func intern(cfg *gen.ProxyConfig, typeURL string, names []string) (misses int) {
	if cfg == nil || !knownType(typeURL) {
		return len(names)
	}
	for i, n := range names {
		// Name, not Get: Get makes a variant's listener.
		if own, ok := cfg.Name(typeURL, n); ok {
			names[i] = own
		} else {
			misses++
		}
	}
	return misses
}

func parseNode(node *corev3.Node) (*model.Proxy, error) {
	if node.GetId() == "" {
		return nil, &model.NodeError{Field: "id", Reason: "the first request carries no node ID; expected " + model.NodeIDForm}
	}
	p, err := model.ParseProxy(node.GetId(), node.GetMetadata().AsMap())
	if err != nil {
		return nil, err
	}
	p.ServiceCluster = node.GetCluster()
	if l := node.GetLocality(); l != nil {
		p.NodeLocality = model.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}
	}
	return p, nil
}

func (cb callbacks) sent(key streamKey, typeURL, version, nonce string, resp any) {
	v, ok := cb.s.conns.Load(key)
	if !ok || isDebugType(typeURL) {
		return
	}
	c := v.(*conn)
	c.mu.Lock()
	if ts := c.of(typeURL); ts.inflight != nil && any(ts.inflight.resp) == resp {
		ts.inflight = nil
	}
	st := c.typeStatus(typeURL)
	st.SentVersion, st.SentNonce, st.Sent = version, nonce, time.Now()
	c.sentNonce(typeURL, resp, nonce)
	c.mu.Unlock()
	cb.s.m.pushes.WithLabelValues(gen.ShortType(typeURL)).Inc()
}

// OnStreamOpen registers a state-of-the-world stream.
func (cb callbacks) OnStreamOpen(ctx context.Context, id int64, _ string) error {
	return cb.open(ctx, streamKey{id: id})
}

// OnStreamClosed forgets a state-of-the-world stream.
func (cb callbacks) OnStreamClosed(id int64, _ *corev3.Node) { cb.closed(streamKey{id: id}) }

// OnDeltaStreamOpen registers a delta stream.
func (cb callbacks) OnDeltaStreamOpen(ctx context.Context, id int64, _ string) error {
	return cb.open(ctx, streamKey{delta: true, id: id})
}

// OnDeltaStreamClosed forgets a delta stream.
func (cb callbacks) OnDeltaStreamClosed(id int64, _ *corev3.Node) {
	cb.closed(streamKey{delta: true, id: id})
}

// OnStreamRequest handles a state-of-the-world request.
func (cb callbacks) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	return cb.request(streamKey{id: id}, req.GetTypeUrl(), req.GetNode(), req)
}

// OnStreamDeltaRequest handles a delta request.
func (cb callbacks) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	return cb.request(streamKey{delta: true, id: id}, req.GetTypeUrl(), req.GetNode(), req)
}

// OnStreamResponse records a sent state-of-the-world response.
func (cb callbacks) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	cb.sent(streamKey{id: id}, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), resp)
}

// OnStreamDeltaResponse records a sent delta response.
func (cb callbacks) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	cb.sent(streamKey{delta: true, id: id}, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce(), resp)
}

// OnFetchRequest refuses REST polling.
func (callbacks) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error {
	return status.Error(codes.Unimplemented, errNoFetch.Error())
}

// OnFetchResponse is not called: fetching is refused.
func (callbacks) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}
