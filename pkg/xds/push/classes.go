package push

import (
	"slices"
	"sync"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Classes holds the newest configuration of every proxy class: a
// class's configuration is generated once per World for all its proxies.
// The zero value is ready to use.
type Classes struct {
	mu      sync.Mutex
	entries map[string]*classEntry
}

type classEntry struct {
	mu  sync.Mutex
	cfg *gen.ClassConfig
	// rep is the proxy a base class was generated for, its
	// representative: the variants rewrite its service tags
	// (gen.Generator.Variant), so it stays while it is of the class.
	rep *model.Proxy
	// from is the base configuration a variant's was made from; own is
	// set when the variant's configuration was generated for it instead
	// (the generator refused to make it a variant).
	from *gen.ClassConfig
	own  bool
	// served is what the proxies of an own configuration generated
	// with placeholders for the service tags (gen.ClassConfig.Shared)
	// are served: a variant of it for them.
	served *gen.ClassConfig
}

// replace makes cfg, a generation's result, the entry's configuration
// unless it is nil (no good configuration yet). The configuration it
// replaces is retired: it is no generation's previous configuration
// again, and lets go of its logs while proxies still hold it.
func (e *classEntry) replace(cfg *gen.ClassConfig) {
	if cfg == nil {
		return
	}
	if e.cfg != cfg {
		e.cfg.Retire()
	}
	e.cfg = cfg
}

// result is what the proxies of a variant's entry are served.
func (e *classEntry) result() *gen.ClassConfig {
	if e.own && e.cfg.Shared() {
		return e.served
	}
	return e.cfg
}

func (cc *Classes) entry(class string) *classEntry {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.entries == nil {
		cc.entries = map[string]*classEntry{}
	}
	e := cc.entries[class]
	if e == nil {
		e = &classEntry{}
		cc.entries[class] = e
	}
	return e
}

// locked returns the class key's configuration after update, called
// with its entry locked.
func (cc *Classes) locked(key string, update func(*classEntry)) *gen.ClassConfig {
	e := cc.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	update(e)
	return e.cfg
}

// Full returns the class's configuration for w (or newer), generating it
// once for all the class's proxies. On a generation failure it returns the
// last good configuration, or nil if there is none.
//
// A class that is a variant of another (gen.VariantOf: classes that
// differ in the tracing service tags alone) is made from its base's
// configuration, which is generated once for all its variants.
func (cc *Classes) Full(g *gen.Generator, w *model.World, p *model.Proxy) *gen.ClassConfig {
	key := gen.ClassKey(w, p)
	base, tags := gen.VariantOf(key)
	if tags == "" {
		return cc.locked(key, func(e *classEntry) {
			if e.cfg != nil && e.cfg.WorldVersion >= w.Version {
				return
			}
			cfg, _ := g.Class(w, p, e.cfg)
			e.replace(cfg)
		})
	}
	b := cc.base(base, w, p, func(e *classEntry) {
		cfg, _ := g.Class(w, e.rep, e.cfg)
		e.replace(cfg)
	})
	return cc.variant(g, w, p, key, b, func(e *classEntry) {
		var prev *gen.ClassConfig
		if e.own {
			prev = e.cfg
		}
		cfg, _ := g.Class(w, p, prev)
		e.replace(cfg)
	})
}

// base returns the base class's configuration, brought up to w by
// update (called with the entry locked) unless it is there already.
func (cc *Classes) base(key string, w *model.World, p *model.Proxy, update func(*classEntry)) *gen.ClassConfig {
	e := cc.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cfg != nil && e.cfg.WorldVersion >= w.Version {
		return e.cfg
	}
	if e.rep == nil || !sameBase(gen.ClassKey(w, e.rep), key) {
		// The representative left the class (a Sidecar now selects
		// it): p stands for it now, and the next generation reuses
		// less, since every service tag changes.
		e.rep = p
	}
	update(e)
	return e.cfg
}

func sameBase(key, base string) bool {
	b, _ := gen.VariantOf(key)
	return b == base
}

// variant returns the variant key's configuration for p made from b, its
// base's, or, if the generator refuses to make it a variant, generated
// by own (called with the entry locked).
func (cc *Classes) variant(g *gen.Generator, w *model.World, p *model.Proxy, key string, b *gen.ClassConfig, own func(*classEntry)) *gen.ClassConfig {
	if b == nil || b.Class == key && !b.Shared() {
		// The representative's own class, or no base yet. The
		// representative of a base generated with placeholders is
		// served a variant of it, as every other proxy of the class.
		return b
	}
	e := cc.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cfg != nil && (e.from == b || e.own && e.cfg.WorldVersion >= w.Version) {
		return e.result()
	}
	if e.from != nil && e.from.WorldVersion > b.WorldVersion {
		return e.cfg // made from a newer base already
	}
	var prev *gen.ClassConfig
	if !e.own {
		prev = e.cfg
	}
	if v, ok := g.Variant(b, key, p, prev); ok {
		e.cfg, e.from, e.own = v, b, false
		return e.cfg
	}
	own(e)
	e.from, e.own = nil, true
	if e.cfg.Shared() {
		// Generated for p with placeholders: p is served a variant of
		// it. The generator checked that a variant can be made; should
		// it refuse all the same, p is served nothing rather than
		// placeholders.
		prev := e.served
		e.served = nil
		if v, ok := g.Variant(e.cfg, key, p, prev); ok {
			e.served = v
		}
	}
	return e.result()
}

// Endpoints returns the class's configuration with the endpoints of svcs
// taken from w, updating it once for all the class's proxies.
func (cc *Classes) Endpoints(g *gen.Generator, w *model.World, p *model.Proxy, svcs []model.NamespacedName) *gen.ClassConfig {
	update := func(e *classEntry, q *model.Proxy) {
		switch {
		case e.cfg == nil:
			e.cfg, _ = g.Class(w, q, nil)
		case e.cfg.WorldVersion < w.Version:
			cfg, _ := g.UpdateEndpoints(e.cfg, w, svcs)
			e.replace(cfg)
		}
	}
	key := gen.ClassKey(w, p)
	base, tags := gen.VariantOf(key)
	if tags == "" {
		return cc.locked(key, func(e *classEntry) { update(e, p) })
	}
	b := cc.base(base, w, p, func(e *classEntry) { update(e, e.rep) })
	return cc.variant(g, w, p, key, b, func(e *classEntry) {
		if !e.own {
			e.cfg = nil
		}
		update(e, p)
	})
}

// Forget drops classes without proxies, so their memory goes; a base
// class stays while a variant of it has proxies.
func (cc *Classes) Forget(keep map[string]bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	bases := map[string]bool{}
	for k := range keep {
		if b, tags := gen.VariantOf(k); tags != "" {
			bases[b] = true
		}
	}
	for k := range cc.entries {
		if !keep[k] && !bases[k] {
			delete(cc.entries, k)
		}
	}
}

// ChangedSince lists, per type, what differs between a proxy's previous
// configuration and next, when next's class configuration descends from
// prev's (gen.ClassConfig.ChangesSince); nil (compare everything)
// otherwise. Types whose version did not change are left out. The proxy's
// own sets are small: they are compared name by name.
func ChangedSince(prev, next *gen.ProxyConfig) map[string][]string {
	if prev == nil {
		return nil
	}
	cls, ok := next.Class.ChangesSince(prev.Class)
	if !ok {
		return nil
	}
	out := map[string][]string{}
	for _, t := range gen.TypeURLs {
		if prev.Version(t) == next.Version(t) {
			continue
		}
		// State-of-the-world Cluster and Listener responses carry every
		// resource whatever the names (respondSotw); delta ones only these.
		names := cls[t]
		if setVersion(prev.Own[t]) != setVersion(next.Own[t]) {
			// A name of both parts is the own one's (ProxyConfig.Get):
			// either part's change may change what is sent.
			names = append(slices.Clip(names), gen.DiffNames(prev.Own[t], next.Own[t])...)
		}
		out[t] = names
	}
	return out
}

func setVersion(s *gen.Set) string {
	if s == nil {
		return ""
	}
	return s.Version
}
