package gen

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
)

// Outbound listeners per service address (Options.ListenersPerAddress).
//
// A sidecar's port listener 0.0.0.0_PORT has a filter chain per service
// address (listener.go), so a service added or removed changes it and
// delta xDS sends it again whole: at 1,000 services about 2 MB per port
// to every proxy. Split per address, the chains that match one exact
// address move to a listener of their own, ADDRESS_PORT, not bound to
// the port, to which virtualOutbound hands a connection by its original
// destination (Envoy looks for a listener on the exact address first,
// then on 0.0.0.0:PORT). That is istiod's shape for TCP services; a
// service added is then one listener of about 2 KB.
//
// The split decides every connection as the port listener did. Envoy
// chooses a filter chain by destination port, then by the longest
// destination prefix that contains the address, then by the other
// criteria, falling back to the default chain: a chain that names an
// address exactly wins the prefix step for it against every chain that
// does not, so the chains naming an address A decide each connection to
// A, and ADDRESS_PORT holds exactly those chains with the port listener's
// listener filters and default chain. Chains that also match other
// prefixes stay on the port listener too. A listener with a chain matched
// by destination port, or with a filter_chain_matcher, is left whole. The
// default chain is left out of an address listener whose chains match by
// destination prefix alone: no connection to the address can miss them.
//
// The split is made on the class's listeners as they are served, after
// WasmPlugins and EnvoyFilters patched them, so a patch sees the shape it
// sees without the split (one naming 0.0.0.0_80 reaches every chain of
// port 80). The next generation reuses an address listener when the port
// listener it came from is the same (by hash).
//
// The cost moves to the proxy: a listener per address on each port
// instead of a chain (BENCHMARKS.md weighs it).

// addressSplit is one port listener split by address.
type addressSplit struct {
	// from is the hash of the port listener split.
	from string
	// rest is the port listener without the chains moved; addrs are the
	// listeners per address.
	rest  *Resource
	addrs []*Resource
}

// splitByAddress replaces the port listeners of cc's served listener set
// by their splits; prev's splits are reused where the port listener did
// not change. The set as built stays cc's base set (what the next
// generation reuses and WasmPlugins and EnvoyFilters patch).
func (g *Generator) splitByAddress(cc, prev *ClassConfig) {
	s := cc.Sets[ListenerType]
	rs := make(map[string]*Resource, len(s.Resources))
	for n, r := range s.Resources {
		rs[n] = r
	}
	taken := func(name string) bool { return s.Get(name) != nil }
	split := map[string]*addressSplit{}
	for _, n := range s.Names {
		if !strings.HasPrefix(n, "0.0.0.0_") {
			continue
		}
		r := s.Resources[n]
		var sp *addressSplit
		if prev != nil {
			if old := prev.split[n]; old != nil && old.from == r.Hash && !old.collides(taken) {
				sp = old
			}
		}
		if sp == nil {
			var err error
			if sp, err = splitResource(r, taken); err != nil {
				g.report(cc.scope, cc.Class, err)
				continue
			}
		}
		if sp == nil {
			continue
		}
		split[n] = sp
		rs[n] = sp.rest
		for _, a := range sp.addrs {
			rs[a.Name] = a
		}
	}
	if len(split) == 0 {
		return
	}
	raw := maps.Clone(cc.raw)
	if raw == nil {
		raw = map[string]*Set{}
	}
	if _, ok := raw[ListenerType]; !ok {
		raw[ListenerType] = s
	}
	sets := maps.Clone(cc.Sets)
	sets[ListenerType] = NewSet(ListenerType, rs)
	cc.raw, cc.Sets, cc.split = raw, sets, split
	if prev != nil {
		changed := maps.Clone(cc.Changed)
		if changed == nil {
			changed = map[string][]string{}
		}
		if c := diffNames(prev.Sets[ListenerType], sets[ListenerType]); len(c) > 0 {
			changed[ListenerType] = c
		} else {
			delete(changed, ListenerType)
		}
		cc.Changed = changed
	}
}

// collides reports whether a listener of sp has a name taken.
func (sp *addressSplit) collides(taken func(string) bool) bool {
	for _, a := range sp.addrs {
		if taken(a.Name) {
			return true
		}
	}
	return false
}

// splitOf returns the name of the port listener the address listener
// name was split from, or "".
func (c *ClassConfig) splitOf(name string) string {
	for n, sp := range c.split {
		for _, a := range sp.addrs {
			if a.Name == name {
				return n
			}
		}
	}
	return ""
}

