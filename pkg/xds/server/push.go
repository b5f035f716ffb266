package server

import (
	"context"
	"sort"
	"sync"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/push"
)

// pushItem is what one proxy is due: a full push, or new endpoints of some
// services. Items for one proxy merge while they wait.
type pushItem struct {
	full bool
	// keepOwn is set when no change behind the item can change the
	// proxy's own configuration (gen.Proxy: inbound clusters and
	// listener), which a full push then reuses instead of rebuilding it
	// for every proxy.
	keepOwn  bool
	eds      map[model.NamespacedName]bool
	world    *model.World
	first    time.Time // first change behind the item
	enqueued time.Time
	records  []*record
	class    string // the proxy's class in world (matters), for push waves
}

func mergeItems(a, b *pushItem) *pushItem {
	out := &pushItem{full: a.full || b.full, keepOwn: a.keepOwn && b.keepOwn, world: b.world, first: a.first, enqueued: a.enqueued, class: b.class}
	if b.first.Before(out.first) {
		out.first = b.first
	}
	if !out.full {
		out.eds = map[model.NamespacedName]bool{}
		for k := range a.eds {
			out.eds[k] = true
		}
		for k := range b.eds {
			out.eds[k] = true
		}
	}
	out.records = append(append(out.records, a.records...), b.records...)
	return out
}

// enqueueInitial queues the first, full push of a newly identified proxy.
func (s *Server) enqueueInitial(c *conn) {
	now := time.Now()
	s.queue.Push(c, &pushItem{full: true, world: s.world.World(), first: now, enqueued: now})
}

// onPush turns one debounced Request into queued items for the proxies the
// changes matter to.
func (s *Server) onPush(_ context.Context, req *push.Request) {
	now := time.Now()
	s.m.debounce.Observe(now.Sub(req.First).Seconds())
	s.m.services.Set(float64(req.World.ServiceCount()))
	reasons := req.Reasons()
	for kind, n := range reasons {
		s.m.triggers.WithLabelValues(kind).Add(float64(n))
	}
	eps := map[model.NamespacedName]bool{}
	var others []model.Key
	for k := range req.Changes {
		switch k.Kind {
		case model.KindEndpoints:
			eps[model.NamespacedName{Namespace: k.Namespace, Name: k.Name}] = true
		case model.KindEndpointSlice:
			// Its effect arrives as a KindEndpoints change.
		default:
			others = append(others, k)
		}
	}
	rec := s.history.begin(req, reasons)
	live := map[string]bool{}
	var waved []classItem
	s.conns.Range(func(_, v any) bool {
		c := v.(*conn)
		item := s.matters(c, req.World, others, eps, live)
		if item == nil {
			return true
		}
		item.first, item.enqueued, item.records = req.First, now, []*record{rec}
		rec.enqueue(item.full)
		if !s.opts.PushWave.Off() {
			waved = append(waved, classItem{c: c, class: item.class, item: item})
			return true
		}
		s.queue.Push(c, item)
		return true
	})
	if waved != nil {
		s.waves.dispatch(waved, rec)
	}
	rec.enqueued()
	s.classes.forget(live)
}

// matters decides what a change means for one proxy: nothing, new
// endpoints for the services it sees, or a full push.
func (s *Server) matters(c *conn, w *model.World, others []model.Key, eps map[model.NamespacedName]bool, live map[string]bool) *pushItem {
	c.mu.Lock()
	p, cfg := c.proxy, c.cfg
	c.mu.Unlock()
	if p == nil {
		return nil // not identified yet; its initial push reads the newest World
	}
	// The class can change with the World (a Sidecar selecting the
	// workload, a VirtualService matching its labels): then everything
	// is regenerated for the new class.
	key := gen.ClassKey(w, p)
	live[key] = true
	if cfg == nil || cfg.Class.Class != key {
		return &pushItem{full: true, world: w, class: key}
	}
	scope := cfg.Class.Scope()
	for _, k := range others {
		if changeMatters(k, p, w, scope) {
			return &pushItem{full: true, keepOwn: ownUnchanged(others), world: w, class: key}
		}
	}
	var seen map[model.NamespacedName]bool
	for nn := range eps {
		if scope.Visible(nn) {
			if svc := w.Service(nn.Namespace, nn.Name); svc != nil && p.Type == model.ProxySidecar && gen.EndpointsShapeListeners(svc) {
				// Its endpoints are listener chains too (headless TCP).
				return &pushItem{full: true, world: w, class: key}
			}
			if seen == nil {
				seen = map[model.NamespacedName]bool{}
			}
			seen[nn] = true
		}
	}
	if seen == nil {
		return nil
	}
	return &pushItem{eds: seen, keepOwn: true, world: w, class: key}
}

