package gen

import "github.com/meshplane/discovery/pkg/model"

// A port's outbound listener unit as sidecarOutbound makes it: built
// whole, built split by address (listener_address.go), or derived from
// the previous one (listener_derive.go).

// resources are the listeners of the unit as built.
func (pu *portUnit) resources() []*Resource {
	if pu.split == nil {
		return []*Resource{pu.listener}
	}
	return append([]*Resource{pu.split.rest}, pu.split.addrs...)
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
