package gen

import (
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/meshplane/discovery/pkg/model"
)

// ConfigRef names one Istio config a generated resource was built from, at
// the generation it had then.
type ConfigRef struct {
	Key             model.Key
	Generation      int64
	ResourceVersion string
}

// Sources returns the Istio configs the resource typeURL/name of c was
// built from: the configs generation took while it built the resource
// (Reads.used: looked up by name, chosen from the class's scope, or
// chosen by a rule), and the EnvoyFilters whose patches may have changed
// it. Resources built from Kubernetes objects alone have none.
//
// Provenance is not stored per resource: a resource belongs to the unit
// that built it (a service's clusters and endpoints, its routes, a port's
// listener, the class's or the proxy's own), whose reads it shares; the
// map from names to units is built on the first lookup (made only for a
// rejected resource, or an acknowledged one while a rejection is
// outstanding).
func (c *ProxyConfig) Sources(typeURL, name string) []ConfigRef {
	if c == nil || c.Class == nil || c.Class.scope == nil {
		return nil
	}
	if typeURL == ListenerType {
		if from := c.Class.splitOf(name); from != "" {
			// A listener per address holds chains of its port's listener.
			name = from
		}
	}
	var cfgs []*model.Config
	switch {
	case c.Own[typeURL].Get(name) != nil:
		cfgs = c.own.usedConfigs()
	case c.Class.Sets[typeURL].Get(name) != nil:
		cfgs = c.Class.readsOf(typeURL, name).usedConfigs()
	}
	sc := c.Class.scope.recording(nil)
	return refs(append(cfgs, sc.envoyFilterSources(typeURL, name)...)) // envoyfilter.go
}

// sources are the configs of a resource being built in sc's class: what
// sc's reads took so far (a refusal is reported while the resource is
// built).
func (sc *Scope) sources(typeURL, name string) []ConfigRef {
	cfgs := sc.w.r.usedConfigs()
	sc = sc.recording(nil)
	return refs(append(cfgs, sc.envoyFilterSources(typeURL, name)...))
}

// provIndex maps a class's resources to the reads of the unit that built
// them, made on first use.
type provIndex struct {
	once sync.Once
	m    map[provKey]*Reads
}

type provKey struct{ typeURL, name string }

// readsOf returns the reads of the unit that built the resource: a
// service's, a port listener's, or the class's own.
func (c *ClassConfig) readsOf(typeURL, name string) *Reads {
	c.prov.once.Do(func() {
		m := map[provKey]*Reads{}
		put := func(t string, rs []*Resource, r *Reads) {
			for _, res := range rs {
				m[provKey{t, res.Name}] = r
			}
		}
		for _, u := range c.units {
			put(ClusterType, u.clusters, u.clusterReads)
			put(EndpointType, u.endpoints, u.clusterReads)
			put(ListenerType, u.listeners, u.reads)
			put(RouteType, u.routes, u.reads)
		}
		for _, pu := range c.ports {
			put(ListenerType, pu.resources(), pu.reads)
		}
		c.prov.m = m
	})
	if r, ok := c.prov.m[provKey{typeURL, name}]; ok {
		return r
	}
	return c.own
}

// refs turns configs into ConfigRefs, without duplicates, sorted by key.
func refs(cfgs []*model.Config) []ConfigRef {
	if len(cfgs) == 0 {
		return nil
	}
	seen := make(map[model.Key]bool, len(cfgs))
	out := make([]ConfigRef, 0, len(cfgs))
	for _, c := range cfgs {
		if seen[c.Key] {
			continue
		}
		seen[c.Key] = true
		r := ConfigRef{Key: c.Key}
		if m, err := meta.Accessor(c.Object); err == nil {
			r.Generation, r.ResourceVersion = m.GetGeneration(), m.GetResourceVersion()
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
