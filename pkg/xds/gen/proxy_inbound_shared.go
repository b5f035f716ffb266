package gen

import (
	"maps"

	"github.com/meshplane/discovery/pkg/model"
)

// A variant's inbound listener, shared.
//
// A sidecar's virtualInbound listener is its own (Generator.Proxy): it
// is built from the proxy's ports, its policies and its class's
// telemetry, whose tracing names the proxy's canonical service and
// revision and its namespace. At M1 with the labels every injected pod
// sends, each of the 1,000 proxies held its own 17 KB listener, 18.8 of
// the 127 MB of heap after the changes (BENCHMARKS.md), where the
// listeners of proxies with the same ports and policies differed in
// those tags alone.
//
// So a variant of a shared class (class_shared.go) builds its inbound
// listener with its base's telemetry, whose tags are placeholders: the
// listener of proxies of any namespace that have the same ports and
// policies is then the same bytes, one pooled set (setsPool), and the
// proxy's own set is a view of it with its variant's values written in
// when sent (retagView), as its class's listeners are. Where the
// placeholders are anywhere but where the rewrite finds them
// (sharedHolds), or a WasmPlugin or EnvoyFilter patches the proxy's own
// listener (a patch may read or write what a placeholder stands for), the
// listener is built with the proxy's own telemetry as before.

// inboundListeners builds p's virtualInbound listener, as a view of a
// shared set where p's class is a variant that allows it, and returns
// it with the errors building it met.
func (g *Generator) inboundListeners(w *view, p *model.Proxy, cls *ClassConfig, reads *Reads, ports []ingressPort, sec inboundSecurity) (*Set, []error) {
	build := func(sc *Scope) *builder {
		sec.tel = sc.recording(reads).inTel()
		in := inboundListener(ports, sec)
		sniffingTimeouts(in, w)
		listeners := newBuilder(ListenerType)
		listeners.add(VirtualInbound, in)
		return listeners
	}
	if v := g.inboundVariant(w, p, cls); v != nil {
		listeners := build(v.base.Scope())
		if view := v.inboundView(listeners.set()); view != nil {
			return view, listeners.errs
		}
	}
	listeners := build(cls.Scope())
	return listeners.set(), listeners.errs
}

// inboundVariant returns the variant whose base's telemetry p's inbound
// listener can be built with, or nil.
func (g *Generator) inboundVariant(w *view, p *model.Proxy, cls *ClassConfig) *variant {
	if cls == nil || cls.variant == nil || !cls.variant.base.Shared() || cls.variant.base.Scope() == nil {
		return nil
	}
	if !maps.Equal(cls.variant.tab.rt.from, placeholderValues) {
		return nil
	}
	if len(w.wasmSelected(p)) > 0 || g.envoyFilterPatches(w, p) != nil {
		return nil
	}
	return cls.variant
}

// inboundView returns the view of s, the listeners built with v's base's
// telemetry, that has v's values, or nil when s does not carry the
// placeholders exactly where a view rewrites them.
func (v *variant) inboundView(s *Set) *Set {
	s = setsPool.of(s)
	if !sharedHolds(s, nil) {
		return nil
	}
	info := s.retagInfoOf(placeholderValues)
	tab := v.tab.covering(info)
	return &Set{TypeURL: ListenerType, Version: s.Version + tab.rt.suffix, Names: s.Names,
		view: &retagView{base: s, info: info, tab: tab}}
}
