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
	if err := l.ValidateAll(); err != nil {
		// As buildResource refuses it: listeners have no stand-in.
		return nil, &RefusedError{TypeURL: ListenerType, Name: l.Name, Err: fmt.Errorf("validate %s %q: %w", ShortType(ListenerType), l.Name, err)}
	}
	chains := l.FilterChains
	l.FilterChains = nil
	frame, err := marshalOpts.Marshal(l)
	l.FilterChains = chains
	if err != nil {
		return nil, fmt.Errorf("marshal %s %q: %w", ShortType(ListenerType), l.Name, err)
	}
	fs, err := wireFields(frame)
	if err != nil {
		return nil, err
	}
	size := len(frame)
	for _, fc := range chains {
		if bc, ok := m.built[fc]; ok && bc.wire != nil {
			size += len(bc.wire)
		} else {
			size += 2048
		}
	}
	b := make([]byte, 0, size)
	i := 0
	for ; i < len(fs) && fs[i].num < fieldChains; i++ {
		b = append(b, fs[i].raw...)
	}
	type span struct {
		bc         builtChain
		start, end int
	}
	spans := make([]span, 0, len(m.built))
	for _, fc := range chains {
		start := len(b)
		bc, memo := m.built[fc]
		if memo && bc.wire != nil {
			b = append(b, bc.wire...)
		} else {
			// Marshaled in place: a chain of its own would be garbage.
			b = protowire.AppendTag(b, fieldChains, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(marshalOpts.Size(fc)))
			var err error
			if b, err = marshalOpts.MarshalAppend(b, fc); err != nil {
				return nil, fmt.Errorf("marshal %s %q chain %q: %w", ShortType(ListenerType), l.Name, fc.GetName(), err)
			}
		}
		if memo {
			spans = append(spans, span{bc, start, len(b)})
		}
	}
	for ; i < len(fs); i++ {
		b = append(b, fs[i].raw...)
	}
	m.kept = make(map[string]keptChain, len(spans))
	for _, s := range spans {
		m.kept[s.bc.name] = keptChain{ranges: s.bc.ranges, wire: b[s.start:s.end:s.end]}
	}
	m.from, m.built = nil, nil
	return rawResource(l.Name, ListenerType, b), nil
}
