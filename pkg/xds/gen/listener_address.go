package gen

import (
	"bytes"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
// by destination port, with a filter_chain_matcher, or bound to its port
// (no hand-over, as a Sidecar egress listener without capture), is left
// whole. The default chain is left out of an address listener whose
// chains match by destination prefix alone: no connection to the address
// can miss them.
//
// Where a WasmPlugin or EnvoyFilter applies to the class, the split is
// made on the class's listeners as they are served, after they patched
// them, so a patch sees the shape it sees without the split (one naming
// 0.0.0.0_80 reaches every chain of port 80); the next generation reuses
// an address listener when the port listener it came from is the same
// (by hash). Where none applies, nothing needs the port listener whole:
// it is split as it is marshaled (buildPort, chainMemo.fields), its
// kept chains referenced where they are, not copied into a 2 MB listener
// for every class and service added. Both ways give the same listeners
// (TestKeptChainsEqualFreshOnes compares them).
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
	// What the next split of the port's listener reuses when its parts
	// are the same: the fields every address listener repeats (shared,
	// and def when a listener needs the default chain), each address
	// listener's chains by name, and each chain's reading by the hash of
	// its bytes. They are slices of the port listener, which the class
	// holds (ClassConfig.raw).
	shared  [][]byte
	def     []byte
	port    uint32
	parts   map[string]addrParts
	reading map[uint64]chainReading
	// sawTaken is set when an address's listener name was taken by
	// another listener of the class, which kept the address's chains on
	// the port listener: the split is then made again by the next
	// generation, which may find the name free.
	sawTaken   bool // restChains counts the chains left on the port listener.
	restChains int
}

// splitByAddress replaces the port listeners of cc's served listener set
// by their splits; prev's splits are reused where the port listener did
// not change. The set as built stays cc's base set (what the next
// generation reuses and WasmPlugins and EnvoyFilters patch).
func (g *Generator) splitByAddress(cc, prev *ClassConfig) {
	split := map[string]*addressSplit{}
	for _, pu := range cc.ports {
		if pu.split != nil {
			split[pu.split.rest.Name] = pu.split // split as built (buildPort)
		}
	}
	s := cc.Sets[ListenerType]
	taken := func(name string) bool { return s.Get(name) != nil }
	var rs map[string]*Resource
	for _, n := range s.Names {
		if !strings.HasPrefix(n, "0.0.0.0_") {
			continue
		}
		if pu := cc.portNamed(n); pu != nil && pu.presplit {
			continue // split as built, or left whole
		}
		r := s.at(n)
		var old *addressSplit
		if prev != nil {
			old = prev.split[n]
		}
		var sp *addressSplit
		if old != nil && old.from == r.Hash && old.stands(taken) {
			sp = old
		} else {
			var err error
			if sp, err = splitResource(r, taken, old); err != nil {
				g.report(cc.scope, cc.Class, err)
				continue
			}
		}
		if sp == nil {
			continue
		}
		if rs == nil {
			rs = s.asMap()
		}
		split[n] = sp
		rs[n] = sp.rest
		for _, a := range sp.addrs {
			rs[a.Name] = a
		}
	}
	if len(split) > 0 {
		cc.split = split
	}
	if rs == nil {
		return
	}
	cc.serveSplit(prev, rs)
}

// serveSplit makes rs, the listeners with the port listeners split after
// generation, cc's served listener set; the set as built stays its base
// set, for the next generation and patches.
func (cc *ClassConfig) serveSplit(prev *ClassConfig, rs map[string]*Resource) {
	raw := maps.Clone(cc.raw)
	if raw == nil {
		raw = map[string]*Set{}
	}
	if _, ok := raw[ListenerType]; !ok {
		raw[ListenerType] = cc.Sets[ListenerType]
	}
	sets := maps.Clone(cc.Sets)
	ls, c := servedSet(prev, rs)
	sets[ListenerType] = ls
	cc.raw, cc.Sets = raw, sets
	if prev != nil {
		changed := maps.Clone(cc.Changed)
		if changed == nil {
			changed = map[string][]string{}
		}
		if len(c) > 0 {
			changed[ListenerType] = c
		} else {
			delete(changed, ListenerType)
		}
		cc.Changed = changed
	}
}