// changeMatters reports whether a change to k can alter what proxy p is
// sent, judged by the new World w and the scope p's configuration was
// built from.
func changeMatters(k model.Key, p *model.Proxy, w *model.World, old *gen.Scope) bool {
	nn := model.NamespacedName{Namespace: k.Namespace, Name: k.Name}
	switch k.Kind {
	case model.KindService:
		if k.Namespace == p.Namespace || old.Visible(nn) {
			return true
		}
		svc := w.Service(k.Namespace, k.Name)
		return svc != nil && gen.ServiceExportedTo(w, svc, p.Namespace) ||
			gen.ExtAuthzServiceChanged(w, old.World, k.Namespace, k.Name)
	case model.KindVirtualService, model.KindDestinationRule:
		return configVisible(w, k, p.Namespace) || configVisible(old.World, k, p.Namespace)
	case model.KindGateway:
		return p.Type == model.ProxyRouter
	case model.KindPod:
		return k.Namespace == p.Namespace && k.Name == p.PodName
	case model.KindSidecar:
		return k.Namespace == p.Namespace || k.Namespace == gen.RootNamespace(w)
	case model.KindPeerAuthentication:
		// It shapes the inbound configuration of the proxies of its
		// namespace (the root namespace's: of every proxy) and, through
		// auto mTLS, the clusters and endpoints of every client of its
		// namespace's services (gen/endpoint_mtls.go). istiod pushes
		// every proxy.
		return k.Namespace == p.Namespace || k.Namespace == gen.RootNamespace(w) ||
			k.Namespace == gen.RootNamespace(old.World) || old.SeesNamespace(k.Namespace)
	case model.KindAuthorizationPolicy, model.KindRequestAuthentication:
		// They shape the configuration of the workloads they select (a
		// sidecar's inbound side, a gateway's listeners: gen/authz.go,
		// gen/authn_jwt.go), before or after the change. A change of the
		// root namespace is a MeshConfig change, which pushes everyone.
		return gen.PolicyApplies(w, k, p) || gen.PolicyApplies(old.World, k, p)
	case model.KindJWKS:
		// A fetched key set is inlined where a policy names it.
		issuer, uri := model.JWKSKeyParts(k)
		return gen.JWKSNeeded(w, p, issuer, uri) || gen.JWKSNeeded(old.World, p, issuer, uri)
	case model.KindTelemetry:
		// Root and namespace Telemetry shape every listener of the
		// proxies they apply to; a selecting one also moves the proxies
		// it selects to another class (ClassKey).
		return k.Namespace == p.Namespace || k.Namespace == gen.RootNamespace(w)
	case model.KindEnvoyFilter:
		// Its patches reach the proxies it selects (whose class key
		// names it: gen/envoyfilter.go), before or after the change.
		return gen.EnvoyFilterApplies(w, k, p) || gen.EnvoyFilterApplies(old.World, k, p)
	case model.KindWasmPlugin:
		// Its filters and extension reach the proxies it selects (whose
		// class key names it: gen/wasm.go), before or after the change.
		return gen.WasmPluginApplies(w, k, p) || gen.WasmPluginApplies(old.World, k, p)
	case model.KindMeshConfig:
		return true // mesh-wide, as istiod's full push on a mesh change
	case model.KindNode:
		// A Node's locality reaches proxies through their class key (a
		// proxy on it moves class) and the endpoints of the pods on it
		// (KindEndpoints changes).
		return false
	case model.KindCAConfigMap:
		// Read only by the Gateway API translation: its effect arrives
		// as a change of the DestinationRule it derives.
		return false
	}
	if k.Kind.IsGatewayAPI() {
		// Generation reads the Istio Gateways and VirtualServices the
		// Store derives from them: their effect arrives as those changes.
		return false
	}
	return true
}

// ownUnchanged reports whether none of the changes can change a proxy's
// own configuration: gen.Proxy reads the proxy's pod, the Services that
// select it, PeerAuthentication, AuthorizationPolicy, Sidecar ingress and
// ServiceEntry/WorkloadEntry, never routing configuration.
func ownUnchanged(changes []model.Key) bool {
	for _, k := range changes {
		switch k.Kind {
		case model.KindVirtualService, model.KindDestinationRule, model.KindGateway, model.KindNode, model.KindCAConfigMap:
		default:
			return false
		}
	}
	return true
}

func configVisible(w *model.World, k model.Key, ns string) bool {
	c := w.Config(k.Kind, k.Namespace, k.Name)
	if c == nil {
		return false
	}
	switch o := c.Object.(type) {
	case *networkingv1.VirtualService:
		if len(o.Spec.GetHosts()) == 0 {
			// A delegate: its exportTo names its roots' namespaces; it
			// matters where a root that names it is seen.
			return gen.DelegatedTo(w, k, ns)
		}
		return gen.VirtualServiceExportedTo(w, &o.Spec, k.Namespace, ns)
	case *networkingv1.DestinationRule:
		// One with a workloadSelector applies in its own namespace only,
		// whatever its exportTo: there to the proxies it selects, which a
		// changed selection also moves to another class (ClassKey).
		return gen.DestinationRuleExportedTo(w, &o.Spec, k.Namespace, ns)
	}
	return true
}

