package gen

import (
	"slices"
	"sort"

	"github.com/meshplane/discovery/pkg/model"
)

// UpdateEndpoints returns prev with the endpoints of services regenerated
// from w, and the names of the EDS resources that changed. Everything else
// is shared with prev.
func (g *Generator) UpdateEndpoints(prev *ClassConfig, mw *model.World, services []model.NamespacedName) (*ClassConfig, []string) {
	// New endpoints are read where the class read the old ones (its
	// reads name them already): nothing new is recorded.
	sc := prev.scope.in(mw)
	w := sc.w
	eds := prev.Sets[EndpointType]
	next := make(map[string]*Resource, len(eds.Resources))
	for n, r := range eds.Resources {
		next[n] = r
	}
	cc := *prev
	cc.prov = &provIndex{}
	cc.WorldVersion = w.Version
	cc.ID, cc.Base = g.ids.Add(1), prev.ID
	cc.units = make(map[model.NamespacedName]*unit, len(prev.units))
	for k, u := range prev.units {
		cc.units[k] = u
	}
	var changed []string
	added := false
	for _, nn := range services {
		u := prev.units[nn]
		if u == nil || !usesEDS(u.svc) {
			continue
		}
		svc := u.svc
		eps := w.Endpoints(nn.Namespace, nn.Name)
		drc := sc.destinationRuleConfig(svc.Hostname)
		nu := *u
		pt := g.parts.get(g, sc, svc, eps, drc)
		nu.endpoints = slices.Clip(pt.endpoints)
		g.sniEndpoints(sc, svc, eps, &nu.endpoints)
		// The unit keeps its clusters. When they are what the new endpoints
		// give (EDS clusters do not depend on endpoints, except the server
		// identities of gRPC clusters), its key can say so and the next
		// full generation reuses it; otherwise it is rebuilt then.
		nu.key = ""
		if sameResources(pt.clusters, u.clusters) {
			nu.key = partKeyOf(w, svc, eps, drc) + sniClustersKey(prev.scope, svc)
		}
		for _, r := range nu.endpoints {
			if old := next[r.Name]; old == nil || old.Hash != r.Hash {
				added = added || old == nil
				next[r.Name] = r
				changed = append(changed, r.Name)
			}
		}
		cc.units[nn] = &nu
	}
	sets := make(map[string]*Set, len(prev.Sets))
	for t, s := range prev.Sets {
		sets[t] = s
	}
	switch {
	case added:
		sets[EndpointType] = NewSet(EndpointType, next)
	case len(changed) > 0:
		// Same names: no need to sort them again.
		sets[EndpointType] = newSetSorted(EndpointType, next, eds.Names, eds.replaced(next, changed))
	}
	cc.Sets = sets
	sort.Strings(changed)
	cc.Changed = map[string][]string{}
	if len(changed) > 0 {
		cc.Changed[EndpointType] = changed
	}
	return &cc, changed
}
