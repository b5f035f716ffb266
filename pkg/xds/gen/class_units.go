package gen

import (
	"hash/maphash"
	"maps"
	"slices"
	"strings"

	"github.com/meshplane/discovery/pkg/model"
)

// A class's units: the resources of each service it sees, generated or
// reused one service at a time (Generator.Class).

// unit is everything generated for one service; the next generation of
// the class reuses its clusters and endpoints when clusterReads stand,
// its listeners and routes when reads stand (Reads.stands): a
// VirtualService edit rebuilds the routes of the hosts it names, an
// endpoint change the endpoints of one service.
type unit struct {
	clusters, endpoints, listeners, routes []*Resource
	// reads are what the listeners and routes were built from,
	// clusterReads what the clusters and endpoints were.
	reads, clusterReads *Reads
	// stale marks clusters that UpdateEndpoints kept although the new
	// endpoints change them: the next generation rebuilds them.
	stale bool
	// epsAt is the version of the World UpdateEndpoints took the
	// endpoints from, if it did (epsTaken; ClassConfig.standsAfterEndpoints).
	// A version, not the World: a unit kept its World, and with it that
	// World's copies of the Store's maps, until the class's next full
	// generation, one World per service whose endpoints changed
	// (BenchmarkEndpointChurn).
	epsAt              uint64
	epsTaken           bool
	edsRefs, routeRefs []string
	svc                *model.Service
	// localEndpoints makes outboundClusters leave the endpoints out: they
	// depend on the class's proxies (class_parts.go builds them per view).
	localEndpoints bool
	// bloom sums up reads and clusterReads (reads_bloom.go).
	bloom readBloom
}

// addUnits generates, or reuses from reuse, the unit of every service the
// class sees into cc and the builders, and adds the EDS and RDS names the
// units' clusters and listeners reference to edsRefs and routeRefs. It
// runs for every class and change over a thousand services at M1:
// nothing is allocated or looked up that can be hoisted out of the loop.
func (g *Generator) addUnits(sc *Scope, cc, prev, reuse *ClassConfig, cs *changes, sib *sibling, bs map[string]*builder, edsRefs, routeRefs *followed[string]) {
	cb, eb, lb, rb := bs[ClusterType], bs[EndpointType], bs[ListenerType], bs[RouteType]
	units, olds := make([]*unit, len(sc.Services)), make([]*unit, len(sc.Services))
	// Two reads per unit, and a few of the port listeners'.
	cc.reads.parts = slices.Grow(cc.reads.parts, 2*len(units)+8)
	// Services and prev's units are both in key order: the old unit of
	// each service is found walking prev's along (j), without a lookup.
	var was []*unit
	if prev != nil {
		was = prev.units
	}
	// Units whose reads have nothing in common with the changes stand
	// without being asked (reads_bloom.go).
	var changed changeTokens
	if reuse != nil {
		changed = changeBloom(cs, reuse.scope, sc)
	}
	j := 0
	for i, svc := range sc.Services {
		key := svc.Key()
		for j < len(was) && lessNN(was[j].svc.Key(), key) {
			j++
		}
		var old *unit
		if j < len(was) && was[j].svc.Key() == key {
			old = was[j]
			j++
		}
		olds[i] = old
		var u *unit
		switch {
		case reuse == nil:
			u = g.serviceUnit(sc, svc, nil, cs, sib)
		case old != nil && !old.stale && !old.bloom.meets(changed):
			u = old
		default:
			u = g.serviceUnit(sc, svc, old, cs, sib)
		}
		units[i] = u
		cc.reads.add(u.reads)
		cc.reads.add(u.clusterReads)
		cb.reuseAll(u.clusters)
		eb.reuseAll(u.endpoints)
		lb.reuseAll(u.listeners)
		rb.reuseAll(u.routes)
		edsRefs.add(u.edsRefs...)
		routeRefs.add(u.routeRefs...)
	}
	cc.units = units
	if prev != nil && slices.Equal(units, prev.units) {
		cc.units = prev.units
	}
	cc.endpointsOf(prev, units, olds)
}