// work prepares one proxy's push: its class's configuration (generated
// once per class and World), its own part, and the answer to its watches.
func (s *Server) work(_ context.Context, c *conn, item *pushItem) {
	start := time.Now()
	s.m.queueTime.Observe(start.Sub(item.enqueued).Seconds())
	c.mu.Lock()
	p, prev, closed := c.proxy, c.cfg, c.closed
	c.mu.Unlock()
	if closed || p == nil {
		return
	}
	kind := "full"
	var svcs []model.NamespacedName
	if !item.full && prev != nil {
		svcs = make([]model.NamespacedName, 0, len(item.eds))
		for nn := range item.eds {
			svcs = append(svcs, nn)
		}
		sort.Slice(svcs, func(i, j int) bool { return svcs[i].String() < svcs[j].String() })
	}
	// Clusters verify the service accounts of their endpoints (Envoy and
	// proxyless gRPC): an endpoint change that changes them needs the
	// clusters, not only the endpoints.
	if item.full || prev == nil || gen.IdentitiesChanged(prev.Class, item.world, svcs) {
		cls := s.classes.full(s.gen, item.world, p)
		if cls == nil {
			return // logged by the generator; nothing good to send yet
		}
		var pc *gen.ProxyConfig
		if item.keepOwn && prev != nil {
			pc = &gen.ProxyConfig{Class: cls, Own: prev.Own, InboundPorts: prev.InboundPorts}
		} else {
			pc = s.gen.Proxy(item.world, p, cls)
		}
		c.setConfig(pc, changedSince(prev, pc), item.first)
	} else {
		kind = "eds"
		cls := s.classes.endpoints(s.gen, item.world, p, svcs)
		if cls == nil {
			return // logged by the generator; nothing good to send yet
		}
		var names []string
		for _, nn := range svcs {
			names = append(names, cls.EndpointsOf[nn]...)
		}
		pc := &gen.ProxyConfig{Class: cls, Own: prev.Own, InboundPorts: prev.InboundPorts}
		c.setConfig(pc, map[string][]string{gen.EndpointType: names}, item.first)
	}
	s.m.pushTime.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	for _, r := range item.records {
		r.done()
	}
}

// changedSince lists, per type, what differs between a proxy's previous
// configuration and next, when next's class configuration was derived
// directly from prev's; nil (compare everything) otherwise. Types whose
// version did not change are left out.
func changedSince(prev, next *gen.ProxyConfig) map[string][]string {
	if prev == nil || next.Class.Base == 0 || next.Class.Base != prev.Class.ID {
		return nil
	}
	out := map[string][]string{}
	for _, t := range gen.TypeURLs {
		if prev.Version(t) == next.Version(t) {
			continue
		}
		if setVersion(prev.Own[t]) != setVersion(next.Own[t]) {
			out[t] = nil // own part changed: compare in full
			continue
		}
		// State-of-the-world Cluster and Listener responses carry every
		// resource whatever the names (respondSotw); delta ones only these.
		out[t] = next.Class.Changed[t]
	}
	return out
}

// classCache holds the newest configuration of every proxy class.
type classCache struct {
	mu      sync.Mutex
	entries map[string]*classEntry
}

type classEntry struct {
	mu  sync.Mutex
	cfg *gen.ClassConfig
}

func (cc *classCache) entry(class string) *classEntry {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	e := cc.entries[class]
	if e == nil {
		e = &classEntry{}
		cc.entries[class] = e
	}
	return e
}

// full returns the class's configuration for w (or newer), generating it
// once for all the class's proxies. On a generation failure it returns the
// last good configuration, or nil if there is none.
func (cc *classCache) full(g *gen.Generator, w *model.World, p *model.Proxy) *gen.ClassConfig {
	e := cc.entry(gen.ClassKey(w, p))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cfg != nil && e.cfg.WorldVersion >= w.Version {
		return e.cfg
	}
	cfg, _ := g.Class(w, p, e.cfg)
	if cfg != nil {
		e.cfg = cfg
	}
	return e.cfg
}

// endpoints returns the class's configuration with the endpoints of svcs
// taken from w, updating it once for all the class's proxies.
func (cc *classCache) endpoints(g *gen.Generator, w *model.World, p *model.Proxy, svcs []model.NamespacedName) *gen.ClassConfig {
	e := cc.entry(gen.ClassKey(w, p))
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.cfg == nil:
		cfg, _ := g.Class(w, p, nil)
		e.cfg = cfg
	case e.cfg.WorldVersion < w.Version:
		e.cfg, _ = g.UpdateEndpoints(e.cfg, w, svcs)
	}
	return e.cfg
}

// forget drops classes without proxies, so their memory goes.
func (cc *classCache) forget(keep map[string]bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for k := range cc.entries {
		if !keep[k] {
			delete(cc.entries, k)
		}
	}
}

func setVersion(s *gen.Set) string {
	if s == nil {
		return ""
	}
	return s.Version
}