// stands reports whether sp, made in an earlier generation, is what
// splitting its listener gives in a class whose listener names are
// taken: no name it saw taken, and none of its listeners' is.
func (sp *addressSplit) stands(taken func(string) bool) bool {
	return !sp.sawTaken && !sp.collides(taken)
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

// portNamed returns the unit of the port listener named name, or nil.
func (c *ClassConfig) portNamed(name string) *portUnit {
	p, err := strconv.Atoi(strings.TrimPrefix(name, "0.0.0.0_"))
	if err != nil {
		return nil
	}
	return c.ports[int32(p)]
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

// Field numbers of what the split reads and rebuilds.
var (
	listenerFields      = (&listenerv3.Listener{}).ProtoReflect().Descriptor().Fields()
	fieldName           = listenerFields.ByName("name").Number()
	fieldAddress        = listenerFields.ByName("address").Number()
	fieldChains         = listenerFields.ByName("filter_chains").Number()
	fieldDefaultChain   = listenerFields.ByName("default_filter_chain").Number()
	fieldMoreAddresses  = listenerFields.ByName("additional_addresses").Number()
	fieldChainMatcher   = listenerFields.ByName("filter_chain_matcher").Number()
	fieldBindToPort     = listenerFields.ByName("bind_to_port").Number()
	fieldChainMatchOfFC = (&listenerv3.FilterChain{}).ProtoReflect().Descriptor().Fields().ByName("filter_chain_match").Number()
)

// wireField is one top-level field of a marshaled message: raw is its tag
// and value, val the value of a length-delimited one.
type wireField struct {
	num      protowire.Number
	raw, val []byte
	// name is a memoized chain's name (chainMemo.fields), else "".
	name string
}

func wireFields(b []byte) ([]wireField, error) {
	var out []wireField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		f := wireField{num: num, raw: b[:n+m]}
		if typ == protowire.BytesType {
			f.val, _ = protowire.ConsumeBytes(b[n : n+m])
		}
		out = append(out, f)
		b = b[n+m:]
	}
	return out, nil
}

// chainMatch decodes the filter_chain_match of a marshaled FilterChain.
func chainMatch(chain []byte) (*listenerv3.FilterChainMatch, error) {
	fs, err := wireFields(chain)
	if err != nil {
		return nil, err
	}
	m := &listenerv3.FilterChainMatch{}
	for _, f := range fs {
		if f.num == fieldChainMatchOfFC {
			if err := proto.Unmarshal(f.val, m); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// splitResource splits the port listener r by address; nil when it stays
// whole. It works on the marshaled listener: an address listener is the
// port listener's fields but its name, addresses and chains, its own name
// and address, the chains naming the address as they were marshaled, and
// the default chain when one of them may not match. Nothing is decoded
// but the chains' matches, and nothing validated again: every part was
// validated in the port listener (NewResource).
//
// old, the split of the port's listener in the previous generation or
// nil, lends its readings of the chains and the address listeners whose
// parts did not change: after a service is added, only its own.
func splitResource(r *Resource, taken func(string) bool, old *addressSplit) (*addressSplit, error) {
	fs, err := wireFields(r.Any.GetValue())
	if err != nil {
		return nil, err
	}
	sp, _, err := splitFields(r.Name, fs, taken, old)
	if sp != nil {
		sp.from = r.Hash
	}
	return sp, err
}

// splitFields splits the port listener name, marshaled as fs, as
// splitResource does.
func splitFields(name string, fs []wireField, taken func(string) bool, old *addressSplit) (*addressSplit, map[*byte][]byte, error) {
	pl, err := portListenerOf(fs)
	if pl == nil || err != nil {
		return nil, nil, err
	}
	var readings map[uint64]chainReading
	if old != nil {
		readings = old.reading
	}
	groups, err := pl.group(taken, readings)
	if len(groups) == 0 || err != nil {
		return nil, nil, err
	}
	kept := 0
	for _, i := range pl.chains {
		if !pl.moved[i] {
			kept++
		}
	}
	if pl.def == nil && kept == 0 {
		return nil, nil, nil // the port listener would be left with no chain
	}
	sp := &addressSplit{
		shared: pl.shared, def: pl.def, port: pl.port,
		parts: make(map[string]addrParts, len(groups)), reading: pl.reading, sawTaken: pl.sawTaken, restChains: kept,
	}
	// where maps each chain, by its first byte, to its bytes in a
	// listener of the split: what the split and the chain memo keep
	// refers to those, not to what fs are slices of (for a listener
	// split as built, a buffer nothing else needs).
	where := make(map[*byte][]byte, len(pl.chains))
	sp.rest = pl.rest(name, where)
	same := old.sameFrame(pl)
	for _, gr := range groups {
		withDef := gr.other && pl.def != nil
		an := addressListenerName(gr.addr, pl.port)
		var a *Resource
		var held [][]byte
		if op, ok := old.partsOf(an); ok && same && op.withDef == withDef && slices.EqualFunc(op.chains, gr.chains, bytes.Equal) {
			a, held = op.res, op.chains
		} else if a, held, err = pl.addressListener(gr); err != nil {
			return nil, nil, err
		}
		for k, c := range gr.chains {
			where[&c[0]] = held[k]
		}
		sp.addrs = append(sp.addrs, a)
		sp.parts[an] = addrParts{res: a, chains: held, withDef: withDef}
	}
	for h, cr := range sp.reading {
		if b, ok := where[&cr.raw[0]]; ok {
			cr.raw = b
			sp.reading[h] = cr
		}
	}
	return sp, where, nil
}

// partsOf returns what sp's address listener name was built from.
func (sp *addressSplit) partsOf(name string) (addrParts, bool) {
	if sp == nil {
		return addrParts{}, false
	}
	op, ok := sp.parts[name]
	return op, ok
}

// portListener is a marshaled port listener taken apart for the split.
type portListener struct {
	fs   []wireField
	port uint32
	// def is the default chain's field; shared the fields every address
	// listener repeats; chains the indexes of the chains in fs, moved
	// those that go to address listeners alone.
	def    []byte
	shared [][]byte
	chains []int
	moved  map[int]bool
	// reading is what group read from each chain, by the hash of its
	// bytes (chainHash).
	reading map[uint64]chainReading
	// sawTaken is set when group found an address's listener name taken.
	sawTaken bool
}

// addressGroup is what goes to the listener of one address.
type addressGroup struct {
	addr   string
	chains [][]byte
	// other says a chain has criteria beyond its prefix ranges, so a
	// connection may match none of them (the default chain then).
	other bool
}

// portListenerOf takes the listener marshaled as fs apart; nil when it
// is to stay whole: it binds its port (a Sidecar egress listener without
// capture, whose address listeners would bind service addresses), has a
// filter_chain_matcher, or no socket address.
func portListenerOf(fs []wireField) (*portListener, error) {
	pl := &portListener{fs: fs, moved: map[int]bool{}}
	bound, socket := true, false // bind_to_port's default
	for i, f := range fs {
		switch f.num {
		case fieldChainMatcher:
			return nil, nil
		case fieldBindToPort:
			v := &wrapperspb.BoolValue{}
			if err := proto.Unmarshal(f.val, v); err != nil {
				return nil, err
			}
			bound = v.GetValue()
			pl.shared = append(pl.shared, f.raw)
		case fieldAddress:
			a := &corev3.Address{}
			if err := proto.Unmarshal(f.val, a); err != nil {
				return nil, err
			}
			socket = a.GetSocketAddress() != nil
			pl.port = a.GetSocketAddress().GetPortValue()
		case fieldName, fieldMoreAddresses:
		case fieldChains:
			pl.chains = append(pl.chains, i)
		case fieldDefaultChain:
			pl.def = f.raw
		default:
			pl.shared = append(pl.shared, f.raw)
		}
	}
	if bound || !socket {
		return nil, nil
	}
	return pl, nil
}

// group sorts the chains by the exact addresses they name, in the
// listener's order, and marks those that match exact addresses only as
// moved; none when a chain matches by destination port (Envoy matches
// the port before the address). An address whose listener name taken
// says is used keeps its chains on the port listener.
//
// A chain whose bytes the previous split read (known) is not read again.
func (pl *portListener) group(taken func(string) bool, known map[uint64]chainReading) ([]*addressGroup, error) {
	byAddr := map[string]*addressGroup{}
	var groups []*addressGroup
	pl.reading = make(map[uint64]chainReading, len(pl.chains))
	for _, i := range pl.chains {
		raw := pl.fs[i].raw
		h := maphash.Bytes(chainSeed, raw)
		cr, ok := known[h]
		if !ok || !bytes.Equal(cr.raw, raw) {
			m, err := chainMatch(pl.fs[i].val)
			if err != nil {
				return nil, err
			}
			cr = chainReading{byPort: m.GetDestinationPort() != nil}
			cr.addrs, cr.all = exactAddresses(m)
			cr.other = len(cr.addrs) > 0 && !onlyPrefixes(m)
		}
		cr.raw = raw
		pl.reading[h] = cr
		if cr.byPort {
			return nil, nil
		}
		addrs, other := cr.addrs, cr.other
		keep := !cr.all
		for j, a := range addrs {
			if slices.Contains(addrs[:j], a) {
				continue
			}
			if taken(addressListenerName(a, pl.port)) {
				keep, pl.sawTaken = true, true
				continue
			}
			gr := byAddr[a]
			if gr == nil {
				gr = &addressGroup{addr: a}
				byAddr[a] = gr
				groups = append(groups, gr)
			}
			gr.chains = append(gr.chains, pl.fs[i].raw)
			gr.other = gr.other || other
		}
		pl.moved[i] = !keep
	}
	return groups, nil
}
