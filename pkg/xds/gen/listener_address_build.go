package gen

import (
	"net/netip"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The listeners of a split by address (listener_address.go), marshaled
// from the port listener's fields, and what the split reads of a chain's
// match.

// rest is the port listener name without the chains moved; where gets
// the chains it keeps.
func (pl *portListener) rest(name string, where map[*byte][]byte) *Resource {
	size := 0
	for i, f := range pl.fs {
		if !pl.moved[i] {
			size += len(f.raw)
		}
	}
	b := make([]byte, 0, size)
	var starts []int
	for i, f := range pl.fs {
		if !pl.moved[i] {
			starts = append(starts, len(b))
			b = append(b, f.raw...)
		}
	}
	// The chains' bytes in the listener are taken of the resource
	// rawResource returns, which may be an equal one built before.
	r := rawResource(name, ListenerType, b)
	v := r.Any.GetValue()
	k := 0
	for i, f := range pl.fs {
		if !pl.moved[i] {
			if f.num == fieldChains {
				end := starts[k] + len(f.raw)
				where[&f.raw[0]] = v[starts[k]:end:end]
			}
			k++
		}
	}
	return r
}

// addressListener marshals the listener of gr's address; held are its
// chains' bytes in it.
func (pl *portListener) addressListener(gr *addressGroup) (*Resource, [][]byte, error) {
	name := addressListenerName(gr.addr, pl.port)
	addr, err := marshalOpts.Marshal(socketAddress(gr.addr, int32(pl.port)))
	if err != nil {
		return nil, nil, err
	}
	size := protowire.SizeTag(fieldName) + protowire.SizeBytes(len(name)) + protowire.SizeTag(fieldAddress) + protowire.SizeBytes(len(addr))
	for _, f := range pl.shared {
		size += len(f)
	}
	for _, c := range gr.chains {
		size += len(c)
	}
	if gr.other && pl.def != nil {
		size += len(pl.def)
	}
	b := make([]byte, 0, size)
	b = protowire.AppendTag(b, fieldName, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, fieldAddress, protowire.BytesType)
	b = protowire.AppendBytes(b, addr)
	for _, f := range pl.shared {
		b = append(b, f...)
	}
	starts := make([]int, len(gr.chains))
	for k, c := range gr.chains {
		starts[k] = len(b)
		b = append(b, c...)
	}
	if gr.other && pl.def != nil {
		b = append(b, pl.def...)
	}
	// held are slices of the resource rawResource returns, which may be
	// an equal one another class built.
	r := rawResource(name, ListenerType, b)
	v := r.Any.GetValue()
	held := make([][]byte, len(gr.chains))
	for k, c := range gr.chains {
		end := starts[k] + len(c)
		held[k] = v[starts[k]:end:end]
	}
	return r, held, nil
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
