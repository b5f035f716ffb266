package gen

import (
	"fmt"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// A port listener's HTTP service chains, kept marshaled for the next
// generation of the class.
//
// A service added or removed changes what a port's outbound listener read
// (qPortServices), so the whole listener is built again: a filter chain
// and a connection manager per service address, each connection manager
// marshaled into its Any, then the listener marshaled, 2 MB per port at
// M1. Nearly all of it is what the previous generation built: the chain
// of a plaintext HTTP service port is its name (HOST:PORT), the addresses
// it claimed and rdsManager with the class's outbound telemetry, nothing
// else. So the chains of such ports are kept as the bytes the listener
// was marshaled with, and a later build of the port's listener that finds
// the same name and addresses, under the same telemetry, puts a
// placeholder with the chain's name and match in the listener (what the
// code after outboundListener looks at: usesSNI, applyOutboundPolicy,
// sniffedOutbound.finish) and copies the kept bytes in its place when the
// listener is marshaled. The result is byte for byte what proto.Marshal
// gives for the chains built afresh (TestAssembledListenersAreMarshaled):
// Listener's fields are marshaled in field number order, and a repeated
// message field is its elements' tags, lengths and marshaled forms one
// after the other.
//
// Chains of other protocols read the class's VirtualServices and
// DestinationRules (meshTCPFilters) or are rewritten by sniffing
// (sniffedOutbound.add): they are built as before. The kept bytes are
// slices of the listener as marshaled (portUnit.listener), which the
// class holds anyway: the memo adds a map entry per chain, not a copy.
// A listener split by address as it is built (buildPort) is never
// assembled: its fields are the kept bytes where they are and the fresh
// chains marshaled into one buffer (fields), which later generations
// keep referring to while they keep its chains.

// chainMemo is the marshaled HTTP service chains of one port listener,
// and, while the listener is built, what the build took from them.
type chainMemo struct {
	// tel identifies the class's outbound telemetry as the chains saw it:
	// the marshaled connection manager of a chain without names. Kept
	// chains are used only under the same telemetry.
	tel string
	// kept holds, by chain name, the chains of the last marshaling.
	kept map[string]keptChain
	// from is the previous generation's memo while this one is built,
	// if its telemetry is the same.
	from map[string]keptChain
	// built lists the memoizable chains of this build, placeholders and
	// fresh ones, by the chain put in the listener.
	built map[*listenerv3.FilterChain]builtChain
	// reused counts the chains this build took from the previous one.
	reused int
}

// keptChain is one chain as marshaled in a listener: the listener field's
// tag, length and value, and the addresses its match claimed.
type keptChain struct {
	ranges string
	wire   []byte
}

// builtChain is a memoizable chain of the build: its name and ranges,
// and its bytes if they were kept (the chain is a placeholder).
type builtChain struct {
	name, ranges string
	wire         []byte
}

// newChainMemo starts the memo of a port listener built with telemetry t,
// taking the chains of prev (the port's memo in the previous generation,
// or nil) if t is the telemetry they were built with.
func newChainMemo(t *listenerTelemetry, prev *chainMemo) *chainMemo {
	b, err := marshalOpts.Marshal(rdsManager(t, "", ""))
	if err != nil {
		panic(err) // generated Envoy types always marshal
	}
	m := &chainMemo{tel: string(b), built: map[*listenerv3.FilterChain]builtChain{}}
	if prev != nil && prev.tel == m.tel {
		m.from = prev.kept
	}
	return m
}

// rangesKey is the addresses a chain's match claimed, as a memo key.
func rangesKey(match *listenerv3.FilterChainMatch) string {
	var sb strings.Builder
	for _, r := range match.GetPrefixRanges() {
		sb.WriteString(r.GetAddressPrefix())
		sb.WriteByte('/')
		sb.WriteString(itoa(int32(r.GetPrefixLen().GetValue())))
		sb.WriteByte(',')
	}
	return sb.String()
}

// httpChain returns the chain named name with match, built by build or,
// if the previous generation marshaled the same chain, a placeholder for
// its bytes.
func (m *chainMemo) httpChain(name string, match *listenerv3.FilterChainMatch, build func() *listenerv3.FilterChain) *listenerv3.FilterChain {
	ranges := rangesKey(match)
	if k, ok := m.from[name]; ok && k.ranges == ranges {
		fc := &listenerv3.FilterChain{Name: name, FilterChainMatch: match}
		m.built[fc] = builtChain{name: name, ranges: ranges, wire: k.wire}
		m.reused++
		return fc
	}
	fc := build()
	m.built[fc] = builtChain{name: name, ranges: ranges}
	return fc
}

// resource validates l and marshals it, copying the kept bytes in place
// of each placeholder, and keeps the chains of this build for the next
// one. A placeholder's chain was validated when it was first built; the
// placeholder itself validates as a chain without filters.
func (m *chainMemo) resource(l *listenerv3.Listener) (*Resource, error) {
	if len(m.built) == 0 {
		m.kept = nil
		return buildResource(l.Name, ListenerType, l)
	}
	fs, b, err := m.marshal(l, true)
	if err != nil {
		return nil, err
	}
	r := rawResource(l.Name, ListenerType, b)
	m.keepFrom(fs, r)
	return r, nil
}

// keepFrom makes m's kept chains slices of r, the listener marshaled as
// fs one after the other (r may be an equal listener another class built:
// rawResource): the class holds r, not the buffer its chains were
// marshaled into.
func (m *chainMemo) keepFrom(fs []wireField, r *Resource) {
	v := r.Any.GetValue()
	pos := 0
	for _, f := range fs {
		end := pos + len(f.raw)
		if f.name != "" {
			m.kept[f.name] = keptChain{ranges: m.kept[f.name].ranges, wire: v[pos:end:end]}
		}
		pos = end
	}
}

// fields validates l and returns its marshaled top-level fields in order,
// each chain its own field, and keeps the chains of this build for the
// next one, as resource does without assembling the listener: a
// placeholder's field is the kept bytes, fresh chains are marshaled into
// a buffer of their own, the other fields are slices of the rest of the
// listener marshaled.
func (m *chainMemo) fields(l *listenerv3.Listener) ([]wireField, error) {
	fs, _, err := m.marshal(l, false)
	return fs, err
}

// assemble is the listener name marshaled as fs, one buffer; m's kept
// chains become slices of it, which the class holds, not of the pieces
// fs are slices of.
func assemble(name string, fs []wireField, m *chainMemo) *Resource {
	size := 0
	for _, f := range fs {
		size += len(f.raw)
	}
	b := make([]byte, 0, size)
	for _, f := range fs {
		b = append(b, f.raw...)
	}
	r := rawResource(name, ListenerType, b)
	m.keepFrom(fs, r)
	return r
}

// chainField appends the chain fc (size bytes marshaled, if fresh) to buf
// as a listener field, unless it is kept and not whole, and returns the
// field, kept for the next build if memoizable.
func (m *chainMemo) chainField(buf []byte, fc *listenerv3.FilterChain, size int, whole bool) ([]byte, wireField, error) {
	bc, memo := m.built[fc]
	start := len(buf)
	var raw []byte
	switch {
	case memo && bc.wire != nil && !whole:
		raw = bc.wire
	case memo && bc.wire != nil:
		buf = append(buf, bc.wire...)
	default:
		buf = protowire.AppendTag(buf, fieldChains, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(size))
		var err error
		if buf, err = marshalOpts.MarshalAppend(buf, fc); err != nil {
			return buf, wireField{}, err
		}
	}
	if raw == nil {
		raw = buf[start:len(buf):len(buf)]
	}
	_, _, n := protowire.ConsumeTag(raw)
	val, _ := protowire.ConsumeBytes(raw[n:])
	f := wireField{num: fieldChains, raw: raw, val: val}
	if memo {
		f.name = bc.name
		m.kept[bc.name] = keptChain{ranges: bc.ranges, wire: raw}
	}
	return buf, f, nil
}

// sizes returns the marshaled size of each fresh chain (0 for a kept
// one) and the bytes the chains take as fields of the listener: all of
// them with whole, else the fresh ones.
func (m *chainMemo) sizes(chains []*listenerv3.FilterChain, whole bool) ([]int, int) {
	sizes := make([]int, len(chains))
	size := 0
	for i, fc := range chains {
		if bc, ok := m.built[fc]; ok && bc.wire != nil {
			if whole {
				size += len(bc.wire)
			}
			continue
		}
		sizes[i] = marshalOpts.Size(fc)
		size += protowire.SizeTag(fieldChains) + protowire.SizeBytes(sizes[i])
	}
	return sizes, size
}

// marshal is resource and fields: with whole, every field is marshaled
// or copied into one buffer, the listener, which it returns; without,
// the buffer holds the fresh chains alone. Either way it is allocated
// once, never grown, so that the slices taken of it stay put.
func (m *chainMemo) marshal(l *listenerv3.Listener, whole bool) ([]wireField, []byte, error) {
	if err := l.ValidateAll(); err != nil {
		// As buildResource refuses it: listeners have no stand-in.
		return nil, nil, &RefusedError{TypeURL: ListenerType, Name: l.Name, Err: fmt.Errorf("validate %s %q: %w", ShortType(ListenerType), l.Name, err)}
	}
	chains := l.FilterChains
	l.FilterChains = nil
	frame, err := marshalOpts.Marshal(l)
	l.FilterChains = chains
	if err != nil {
		return nil, nil, fmt.Errorf("marshal %s %q: %w", ShortType(ListenerType), l.Name, err)
	}
	fs, err := wireFields(frame)
	if err != nil {
		return nil, nil, err
	}
	sizes, size := m.sizes(chains, whole)
	if whole {
		size += len(frame)
	}
	buf := make([]byte, 0, size)
	out := make([]wireField, 0, len(fs)+len(chains))
	i := 0
	for ; i < len(fs) && fs[i].num < fieldChains; i++ {
		if whole {
			buf = append(buf, fs[i].raw...)
		}
		out = append(out, fs[i])
	}
	m.kept = make(map[string]keptChain, len(m.built))
	for j, fc := range chains {
		var f wireField
		if buf, f, err = m.chainField(buf, fc, sizes[j], whole); err != nil {
			return nil, nil, fmt.Errorf("marshal %s %q chain %q: %w", ShortType(ListenerType), l.Name, fc.GetName(), err)
		}
		out = append(out, f)
	}
	for ; i < len(fs); i++ {
		if whole {
			buf = append(buf, fs[i].raw...)
		}
		out = append(out, fs[i])
	}
	m.from, m.built = nil, nil
	return out, buf, nil
}
