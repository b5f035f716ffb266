package server

import (
	"slices"
	"sort"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Delta streams: what a stream holds, and the responses that bring it up to
// date (respondDelta). State of the world is in conn.go.

// respondDelta answers w with the resources whose version the stream does
// not have and the names that no longer exist. dirty, when not nil, limits
// the names to look at. Called with c.mu held; reports whether a response
// was handed over.
//
// What the stream holds is its base (a configuration it was brought fully
// up to date with) overridden by its subscription's map (returned; ""
// means it holds nothing of that name). Keeping a name -> version map of
// every resource per stream was most of the server's memory at 1,000
// proxies (a megabyte each); the base is shared by the proxies of a
// class. Every response brings the stream up to date and makes the
// current configuration its base, with an empty map; between responses
// the map holds what requests change (names subscribed anew or
// unsubscribed: held nothing). The stream's loop sends every handed
// response before it reads the next request (deltastream.go), so none
// is dropped.
func (c *conn) respondDelta(w *deltaWatch, dirty []string) bool {
	if c.cfg == nil {
		return false
	}
	t := w.req.GetTypeUrl()
	if t == gen.SecretType {
		return c.respondSecretDelta(w)
	}
	if !knownType(t) {
		if !w.initial {
			return false
		}
		c.logger().Warn("request for a type this server does not serve; answered with no resources", "type", t)
		return c.deliverDelta(w, &discovery.DeltaDiscoveryResponse{TypeUrl: t}, map[string]string{})
	}
	ts := c.of(t)
	returned := w.sub.returned
	dirty = c.deltaNames(w, dirty, returned)
	wh, sent, send, removed := c.wholeOrDiff(w, dirty, returned)
	version := c.cfg.Version(t)
	// From here the stream is right for every name but those the
	// response carries, which it returns below.
	ts.synced = true
	ts.pending = nil
	if !sent && len(send) == 0 && len(removed) == 0 && !w.initial {
		return false
	}
	sort.Slice(send, func(i, j int) bool { return send[i].Name < send[j].Name })
	sort.Strings(removed)
	resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: version, TypeUrl: t, RemovedResources: removed}
	// Once sent, the stream holds the current version of every
	// subscribed name: compared in full (dirty nil), or only dirty,
	// which deltaNames gives only for a stream synced (right for every
	// name but the pending ones, which dirty holds). So the current
	// configuration becomes its base and its map starts empty (the
	// response installs it), as after a full comparison. When pushes
	// left their names in the map instead, it grew up to
	// maxDeltaOverrides (512 names per type and stream) under churn.
	// (wholeOrDiff sends a class's set whole only for a full comparison.)
	if !c.deliverResources(w, resp, map[string]string{}, wh, send) {
		ts.synced = false
		return false
	}
	ts.base = baseOf(c.cfg, t)
	if sent {
		c.s.wholeSent.Add(1)
	}
	return true
}

// deltaNames decides which names a delta response looks at: dirty plus
// the names pushes changed while no watch was open, or (nil) every name
// when nothing is known of the stream or its own map grew too large.
func (c *conn) deltaNames(w *deltaWatch, dirty []string, returned map[string]string) []string {
	ts := c.of(w.req.GetTypeUrl())
	switch {
	case !ts.synced:
		return nil // nothing known: compare in full
	case dirty != nil && len(ts.pending) > 0:
		dirty = withPending(dirty, ts.pending)
	case dirty == nil && len(ts.pending) > 0 && w.req.GetResponseNonce() != "" &&
		len(w.req.GetResourceNamesSubscribe())+len(w.req.GetResourceNamesUnsubscribe()) == 0:
		// An ACK after pushes that found no open watch: only what they
		// changed.
		dirty = withPending(nil, ts.pending)
	case dirty == nil && !w.initial && changesNamesOnly(w.req):
		// A change of subscription on a stream that holds the rest: the
		// names it subscribes (those it unsubscribes are dropped from the
		// map already) and what pushes changed while no watch was open.
		// After a service is added every proxy subscribes to its routes
		// and endpoints; comparing every name then cost more than the
		// push that caused it.
		dirty = withPending(w.req.GetResourceNamesSubscribe(), ts.pending)
	}
	if dirty != nil && len(returned) > maxDeltaOverrides {
		// Compare in full once, and start again from the current
		// configuration with an empty map.
		return nil
	}
	return dirty
}

// changesNamesOnly reports whether req changes the stream's subscription
// by naming resources, not by subscribing to the wildcard.
func changesNamesOnly(req *discovery.DeltaDiscoveryRequest) bool {
	sub := req.GetResourceNamesSubscribe()
	return len(sub)+len(req.GetResourceNamesUnsubscribe()) > 0 && !slices.Contains(sub, "*")
}

