package push

import (
	"slices"
	"sync"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Plan is what a change means for one proxy: a full push, or new
// endpoints of some of the services it sees.
type Plan struct {
	Full bool
	// KeepOwn is set when no change behind the plan can change the
	// proxy's own configuration (gen.Proxy: inbound clusters and
	// listener), which a full push then reuses instead of rebuilding it
	// for every proxy.
	KeepOwn bool
	// EDS are the services whose endpoints an endpoints-only push sends.
	EDS map[model.NamespacedName]bool
	// Class is the proxy's class in the new World.
	Class string
}

// Changes are a Request's changes as planning reads them: endpoints of
// services, and every other changed object.
type Changes struct {
	Endpoints map[model.NamespacedName]bool
	Others    []model.Key
	// classes remembers, per what a class configuration's answer comes
	// from, whether Others touch it: the proxies of a class share the
	// answer, and so do the variants of a base class (1,000 of them at
	// M1 with injected pods: asking each was most of a VirtualService
	// edit's planning).
	classes *classMemo
}

type classMemo struct {
	mu sync.Mutex
	m  map[gen.TouchesFrom]bool
}

// classTouched reports whether any of ch.Others touches cls, asking once
// for all the configurations that answer alike.
func (ch Changes) classTouched(cls *gen.ClassConfig, w *model.World) bool {
	from := cls.TouchesFrom()
	if ch.classes != nil {
		ch.classes.mu.Lock()
		touched, ok := ch.classes.m[from]
		ch.classes.mu.Unlock()
		if ok {
			return touched
		}
	}
	touched := slices.ContainsFunc(ch.Others, func(k model.Key) bool { return cls.Touches(k, w) })
	if ch.classes != nil {
		ch.classes.mu.Lock()
		ch.classes.m[from] = touched
		ch.classes.mu.Unlock()
	}
	return touched
}

// Split sorts changes for planning. EndpointSlice changes are left out:
// their effect arrives as KindEndpoints changes.
func Split(changes map[model.Key]model.Op) Changes {
	ch := Changes{Endpoints: map[model.NamespacedName]bool{}, classes: &classMemo{m: map[gen.TouchesFrom]bool{}}}
	for k := range changes {
		switch k.Kind {
		case model.KindEndpoints:
			ch.Endpoints[model.NamespacedName{Namespace: k.Namespace, Name: k.Name}] = true
		case model.KindEndpointSlice:
		default:
			ch.Others = append(ch.Others, k)
		}
	}
	return ch
}

// For plans the push of proxy p, whose configuration is cfg (nil: none
// yet), after the changes that made w: nil when they cannot alter what
// p is sent. class is p's class in w.
//
// What a change can alter follows from what generation read (gen.Reads):
// a change touches a configuration when generation read the object, or
// listed objects of its kind by a rule that chooses it before or after.
// No rule about kinds is written here.
func (ch Changes) For(w *model.World, p *model.Proxy, cfg *gen.ProxyConfig) (plan *Plan, class string) {
	// The class can change with the World (a Sidecar selecting the
	// workload, a VirtualService matching its labels): then everything
	// is regenerated for the new class.
	key := gen.ClassKey(w, p)
	if cfg == nil || cfg.Class.Class != key {
		return &Plan{Full: true, Class: key}, key
	}
	own := slices.ContainsFunc(ch.Others, func(k model.Key) bool { return cfg.OwnTouches(k, w) })
	if own || ch.classTouched(cfg.Class, w) {
		return &Plan{Full: true, KeepOwn: !own, Class: key}, key
	}
	scope := cfg.Class.Scope()
	var seen map[model.NamespacedName]bool
	for nn := range ch.Endpoints {
		if scope.Visible(nn) {
			if svc := w.Service(nn.Namespace, nn.Name); svc != nil && p.Type == model.ProxySidecar && gen.EndpointsShapeListeners(svc) {
				// Its endpoints are listener chains too (headless TCP).
				return &Plan{Full: true, Class: key}, key
			}
			if seen == nil {
				seen = map[model.NamespacedName]bool{}
			}
			seen[nn] = true
		}
	}
	if seen == nil {
		return nil, key
	}
	return &Plan{EDS: seen, KeepOwn: true, Class: key}, key
}

// ChangeMatters reports whether a change to k, which made w, can alter
// the configuration cfg (For's rule for one change).
func ChangeMatters(k model.Key, w *model.World, cfg *gen.ProxyConfig) bool {
	return cfg.Touches(k, w)
}
