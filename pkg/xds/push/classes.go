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

// Full returns the class's configuration for w (or newer), generating it
// once for all the class's proxies. On a generation failure it returns the
// last good configuration, or nil if there is none.
func (cc *Classes) Full(g *gen.Generator, w *model.World, p *model.Proxy) *gen.ClassConfig {
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

// Endpoints returns the class's configuration with the endpoints of svcs
// taken from w, updating it once for all the class's proxies.
func (cc *Classes) Endpoints(g *gen.Generator, w *model.World, p *model.Proxy, svcs []model.NamespacedName) *gen.ClassConfig {
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

// Forget drops classes without proxies, so their memory goes.
func (cc *Classes) Forget(keep map[string]bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for k := range cc.entries {
		if !keep[k] {
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
