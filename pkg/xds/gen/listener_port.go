package gen

import (
	"slices"
	"strings"

	"github.com/meshplane/discovery/pkg/model"
)

// A port's outbound listener unit as sidecarOutbound makes it: built
// whole, built split by address (listener_address.go), or derived from
// the previous one (listener_derive.go).

// portUnit is the outbound listener of one port, reused by the next
// generation when what it read stands.
type portUnit struct {
	listener *Resource
	// memo holds the listener's HTTP service chains as marshaled in it
	// (listener_memo.go).
	memo *chainMemo
	portRefs
	// reads are what the listener was built from.
	reads *Reads
	// presplit is set when the listener was built split by address
	// (ClassConfig.presplit): split holds the split, or is nil when the
	// listener stays whole (listener_address.go).
	presplit bool
	split    *addressSplit
	// svcs are the port's services it was built with; simple says the
	// next generation may derive its listeners from these
	// (listener_derive.go).
	svcs   []*model.Service
	simple bool
	// derived is set when it was derived, not built.
	derived bool
	// ls are its resources, made once when a class first takes the
	// unit: classes and generations that take it log the same slices.
	ls []*Resource
}

// sidecarOutbound adds the outbound listeners and the per-port routes for
// hosts without an address, and the route names the listeners use to
// refs.
// A port's listener is reused from prev when what it read stands after
// the changes cs, else taken from the sibling sib if it stands there
// (class_sibling.go).
func (g *Generator) sidecarOutbound(sc *Scope, bs map[string]*builder, cc, prev *ClassConfig, cs *changes, sib *sibling, refs *followed[string]) {
	bs[ListenerType].add(VirtualOutbound, sc.applyOutboundPolicy(virtualOutbound(sc.outTel())))
	g.warnSidecar(sc)
	ports, byPort := servicesByPort(sc)
	cc.ports = map[int32]*portUnit{}
	lb := bs[ListenerType]
	taken := lb.has
	for _, port := range ports {
		pu := prev.port(port)
		if pu == nil || pu.presplit != cc.presplit || !pu.reads.stands(sc, cs) || (pu.split != nil && !splitStands(lb, pu)) {
			if pu = sib.port(sc, cc, port, lb); pu == nil {
				pu = g.derivePort(sc, cc, port, byPort[port], prev.port(port), taken)
			}
			if pu == nil {
				var err error
				if pu, err = g.buildPort(sc, cc, port, byPort[port], prev.port(port), taken); err != nil {
					bs[ListenerType].errs = append(bs[ListenerType].errs, err)
					continue
				}
			}
		}
		cc.reads.add(pu.reads)
		if pu.ls == nil {
			pu.ls = pu.resources() // made, not yet shared
		}
		cc.ports[port] = pu
		// An operation per listener: a service added or removed is
		// then one put in between or skipped (builder_edit.go), where
		// the port's operation would change and the builder fill its
		// map.
		lb.reuseEach(pu.ls)
		refs.add(pu.refs...)
		for _, n := range pu.unclaimed {
			bs[RouteType].remove(n)
		}
		for _, svc := range pu.headless {
			p, _ := svc.PortByNumber(port)
			rc := g.serviceRoute(sc, svc, p, "*")
			bs[RouteType].add(rc.Name, rc)
		}
		if pu.portRoute {
			rc := sc.applyRoutePolicy(g.portRoute(sc, port, pu.addressless))
			bs[RouteType].add(rc.Name, rc)
		}
	}
}

// splitStands reports whether the port listeners pu split by address
// still have names of their own: none is a listener lb holds already.
// When lb replays the previous generation and pu's listeners are its next
// operation, lb holds what pu was split or last judged against then.
func splitStands(lb *builder, pu *portUnit) bool {
	if lb.following() && lb.nextEach(pu.resources()) {
		return !pu.split.sawTaken
	}
	return pu.split.stands(lb.has)
}

func (c *ClassConfig) port(p int32) *portUnit {
	if c == nil {
		return nil
	}
	return c.ports[p]
}

// resources are the listeners of the unit as built: the port's
// listener, or its split's rest and then its address listeners in name
// order (a derived split's come from a map), so that the next
// generation's builder meets them in the order its log has them.
func (pu *portUnit) resources() []*Resource {
	switch {
	case pu.ls != nil:
		return pu.ls
	case pu.split == nil:
		return []*Resource{pu.listener}
	}
	rs := append([]*Resource{pu.split.rest}, pu.split.addrs...)
	slices.SortFunc(rs[1:], func(a, b *Resource) int { return strings.Compare(a.Name, b.Name) })
	return rs
}

// presplit reports whether p's class builds its port listeners split by
// address: listeners per address, and no WasmPlugin or EnvoyFilter that
// may patch them whole (their patches name 0.0.0.0_PORT and reach every
// chain of the port).
func (g *Generator) presplit(w *view, p *model.Proxy) bool {
	return g.perAddress && !g.splitAfter && p.Type == model.ProxySidecar && !p.IsGRPC() &&
		len(w.envoyFiltersFor(p)) == 0 && len(w.wasmSelected(p)) == 0
}

// buildPort builds the outbound listener of port with svcs for cc,
// taking the HTTP chains of the port's previous unit (old, or nil) that
// stand. When cc.presplit it splits the listener by address as it is
// marshaled (listener_address.go): no whole port listener is assembled,
// which at M1 is a 2 MB buffer per port and class for every service
// added. taken reports the listener names the class has. A listener the
// split fails on is served whole, the failure reported, as
// splitByAddress does.
func (g *Generator) buildPort(sc *Scope, cc *ClassConfig, port int32, svcs []*model.Service, old *portUnit, taken func(string) bool) (*portUnit, error) {
	// The listener is reused with what it read.
	lr := newReads()
	lsc := sc.recording(lr)
	lr.scope(scopeRead{q: qPortServices, port: port, svcs: svcs})
	var kept *chainMemo
	if old != nil {
		kept = old.memo
	}
	memo := newChainMemo(lsc.outTel(), kept)
	l, prefs := g.outboundListener(lsc, port, svcs, memo)
	lsc.applyOutboundPolicy(l)
	lr.seal()
	pu := &portUnit{memo: memo, portRefs: prefs, reads: lr, presplit: cc.presplit}
	var was *addressSplit
	if old != nil {
		was = old.split
	}
	if !cc.presplit || len(memo.built) == 0 {
		r, err := memo.resource(l)
		if err != nil {
			return nil, err
		}
		pu.listener = r
		if cc.presplit {
			// No chain kept as marshaled: split the listener as a whole.
			if pu.split, err = splitResource(r, taken, was); err != nil {
				g.report(cc.scope, cc.Class, err)
			}
		}
		return pu, nil
	}
	fs, err := memo.fields(l)
	if err != nil {
		return nil, err
	}
	var where map[*byte][]byte
	if pu.split, where, err = splitFields(l.Name, fs, taken, was); err != nil {
		g.report(cc.scope, cc.Class, err)
	}
	if pu.split == nil {
		// Left whole: assembled as memo.resource would.
		pu.listener = assemble(l.Name, fs, memo)
		return pu, nil
	}
	// The kept chains are those the split's listeners hold: the fresh
	// chains' buffer is garbage.
	for n, k := range memo.kept {
		if b, ok := where[&k.wire[0]]; ok {
			memo.kept[n] = keptChain{ranges: k.ranges, wire: b}
		}
	}
	pu.svcs = svcs
	pu.simple = simplePort(sc.Proxy, port, svcs, pu)
	return pu, nil
}