// followed builds a list that is most often the previous generation's
// (the EDS and RDS names a class references): while what is added is
// what that list holds at the same place, nothing is copied, and the
// list is the previous one.
type followed[T comparable] struct {
	prev []T
	n    int // elements of prev matched
	out  []T // the list, once it differs
	own  bool
}

func (f *followed[T]) add(xs ...T) {
	if !f.own {
		if f.n+len(xs) <= len(f.prev) && slices.Equal(f.prev[f.n:f.n+len(xs)], xs) {
			f.n += len(xs)
			return
		}
		f.out = append(make([]T, 0, max(len(f.prev), f.n+len(xs))), f.prev[:f.n]...)
		f.own = true
	}
	f.out = append(f.out, xs...)
}

// list returns what was added.
func (f *followed[T]) list() []T {
	switch {
	case f.own:
		return f.out
	case f.n == len(f.prev):
		return f.prev
	}
	return f.prev[:f.n:f.n]
}

// unitOf returns the unit of the service nn, or nil.
func (c *ClassConfig) unitOf(nn model.NamespacedName) *unit {
	if i, ok := c.unitIndex(nn); ok {
		return c.units[i]
	}
	return nil
}

// unitIndex returns the index of the unit of the service nn in c.units.
func (c *ClassConfig) unitIndex(nn model.NamespacedName) (int, bool) {
	return slices.BinarySearchFunc(c.units, nn, func(u *unit, nn model.NamespacedName) int {
		return compareNN(u.svc.Key(), nn)
	})
}

func lessNN(a, b model.NamespacedName) bool { return compareNN(a, b) < 0 }