// deltaDiff lists what the stream lacks of the configuration among names
// (nil: every subscribed name) and what it holds that is gone.
func (c *conn) deltaDiff(w *deltaWatch, names []string, returned map[string]string) (send []*gen.Resource, removed []string) {
	t := w.req.GetTypeUrl()
	wildcard, subscribed := w.sub.wildcard, &w.sub.names
	base := c.of(t).base
	has := func(n string) string {
		if v, ok := returned[n]; ok {
			return v
		}
		return base.hash(n)
	}
	// A stream that holds nothing (its first response) is sent
	// everything: the list is sized once.
	fresh := !base.set() && len(returned) == 0
	visit := func(n string) {
		held := has(n)
		if held == "" {
			// Nothing held (as every name of a stream's first
			// response): whatever exists is sent, its version unread.
			if r := c.cfg.Get(t, n); r != nil {
				send = append(send, r)
			}
			return
		}
		// By version first: a variant's listener is made by Get.
		h, ok := c.cfg.Hash(t, n)
		switch {
		case !ok:
			removed = append(removed, n)
		case held != h:
			send = append(send, c.cfg.Get(t, n))
		}
	}
	switch {
	case names != nil:
		for _, n := range names {
			if wildcard || subscribed.has(n) {
				visit(n)
			}
		}
	case wildcard:
		if fresh {
			send = make([]*gen.Resource, 0, c.cfg.Len(t))
		}
		for _, n := range c.cfg.Names(t) {
			visit(n)
		}
		for n, v := range returned {
			if v != "" && !c.cfg.Has(t, n) {
				removed = append(removed, n)
			}
		}
		for _, n := range base.names() {
			if _, over := returned[n]; !over && !c.cfg.Has(t, n) {
				removed = append(removed, n)
			}
		}
	default:
		if fresh {
			send = make([]*gen.Resource, 0, subscribed.len())
		}
		for n := range subscribed.all() {
			visit(n)
		}
	}
	return send, removed
}

// typeBase is what a delta stream was last fully brought up to date with
// for one type: the versions of its class's set and of its own. Only the
// versions are kept, not the sets (which would hold the marshaled
// resources of that generation; see gen.Versions) nor the configuration
// around them (which would hold its World).
type typeBase struct{ cls, own *gen.Versions }

func baseOf(cfg *gen.ProxyConfig, t string) typeBase {
	return typeBase{cls: cfg.Class.Sets[t].Versions(), own: cfg.Own[t].Versions()}
}

func (b typeBase) set() bool { return b.cls != nil || b.own != nil }

// hash returns the version the base holds of n, "" if none.
func (b typeBase) hash(n string) string {
	if h, ok := b.own.Hash(n); ok {
		return h
	}
	h, _ := b.cls.Hash(n)
	return h
}

// has reports whether the base holds a version of n.
func (b typeBase) has(n string) bool { return b.hash(n) != "" }

func (b typeBase) names() []string {
	out := make([]string, 0, b.cls.Len()+b.own.Len())
	out = append(out, b.cls.Names()...)
	return append(out, b.own.Names()...)
}

// maxDeltaOverrides is how many names a delta stream's own map may hold
// (the marks of the requests since its last response; see respondDelta)
// before the next response compares in full.
const maxDeltaOverrides = 512

// noteDeltaRequest remembers which names a delta request subscribes to
// anew, before they join the stream's set: a name subscribed again
// (clients may repeat their whole list) is still held. Called with c.mu
// held, on the stream's goroutine.
func (c *conn) noteDeltaRequest(t string, req *discovery.DeltaDiscoveryRequest) {
	ts := c.of(t)
	if ts.dsub == nil {
		// Every name is new: the request's own list, which nothing
		// changes (copying it was 64 MB while M1's proxies connected).
		ts.dnew = req.GetResourceNamesSubscribe()
		return
	}
	var fresh []string
	for _, n := range req.GetResourceNamesSubscribe() {
		if !ts.dsub.names.has(n) {
			fresh = append(fresh, n)
		}
	}
	ts.dnew = fresh
}

