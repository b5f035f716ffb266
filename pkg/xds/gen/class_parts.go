package gen

import (
	"sync"

	"github.com/meshplane/discovery/pkg/mesh"
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

type partKey struct {
	svc        model.NamespacedName
	mesh       *mesh.Config
	grpc       bool
	origDst    bool
	downstream bool
	drc        *model.Config
	// td is the service's traffic distribution in force, which its
	// namespace can change without changing the Service.
	td model.TrafficDistribution
	// pa identifies the PeerAuthentications auto mTLS reads for the
	// service's clusters and endpoints (paIndex.key).
	pa string
}

// part is one service's clusters and endpoints for one partKey, built once.
type part struct {
	once                sync.Once
	svc                 *model.Service
	eps                 *model.ServiceEndpoints
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
// use; w is the newest World, against which the cache is swept when it
// outgrows it. Concurrent callers for the same part wait for one build.
func (pc *partCache) get(g *Generator, sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, drc *model.Config) partOf {
	w := sc.w.unrecorded() // the part records its key's reads (below)
	td := w.TrafficDistribution(svc)
	k := partKey{svc: svc.Key(), mesh: w.Mesh(), grpc: sc.Proxy.IsGRPC(), origDst: originalDst(sc.Proxy, svc), downstream: sniffsAny(sc.Proxy, svc), drc: drc, td: td, pa: w.paKey(svc.Namespace)}
	deps := w.localityDeps(drc, td)
	pc.mu.Lock()
	if pc.m == nil {
		pc.m = map[partKey]*part{}
	}
	p := pc.m[k]
	if p == nil || p.svc != svc || p.eps != eps {
		p = &part{svc: svc, eps: eps, local: !deps.empty(), reads: newReads()}
		pc.m[k] = p
	}
	if n := w.ServiceCount(); len(pc.m) > 2*n+64 {
		pc.sweepLocked(w.w)
	}
	pc.mu.Unlock()
	p.once.Do(func() {
		// The part's key is what its resources read beside them: every
		// class sharing the part read the same, so the part holds it.
		psc := sc.recording(p.reads)
		psc.w.TrafficDistribution(svc)
		psc.w.paKey(svc.Namespace)
		psc.w.localityDeps(drc, td)
		u := unit{localEndpoints: p.local}
		g.outboundClusters(psc, svc, eps, &u)
		p.clusters, p.endpoints, p.edsRefs = u.clusters, u.endpoints, u.edsRefs
		p.reads.seal()
	})
	// What the part read, the class read.
	sc.w.r.add(p.reads)
	if !p.local {
		return partOf{p.clusters, p.endpoints, p.edsRefs}
	}
	t := sc.topology()
	view := deps.view(&t)
	p.mu.Lock()
	if p.views == nil {
		p.views = map[string]*viewPart{}
	}
	vp := p.views[view]
	if vp == nil {
		vp = &viewPart{}
		p.views[view] = vp
	}
	p.mu.Unlock()
	vp.once.Do(func() {
		vp.reads = newReads()
		vp.endpoints = g.outboundEndpoints(sc.recording(vp.reads), svc, eps, p.edsRefs)
		vp.reads.seal()
	})
	sc.w.r.add(vp.reads)
	return partOf{p.clusters, vp.endpoints, p.edsRefs}
}

// sweepLocked drops the parts of objects w no longer holds as they were.
func (pc *partCache) sweepLocked(w *model.World) {
	for k, p := range pc.m {
		if k.mesh != w.Mesh() || w.Service(k.svc.Namespace, k.svc.Name) != p.svc || w.Endpoints(k.svc.Namespace, k.svc.Name) != p.eps ||
			(k.drc != nil && w.Config(k.drc.Key.Kind, k.drc.Key.Namespace, k.drc.Key.Name) != k.drc) ||
			k.td != w.TrafficDistribution(p.svc) || k.pa != indexFor(w).pa.key(k.svc.Namespace) {
			delete(pc.m, k)
		}
	}
}

// Sweep forgets shared resources of objects that w no longer holds as they
// were. Generation calls it when the cache outgrows the World; the server
// may call it after a push to free them sooner.
func (g *Generator) Sweep(w *model.World) {
	g.parts.mu.Lock()
	defer g.parts.mu.Unlock()
	g.parts.sweepLocked(w)
}