// splitResource splits the port listener r by address; nil when nothing
// moves.
func splitResource(r *Resource, taken func(string) bool) (*addressSplit, error) {
	l := &listenerv3.Listener{}
	if err := r.Any.UnmarshalTo(l); err != nil {
		return nil, err
	}
	rest, addrs := splitListener(l, taken)
	if len(addrs) == 0 {
		return nil, nil
	}
	sp := &addressSplit{from: r.Hash}
	var err error
	if sp.rest, err = NewResource(rest.Name, ListenerType, rest); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		res, err := NewResource(a.Name, ListenerType, a)
		if err != nil {
			return nil, err
		}
		sp.addrs = append(sp.addrs, res)
	}
	return sp, nil
}

// splitListener returns l without the chains that match exact addresses
// only, and a listener per exact address with the chains that name it,
// in l's order (none when l is to stay whole). l is changed. An address
// whose listener name taken says is used stays on l.
func splitListener(l *listenerv3.Listener, taken func(string) bool) (*listenerv3.Listener, []*listenerv3.Listener) {
	if l.GetFilterChainMatcher() != nil || l.GetAddress().GetSocketAddress() == nil {
		return l, nil
	}
	for _, fc := range l.GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort() != nil {
			return l, nil
		}
	}
	port := l.GetAddress().GetSocketAddress().GetPortValue()
	type group struct {
		chains []*listenerv3.FilterChain
		// other says a chain has criteria beyond its prefix ranges, so a
		// connection may match none of them (the default chain then).
		other bool
	}
	groups := map[string]*group{}
	var order []string
	var kept []*listenerv3.FilterChain
	for _, fc := range l.GetFilterChains() {
		addrs, all := exactAddresses(fc.GetFilterChainMatch())
		keep := !all
		other := len(addrs) > 0 && !onlyPrefixes(fc.GetFilterChainMatch())
		for i, a := range addrs {
			if slices.Contains(addrs[:i], a) {
				continue
			}
			if taken(addressListenerName(a, port)) {
				keep = true
				continue
			}
			gr := groups[a]
			if gr == nil {
				gr = &group{}
				groups[a] = gr
				order = append(order, a)
			}
			gr.chains = append(gr.chains, fc)
			gr.other = gr.other || other
		}
		if keep {
			kept = append(kept, fc)
		}
	}
	if len(order) == 0 {
		return l, nil
	}
	def := l.DefaultFilterChain
	l.FilterChains, l.DefaultFilterChain = nil, nil
	noDefault := proto.Clone(l).(*listenerv3.Listener)
	l.DefaultFilterChain = def
	withDefault := proto.Clone(l).(*listenerv3.Listener)
	out := make([]*listenerv3.Listener, 0, len(order))
	for _, a := range order {
		gr := groups[a]
		base := noDefault
		if gr.other {
			base = withDefault
		}
		al := proto.Clone(base).(*listenerv3.Listener)
		al.Name = addressListenerName(a, port)
		al.Address = socketAddress(a, int32(port))
		al.AdditionalAddresses = nil
		al.FilterChains = gr.chains
		out = append(out, al)
	}
	l.FilterChains = kept
	return l, out
}

// addressListenerName names the listener of address a on port, as istiod
// names its listeners per service address: ADDRESS_PORT.
func addressListenerName(a string, port uint32) string {
	return a + "_" + itoa(int32(port))
}

// exactAddresses returns the single addresses a chain's destination
// prefix ranges name (a /32 or /128), and whether every range is one;
// false for a chain without ranges.
func exactAddresses(m *listenerv3.FilterChainMatch) ([]string, bool) {
	ranges := m.GetPrefixRanges()
	all := len(ranges) > 0
	var out []string
	for _, r := range ranges {
		a, err := netip.ParseAddr(r.GetAddressPrefix())
		if err != nil || a.Zone() != "" || r.GetPrefixLen() == nil || int(r.GetPrefixLen().GetValue()) != a.BitLen() {
			all = false
			continue
		}
		out = append(out, a.String())
	}
	return out, all
}

// onlyPrefixes reports whether m matches by destination prefix alone.
func onlyPrefixes(m *listenerv3.FilterChainMatch) bool {
	if m == nil {
		return true
	}
	c := proto.Clone(m).(*listenerv3.FilterChainMatch)
	c.PrefixRanges = nil
	return proto.Size(c) == 0
}
