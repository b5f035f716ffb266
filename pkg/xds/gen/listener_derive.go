package gen

import (
	"bytes"
	"hash/maphash"
	"maps"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshplane/discovery/pkg/model"
)

// A port's listeners split by address, derived from the previous ones
// when only the port's services changed.
//
// After a service is added the port's listener no longer stands (its
// services changed), and building it again places a placeholder for each
// of the port's other services, claims their addresses, and splits the
// chains by address again: at M1 two thirds of a class's time for one
// new service. Where every service of the port is a plaintext HTTP
// service whose addresses are its own (simplePort), the split is one
// address listener per service address, holding that service's chain,
// beside the port listener with no chain left: a service added adds its
// address listeners, a service removed takes its own away, and nothing
// else changes as long as the class's outbound telemetry and policy do
// not (the port listener left and the kept chains are compared with what
// they would be). derivePort does that; anything else is built
// (buildPort). TestDerivedPortListenersEqualBuiltOnes checks each derived
// class against one built from nothing.

// simplePort reports whether pu, a port's listeners built split with
// svcs, is one address listener per address of svcs, each holding the
// chain of its address's service alone, and a port listener without
// chains: what derivePort derives from.
func simplePort(p *model.Proxy, port int32, svcs []*model.Service, pu *portUnit) bool {
	sp := pu.split
	if sp == nil || sp.sawTaken || sp.restChains > 0 || len(pu.unclaimed) > 0 || len(pu.addressless) > 0 || len(pu.headless) > 0 {
		return false
	}
	n := 0
	for _, svc := range svcs {
		addrs, ok := simpleService(p, port, svc)
		if !ok {
			return false
		}
		n += len(addrs)
	}
	if n != len(sp.parts) {
		return false
	}
	for _, op := range sp.parts {
		if len(op.chains) != 1 || op.withDef {
			return false
		}
	}
	return true
}

// simpleService returns the exact addresses of svc's chain on port when
// it is a plaintext HTTP chain matched by them alone.
func simpleService(p *model.Proxy, port int32, svc *model.Service) ([]string, bool) {
	sp, ok := svc.PortByNumber(port)
	if !ok || len(svc.Addresses) == 0 || !sp.Protocol.IsHTTP() || isTLS(sp.Protocol) || sniffed(p, sp.Protocol) || !routedByService(p, svc, sp) {
		return nil, false
	}
	addrs, all := exactAddresses(&listenerv3.FilterChainMatch{PrefixRanges: addressRanges(svc.Addresses)})
	return addrs, all
}

// derivePort derives the listeners of port with svcs for cc from old,
// the port's previous unit; nil when they are to be built.
func (g *Generator) derivePort(sc *Scope, cc *ClassConfig, port int32, svcs []*model.Service, old *portUnit, taken func(string) bool) *portUnit {
	if old == nil || !old.simple || !cc.presplit {
		return nil
	}
	lr := newReads()
	lsc := sc.recording(lr)
	lr.scope(scopeRead{q: qPortServices, port: port, svcs: svcs})
	t := lsc.outTel()
	memo := newChainMemo(t, old.memo)
	if memo.from == nil {
		return nil // the telemetry changed every chain
	}
	if !bytes.Equal(outboundFrame(lsc, port, t), old.split.rest.Any.GetValue()) {
		return nil // the port listener left changed (telemetry, policy)
	}
	was := make(map[*model.Service]bool, len(old.svcs))
	for _, svc := range old.svcs {
		was[svc] = true
	}
	var added []*model.Service
	for _, svc := range svcs {
		if !was[svc] {
			added = append(added, svc)
			continue
		}
		delete(was, svc)
	}
	sp := &addressSplit{
		rest: old.split.rest, shared: old.split.shared, def: old.split.def, port: old.split.port,
		parts: maps.Clone(old.split.parts), reading: maps.Clone(old.split.reading),
	}
	memo.kept = maps.Clone(old.memo.kept)
	for svc := range was { // removed, or changed
		dropChain(sc.Proxy, port, svc, sp, memo)
	}
	for _, svc := range added {
		if !g.deriveChain(lsc, port, svc, sp, memo, taken) {
			return nil
		}
	}
	lr.seal()
	for _, op := range sp.parts {
		sp.addrs = append(sp.addrs, op.res)
	}
	if sp.collides(taken) {
		return nil
	}
	pu := &portUnit{memo: memo, reads: lr, presplit: true, split: sp, svcs: svcs, simple: true, derived: true}
	for _, svc := range svcs {
		pu.refs = append(pu.refs, RouteName(svc.Hostname, port))
	}
	pu.refs = append(pu.refs, itoa(port))
	pu.portRoute = true
	memo.from, memo.built = nil, nil
	return pu
}