// subscribeDelta applies a delta request to the stream's subscription of
// t, and records, for the names it newly subscribes or unsubscribes, that
// the stream holds nothing of them: the base says otherwise for names it
// holds, and unsubscribed names have just left the stream's map. Called
// with c.mu held.
func (c *conn) subscribeDelta(t string, req *discovery.DeltaDiscoveryRequest) {
	ts := c.of(t)
	if ts.dsub == nil {
		ts.dsub = newDeltaSub(c.s.names, req, legacyWildcard(t))
	} else {
		ts.dsub.update(c.s.names, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	}
	fresh := ts.dnew
	ts.dnew = nil
	base := ts.base
	if !knownType(t) || !base.set() {
		return
	}
	markHeldNothing(ts.dsub.returned, base, fresh)
	markHeldNothing(ts.dsub.returned, base, req.GetResourceNamesUnsubscribe())
}

// deliverDelta hands resp, whose resources are protos, to w's stream.
func (c *conn) deliverDelta(w *deltaWatch, resp *discovery.DeltaDiscoveryResponse, next map[string]string) bool {
	r := &cachev3.DeltaPassthroughResponse{DeltaRequest: w.req, DeltaDiscoveryResponse: resp, NextVersionMap: next}
	if !c.hand(w, r, next, whole{}, nil) {
		return false
	}
	size := 0
	for _, r := range resp.GetResources() {
		size += len(r.GetResource().GetValue())
	}
	c.deliveredSize(resp.GetTypeUrl(), size)
	return true
}

// deliverResources hands w's stream resp with the resources send, of
// resp's type, which the codec writes from the generator's resources
// (resourcesResponse).
func (c *conn) deliverResources(w *deltaWatch, resp *discovery.DeltaDiscoveryResponse, next map[string]string, wh whole, send []*gen.Resource) bool {
	r := &resourcesResponse{
		DeltaPassthroughResponse: &cachev3.DeltaPassthroughResponse{DeltaRequest: w.req, DeltaDiscoveryResponse: resp, NextVersionMap: next},
		whole:                    wh,
		send:                     send,
	}
	if !c.hand(w, r, next, wh, send) {
		return false
	}
	size := 0
	switch {
	case wh.set != nil:
		size = wh.set.size
	case wh.view != nil:
		size = wh.view.Size()
	}
	for _, r := range send {
		size += r.Size()
	}
	c.deliveredSize(resp.GetTypeUrl(), size)
	return true
}

// hand puts r on w's channel; whole and send are its resources when the
// response does not carry them (resourcesResponse).
func (c *conn) hand(w *deltaWatch, r cachev3.DeltaResponse, next map[string]string, wh whole, send []*gen.Resource) bool {
	resp, _ := r.GetDeltaDiscoveryResponse()
	select {
	case w.ch <- r:
		if c.s.observer != nil {
			var shared, names []string
			switch {
			case wh.set != nil:
				shared = wh.set.names
			case wh.view != nil:
				shared = wh.view.Names
			}
			if n := len(resp.GetResources()) + len(send); n > 0 {
				names = make([]string, 0, n)
			}
			for _, r := range resp.GetResources() {
				names = append(names, r.GetName())
			}
			for _, r := range send {
				names = append(names, r.Name)
			}
			c.handed(resp.GetTypeUrl(), resp, shared, names)
		}
		w.sub.returned = next
	default:
		c.logger().Error("xDS response channel full; response dropped", "type", resp.GetTypeUrl())
		return false
	}
	return true
}

// resourcesResponse is a delta response whose resources are send, not
// the response's own: the stream sends it as a deltaWire, which the codec
// writes from the generator's resources, sharing their bytes and making
// a lazy resource's (a variant's listener) from its parts.
//
// The response carried a discovery.Resource (and for a lazy resource an
// Any) per resource before. At M1 those were 1.3 of the 10 GB allocated
// while 1,000 proxies connected, and 1.3 MB of live heap per stream
// whose response waited to be written (BENCHMARKS.md).
type resourcesResponse struct {
	*cachev3.DeltaPassthroughResponse
	whole whole
	send  []*gen.Resource
}

// deferDelta records names of t changed while the delta stream had no open
// watch (nil: unknown, compare in full next time). Called with c.mu held.
func (c *conn) deferDelta(t string, names []string) {
	ts := c.of(t)
	if names == nil || !ts.synced {
		ts.synced = false
		ts.pending = nil
		return
	}
	p := ts.pending
	if p == nil {
		p = make(map[string]struct{}, len(names))
		ts.pending = p
	}
	for _, n := range names {
		p[n] = struct{}{}
	}
}

// withPending returns dirty plus the pending names not already in it.
func withPending(dirty []string, pending map[string]struct{}) []string {
	out := make([]string, 0, len(dirty)+len(pending))
	seen := make(map[string]struct{}, len(dirty))
	for _, n := range dirty {
		if _, dup := seen[n]; !dup {
			seen[n] = struct{}{}
			out = append(out, n)
		}
	}
	for n := range pending {
		if _, dup := seen[n]; !dup {
			out = append(out, n)
		}
	}
	return out
}
