package gen

import (
	"maps"
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
	cc := *prev
	cc.prov = &provIndex{}
	cc.WorldVersion = w.Version
	cc.ID = g.ids.Add(1)
	cc.derive(prev)
	// The endpoints' set is no longer the one its builder's log built.
	ops := maps.Clone(prev.logs.all())
	delete(ops, EndpointType)
	cc.logs = newClassLogs(ops)
	cc.units = slices.Clone(prev.units)
	var fresh []*Resource
	for _, nn := range services {
		i, ok := prev.unitIndex(nn)
		if !ok || !usesEDS(prev.units[i].svc) {
			continue
		}
		u := prev.units[i]
		svc := u.svc
		eps := w.Endpoints(nn.Namespace, nn.Name)
		drc := sc.destinationRuleConfig(svc.Hostname)
		nu := *u
		pt := g.parts.get(g, sc, svc, eps, drc)
		nu.endpoints = slices.Clip(pt.endpoints)
		g.sniEndpoints(sc, svc, eps, &nu.endpoints)
		// The unit keeps its clusters. When they are not what the new
		// endpoints give (EDS clusters do not depend on endpoints, except
		// the server identities of gRPC clusters), the next full
		// generation rebuilds them.
		nu.stale = u.stale || !sameResources(pt.clusters, u.clusters)
		nu.epsAt, nu.epsTaken = w.Version, true
		fresh = append(fresh, nu.endpoints...)
		cc.units[i] = &nu
	}
	eds, changed := withResources(EndpointType, prev.Sets[EndpointType], fresh)
	cc.Sets = maps.Clone(prev.Sets)
	if eds != prev.Sets[EndpointType] {
		cc.Sets[EndpointType] = eds
	}
	// Judging whether the changes since at leave everything reused
	// standing walks the class: it is done once they are many, not on
	// every endpoint push (a full generation judges a few dozen changes
	// as fast as one).
	if mw.Version-prev.at.Version >= atLag && cc.standsAfterEndpoints(changesSince(prev.at, mw), w) {
		cc.at = w
	}
	sort.Strings(changed)
	cc.Changed = map[string][]string{}
	if len(changed) > 0 {
		cc.Changed[EndpointType] = changed
	}
	return &cc, changed
}

// atLag is how many Worlds a class's at may fall behind under endpoint
// updates before UpdateEndpoints tries to move it on.
const atLag = 64

// standsAfterEndpoints reports whether every unit and port listener the
// next generation may reuse stands after cs, the units UpdateEndpoints
// gave new endpoints having taken them (unit.epsAt): then the next
// generation may judge changes from the new World (ClassConfig.at).
// Otherwise it judges them from the old one, and more changes pass for
// touching: never fewer.
func (c *ClassConfig) standsAfterEndpoints(cs *changes, cur *view) bool {
	if cs.unknown {
		return false
	}
	for _, pu := range c.ports {
		if pu.reads.touchedBy(cs) {
			return false
		}
	}
	for _, u := range c.units {
		nn := u.svc.Key()
		if u.reads.touchedBy(cs) {
			return false
		}
		switch {
		case u.stale:
			// Rebuilt by the next generation whatever changed.
		case !u.epsTaken:
			if u.clusterReads.touchedBy(cs) {
				return false
			}
		default:
			// Its endpoints are those of epsAt's World: the change of
			// them before does not touch it; nothing else may since the
			// class's World (whether the clusters stand in cur depends
			// on that World and cur's alone), nor the endpoints since
			// epsAt's.
			own := model.Key{Kind: model.KindEndpoints, Namespace: nn.Namespace, Name: nn.Name}
			if u.clusterReads.touchedBy(cs.without(own)) || !unchangedSince(cur.w, own, u.epsAt) {
				return false
			}
		}
	}
	return true
}

// withResources returns set s (of typeURL; nil: empty) with the resources
// rs put in, each replacing the one of its name, and the names added or
// changed; s itself when none are.
func withResources(typeURL string, s *Set, rs []*Resource) (*Set, []string) {
	var next []*Resource // s's resources, those of rs replaced
	if s != nil {
		next = slices.Clone(s.rs)
	}
	var added map[string]*Resource // rs's names s lacks
	var changed []string
	for _, r := range rs {
		if j, ok := s.find(r.Name); ok {
			if next[j].Hash != r.Hash {
				next[j] = r
				changed = append(changed, r.Name)
			}
			continue
		}
		if old := added[r.Name]; old == nil || old.Hash != r.Hash {
			if added == nil {
				added = map[string]*Resource{}
			}
			added[r.Name] = r
			changed = append(changed, r.Name)
		}
	}
	switch {
	case added != nil:
		if s != nil {
			for j, n := range s.Names {
				added[n] = next[j]
			}
		}
		return NewSet(typeURL, added), changed
	case len(changed) > 0:
		// Same names: no need to sort them again.
		return newSetSorted(typeURL, next, s.Names, s.replaced(next, changed)), changed
	}
	return s, nil
}