// dropChain takes svc's chain on port out of sp and memo.
func dropChain(p *model.Proxy, port int32, svc *model.Service, sp *addressSplit, memo *chainMemo) {
	name := RouteName(svc.Hostname, port)
	if k, ok := memo.kept[name]; ok {
		delete(sp.reading, maphash.Bytes(chainSeed, k.wire))
		delete(memo.kept, name)
	}
	addrs, _ := simpleService(p, port, svc)
	for _, a := range addrs {
		delete(sp.parts, addressListenerName(a, uint32(port)))
	}
}

// deriveChain adds svc's chain on port to sp and memo: an address
// listener per address; false when svc's chain is not simple, or one of
// its addresses has a listener already.
func (g *Generator) deriveChain(sc *Scope, port int32, svc *model.Service, sp *addressSplit, memo *chainMemo, taken func(string) bool) bool {
	addrs, ok := simpleService(sc.Proxy, port, svc)
	if !ok {
		return false
	}
	for _, a := range addrs {
		n := addressListenerName(a, uint32(port))
		if _, dup := sp.parts[n]; dup || taken(n) {
			return false
		}
	}
	p, _ := svc.PortByNumber(port)
	fc := g.serviceChain(sc, svc, p, chainClaims{}, nil)
	if fc == nil || fc.ValidateAll() != nil {
		return false
	}
	size := marshalOpts.Size(fc)
	raw := protowire.AppendTag(nil, fieldChains, protowire.BytesType)
	raw = protowire.AppendVarint(raw, uint64(size))
	raw, err := marshalOpts.MarshalAppend(raw, fc)
	if err != nil {
		return false
	}
	pl := &portListener{port: uint32(port), shared: sp.shared, def: sp.def}
	var held []byte
	for _, a := range addrs {
		r, h, err := pl.addressListener(&addressGroup{addr: a, chains: [][]byte{raw}})
		if err != nil {
			return false
		}
		held = h[0]
		sp.parts[r.Name] = addrParts{res: r, chains: h}
	}
	memo.kept[fc.Name] = keptChain{ranges: rangesKey(fc.FilterChainMatch), wire: held}
	sp.reading[maphash.Bytes(chainSeed, held)] = chainReading{raw: held, addrs: addrs, all: true}
	return true
}

// outboundFrame is the marshaled outbound listener of port without
// chains, as outboundListener and applyOutboundPolicy make it for
// services that are all simple (simplePort): with their port route.
func outboundFrame(sc *Scope, port int32, t *listenerTelemetry) []byte {
	l := &listenerv3.Listener{
		Name:               "0.0.0.0_" + itoa(port),
		Address:            socketAddress("0.0.0.0", port),
		BindToPort:         wrapperspb.Bool(false),
		TrafficDirection:   corev3.TrafficDirection_OUTBOUND,
		DefaultFilterChain: defaultOutboundChain(t, port, true),
	}
	sc.applyOutboundPolicy(t.listener(l))
	b, err := marshalOpts.Marshal(l)
	if err != nil {
		panic(err) // generated Envoy types always marshal
	}
	return b
}
