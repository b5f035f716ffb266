package gen

import (
	"sync"
	"sync/atomic"

	"github.com/meshplane/discovery/pkg/model"
)

// partCache shares the clusters and endpoints of a service between proxy
// classes. They depend on the service, its endpoints, the DestinationRule
// the class sees for it, whether the class is proxyless gRPC, whether
// the clusters are ORIGINAL_DST (a passthrough service on a sidecar, not
// on a gateway) and whether they use the downstream protocol (a sniffed
// port on a sidecar, cluster_outbound.go) and the MeshConfig (connect timeout,
// auto mTLS, trust domain aliases, locality load balancing), nothing
// else: sidecar classes of different namespaces (one per namespace) get
// the same resources. Where a locality load balancing setting makes the
// service's endpoints depend on the class's proxies (endpoint_locality.go), the
// part holds them per view of the proxies (lbDeps.view); its clusters,
// which do not depend on it, are still one for all. Without sharing,
// every class generated and held its own copy (50 namespace classes at
// M1: 50 times the CPU when proxies connect and 50 copies of the largest
// part of the configuration).
type partCache struct {
	mu sync.Mutex
	m  map[partKey]*part
}

// partKey is what a class chooses of a service's part: the classes that
// agree on it share the part. Everything else the part depends on it
// read from the World, and records (part.reads): a part is taken only
// where those reads stand (standsBetween).
type partKey struct {
	svc        model.NamespacedName
	grpc       bool
	origDst    bool
	downstream bool
	// drc is the DestinationRule the class chose for the service (classes
	// of different namespaces may choose different rules).
	drc *model.Config
}

// part is one service's clusters and endpoints for one partKey, built
// once in one World.
type part struct {
	once sync.Once
	// built is set once the fields below are (others read them after).
	built atomic.Bool
	// at is the World the part was built in (worldRef: the part does
	// not keep it).
	at                  worldRef
	clusters, endpoints []*Resource
	edsRefs             []string
	// local is set when the endpoints depend on the class's proxies:
	// endpoints is then empty and views holds them per view.
	local bool
	// reads are what the clusters and endpoints were built from.
	reads *Reads
	mu    sync.Mutex
	views map[string]*viewPart
}

// viewPart is a service's endpoints for one view of the proxies.
type viewPart struct {
	once      sync.Once
	built     atomic.Bool
	at        worldRef
	endpoints []*Resource
	reads     *Reads
}

// partOf is what a class gets of a part: its clusters, and its endpoints
// for the class's view.
type partOf struct {
	clusters, endpoints []*Resource
	edsRefs             []string
}

// get returns the part of svc for the class of sc, building it on first
// use, or again when what it read does not stand in sc's World; the cache
// keeps the part of the newest World. Concurrent callers for the same
// part wait for one build.
func (pc *partCache) get(g *Generator, sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, drc *model.Config) partOf {
	w := sc.w.unrecorded() // the part records its reads (build)
	td := w.TrafficDistribution(svc)
	k := partKey{svc: svc.Key(), grpc: sc.Proxy.IsGRPC(), origDst: originalDst(sc.Proxy, svc), downstream: sniffsAny(sc.Proxy, svc), drc: drc}
	deps := w.localityDeps(drc, td)
	build := func(p *part) {
		p.once.Do(func() {
			// Every class sharing the part reads the same: the part
			// holds what its resources read.
			p.at, p.local, p.reads = refOf(w), !deps.empty(), newReads()
			psc := sc.recording(p.reads)
			psc.w.Service(svc.Namespace, svc.Name)
			psc.w.Endpoints(svc.Namespace, svc.Name)
			psc.w.TrafficDistribution(svc)
			psc.w.peerAuthentications(svc.Namespace)
			psc.w.localityDeps(drc, td)
			u := unit{localEndpoints: p.local}
			g.outboundClusters(psc, svc, eps, &u)
			p.clusters, p.endpoints, p.edsRefs = u.clusters, u.endpoints, u.edsRefs
			p.reads.seal()
			p.built.Store(true)
		})
	}
	pc.mu.Lock()
	if pc.m == nil {
		pc.m = map[partKey]*part{}
	}
	p := pc.m[k]
	if p == nil {
		p = &part{}
		pc.m[k] = p
	}
	if n := w.ServiceCount(); len(pc.m) > 2*n+64 {
		pc.sweepLocked(w.w)
	}
	pc.mu.Unlock()
	build(p)
	if !p.at.standsIn(p.reads, w) {
		np := &part{}
		build(np)
		pc.mu.Lock()
		if cur := pc.m[k]; cur == p || cur == nil || !cur.built.Load() || cur.at.version <= np.at.version {
			pc.m[k] = np
		}
		pc.mu.Unlock()
		p = np
	}
	// What the part read, the class read.
	sc.w.r.add(p.reads)
	if !p.local {
		return partOf{p.clusters, p.endpoints, p.edsRefs}
	}
	t := sc.topology()
	vp := p.view(deps.view(&t), nil)
	buildView := func(vp *viewPart) {
		vp.once.Do(func() {
			vp.at, vp.reads = refOf(w), newReads()
			vp.endpoints = g.outboundEndpoints(sc.recording(vp.reads), svc, eps, p.edsRefs)
			vp.reads.seal()
			vp.built.Store(true)
		})
	}
	buildView(vp)
	if !vp.at.standsIn(vp.reads, w) {
		nvp := &viewPart{}
		buildView(nvp)
		vp = p.view(deps.view(&t), nvp)
	}
	sc.w.r.add(vp.reads)
	return partOf{p.clusters, vp.endpoints, p.edsRefs}
}

// view returns p's endpoints for the view name, making them if none; a
// replacement, if given, takes the place of those held unless they are
// of a newer World.
func (p *part) view(name string, replacement *viewPart) *viewPart {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.views == nil {
		p.views = map[string]*viewPart{}
	}
	vp := p.views[name]
	switch {
	case vp == nil && replacement == nil:
		vp = &viewPart{}
		p.views[name] = vp
	case replacement != nil:
		if vp == nil || !vp.built.Load() || vp.at.version <= replacement.at.version {
			p.views[name] = replacement
		}
		vp = replacement
	}
	return vp
}

// sweepLocked drops the parts whose reads do not stand in w.
func (pc *partCache) sweepLocked(w *model.World) {
	v := newView(w, nil)
	for k, p := range pc.m {
		if !p.built.Load() {
			continue // being built
		}
		if !p.at.standsIn(p.reads, v) {
			delete(pc.m, k)
		}
	}
}

// Sweep forgets shared resources whose reads do not stand in w.
// Generation calls it when the cache outgrows the World; the server
// may call it after a push to free them sooner.
func (g *Generator) Sweep(w *model.World) {
	g.parts.mu.Lock()
	defer g.parts.mu.Unlock()
	g.parts.sweepLocked(w)
}