// compareNN orders names by namespace, then name, as a World lists its
// Services.
func compareNN(a, b model.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// endpointsOf sets cc.EndpointsOf for units, olds being their
// services' units in prev (nil: none). When every service had one, the
// map is prev's, copied when some unit's endpoints differ: reading
// thousands of resources for their names, and filling a map of a
// thousand entries, was a sixth of a class's regeneration after a
// VirtualService edit. prev.EndpointsOf holds the names of a unit's
// endpoints unless UpdateEndpoints gave the unit new ones (epsAt): those
// are read again.
func (cc *ClassConfig) endpointsOf(prev *ClassConfig, units, olds []*unit) {
	if prev == nil || len(prev.units) != len(units) || slices.Contains(olds, nil) {
		cc.endpoints = endpointsPool.ofUnits(units)
		cc.EndpointsOf = cc.endpoints.m
		return
	}
	cc.EndpointsOf, cc.endpoints = prev.EndpointsOf, prev.endpoints
	copied := false
	defer func() {
		if copied {
			cc.endpoints = endpointsPool.of(cc.EndpointsOf)
			cc.EndpointsOf = cc.endpoints.m
		}
	}()
	for i, u := range units {
		old := olds[i]
		if !u.epsTaken && !old.epsTaken && sameSlice(u.endpoints, old.endpoints) {
			continue
		}
		key := u.svc.Key()
		names := endpointNames(u)
		if slices.Equal(names, cc.EndpointsOf[key]) {
			continue
		}
		if !copied {
			cc.EndpointsOf, copied = maps.Clone(prev.EndpointsOf), true
		}
		if names == nil {
			delete(cc.EndpointsOf, key)
		} else {
			cc.EndpointsOf[key] = names
		}
	}
}

// endpointsIndex is a class's EndpointsOf, shared by the classes that
// list the same names (endpointsPool): the namespaces' classes at M1 see
// the same services' endpoints, and each held its own map, 9.5 MB of the
// heap. A shared map is never written: endpointsOf copies before it
// changes one.
type endpointsIndex struct {
	m map[model.NamespacedName][]string
}

// endpointsPool finds the EndpointsOf in use by content, held weakly.
var endpointsPool = endpointsShare{weakPool[uint64, endpointsIndex]{m: newWeakMap[uint64, endpointsIndex](64)}}

type endpointsShare struct {
	weakPool[uint64, endpointsIndex]
}

// of returns the pooled index equal to m, pooling m if there is none.
// The key is a sum of the entries' hashes (a map has no order); equal
// is then checked entry by entry.
func (p *endpointsShare) of(m map[model.NamespacedName][]string) *endpointsIndex {
	var sum uint64
	for k, names := range m {
		var h maphash.Hash
		startEntry(&h, k)
		for _, n := range names {
			addName(&h, n)
		}
		sum += h.Sum64()
	}
	return p.pooled(sum, m)
}

// ofUnits returns the pooled index of units' endpoint names, building
// one only when none in use is equal: a service added or removed
// changes the units of M1's 50 namespace classes alike, and each built
// a map of a thousand services to find the first class's equal to it
// (54 MB of the allocations of ten services added and removed).
func (p *endpointsShare) ofUnits(units []*unit) *endpointsIndex {
	var sum uint64
	n := 0
	for _, u := range units {
		if len(u.endpoints) == 0 {
			continue
		}
		var h maphash.Hash
		startEntry(&h, u.svc.Key())
		for _, r := range u.endpoints {
			addName(&h, r.Name)
		}
		sum += h.Sum64()
		n++
	}
	if old := p.find(sum, func(ix *endpointsIndex) bool { return listsUnits(ix.m, units, n) }); old != nil {
		return old
	}
	m := make(map[model.NamespacedName][]string, n)
	for _, u := range units {
		if names := endpointNames(u); names != nil {
			m[u.svc.Key()] = names
		}
	}
	return p.pooled(sum, m)
}

// pooled returns the pooled index equal to m, whose entries' hashes sum
// to sum, pooling m if there is none.
func (p *endpointsShare) pooled(sum uint64, m map[model.NamespacedName][]string) *endpointsIndex {
	return p.keep(sum, &endpointsIndex{m: m}, func(old *endpointsIndex) bool { return maps.EqualFunc(old.m, m, slices.Equal[[]string]) })
}

// listsUnits reports whether m, an index, lists exactly the endpoint
// names of units, n of which have endpoints. (Pooled indexes are never
// written, so m is read without the pool's lock.)
func listsUnits(m map[model.NamespacedName][]string, units []*unit, n int) bool {
	if len(m) != n {
		return false
	}
	for _, u := range units {
		if len(u.endpoints) == 0 {
			continue
		}
		names, ok := m[u.svc.Key()]
		if !ok || len(names) != len(u.endpoints) {
			return false
		}
		for i, r := range u.endpoints {
			if names[i] != r.Name {
				return false
			}
		}
	}
	return true
}

// startEntry and addName hash one entry of an index: the service's
// name, then each endpoint name.
func startEntry(h *maphash.Hash, k model.NamespacedName) {
	h.SetSeed(endpointsSeed)
	h.WriteString(k.Namespace)
	h.WriteByte(0)
	h.WriteString(k.Name)
}

func addName(h *maphash.Hash, n string) {
	h.WriteByte(0)
	h.WriteString(n)
}

var endpointsSeed = maphash.MakeSeed()

// endpointNames lists the names of u's endpoints, nil for none.
func endpointNames(u *unit) []string {
	if len(u.endpoints) == 0 {
		return nil
	}
	names := make([]string, len(u.endpoints))
	for i, r := range u.endpoints {
		names[i] = r.Name
	}
	return names
}

// serviceUnit generates, or reuses from old (the previous generation's
// unit, or nil), the resources of one service; what old does not give
// it, it takes from the sibling sib where that stands there
// (class_sibling.go): the sibling's whole unit when both parts do.
// A VirtualService edit leaves the clusters' reads standing: the service's
// clusters and endpoints are reused and its routes alone rebuilt, so an
// edit costs the edited hosts, not the class
// (BenchmarkClassAfterEditWith100VirtualServices).
func (g *Generator) serviceUnit(csc *Scope, svc *model.Service, old *unit, cs *changes, sib *sibling) *unit {
	// A reused part keeps its reads: they stand, so it read the same.
	routesStand := old != nil && old.reads.stands(csc, cs)
	clustersStand := old != nil && !old.stale && old.clusterReads.stands(csc, cs)
	if routesStand && clustersStand {
		return old
	}
	d, dRoutes, dClusters := sib.unit(csc, svc, !routesStand, !clustersStand)
	if dRoutes && dClusters {
		return d
	}
	u := &unit{svc: svc}
	switch {
	case clustersStand:
		u.clusters, u.endpoints, u.edsRefs, u.clusterReads = old.clusters, old.endpoints, old.edsRefs, old.clusterReads
	case dClusters:
		u.clusters, u.endpoints, u.edsRefs, u.clusterReads = d.clusters, d.endpoints, d.edsRefs, d.clusterReads
	default:
		g.unitClusters(csc, svc, u)
	}
	switch {
	case routesStand:
		u.listeners, u.routes, u.routeRefs, u.reads = old.listeners, old.routes, old.routeRefs, old.reads
	case dRoutes:
		u.listeners, u.routes, u.routeRefs, u.reads = d.listeners, d.routes, d.routeRefs, d.reads
	default:
		g.unitRoutes(csc, svc, u)
	}
	u.summarize()
	return u
}

// unitClusters builds svc's clusters and endpoints into u, recording
// what they read in u.clusterReads.
func (g *Generator) unitClusters(csc *Scope, svc *model.Service, u *unit) {
	u.clusterReads = newReads()
	defer u.clusterReads.seal()
	sc := csc.recording(u.clusterReads)
	// The unit is svc's: a change of the Service rebuilds it.
	sc.w.Service(svc.Namespace, svc.Name)
	if svc.Entry != nil {
		// The ServiceEntry the host came from (provenance: the Store
		// derives the service, its change arrives as the Service's).
		sc.w.Config(model.KindServiceEntry, svc.Namespace, svc.Entry.Name)
	}
	eps := sc.w.Endpoints(svc.Namespace, svc.Name)
	drc := sc.destinationRuleConfig(svc.Hostname)
	if drc != nil {
		dr := sc.DestinationRule(svc.Hostname)
		g.warn(drc, dr.ResourceVersion, &dr.Spec, drFields)
	}
	g.warnEntry(sc.w, svc, eps)
	// Clipped: what is appended to a class's unit must not land in the
	// shared part's spare capacity.
	p := g.parts.get(g, sc, svc, eps, drc)
	u.clusters, u.endpoints, u.edsRefs = slices.Clip(p.clusters), slices.Clip(p.endpoints), slices.Clip(p.edsRefs)
	// A gateway's AUTO_PASSTHROUGH clusters are its class's own.
	g.sniClusters(sc, svc, eps, u)
}

// unitRoutes builds svc's listeners (proxyless gRPC) and routes into u,
// recording what they read in u.reads.
func (g *Generator) unitRoutes(csc *Scope, svc *model.Service, u *unit) {
	u.reads = newReads()
	defer u.reads.seal()
	sc := csc.recording(u.reads)
	sc.w.Service(svc.Namespace, svc.Name)
	grpc := sc.Proxy.IsGRPC()
	for _, port := range svc.Ports {
		if port.Protocol == model.ProtocolUDP || (grpc && skipsGRPC(svc)) {
			continue
		}
		if grpc {
			name := RouteName(svc.Hostname, port.Port)
			g.addTo(sc, &u.listeners, name, ListenerType, apiListener(name))
			g.addTo(sc, &u.routes, name, RouteType, g.serviceRoute(sc, svc, port))
			u.routeRefs = append(u.routeRefs, name)
		} else if routedByService(sc.Proxy, svc, port) {
			rc := g.serviceRoute(sc, svc, port, "*")
			g.addTo(sc, &u.routes, rc.Name, RouteType, rc)
		}
	}
}

func sameResources(a, b []*Resource) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Hash != b[i].Hash {
			return false
		}
	}
	return true
}
