package gen

import (
	"slices"
	"sort"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshplane/discovery/pkg/model"
)

// Istio's names of virtualInbound's passthrough chains: every HTTP one is
// virtualInbound-catchall-http, every TCP one virtualInbound (EnvoyFilters
// written for istiod match them by these names), and the chain that stops
// traffic to 15006 itself.
const (
	passthroughHTTPChain      = "virtualInbound-catchall-http"
	passthroughTCPChain       = VirtualInbound
	inboundBlackholeChainName = "virtualInbound-blackhole"
)

// passthroughChains are virtualInbound's chains for traffic to ports no
// chain of the workload declares, as istiod's buildInboundPassthroughChains:
//
//   - traffic to 15006 itself goes to BlackHoleCluster (it would loop);
//   - the rest is sniffed as on a port of unknown protocol, in the
//     workload's mTLS mode: HTTP through an HttpConnectionManager with the
//     workload's HTTP filters (JWT, ext_authz, RBAC) to
//     InboundPassthroughCluster, other traffic through a TCP proxy with
//     its network RBAC; PERMISSIVE terminates Istio mTLS and passes the
//     application's own TLS and plaintext, STRICT takes only Istio mTLS
//     (Istio's chains require TLS: plaintext finds no chain and is
//     closed), DISABLE plaintext only;
//   - a port-level mTLS mode of a port not in declared gets the same
//     chains in that mode, matched on the port (istiod's per-port
//     passthrough chains).
func passthroughChains(declared []int32, sec inboundSecurity) []*listenerv3.FilterChain {
	out := []*listenerv3.FilterChain{{
		Name:             inboundBlackholeChainName,
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualInboundPort)},
		Filters:          sec.tel.tcpChain(true, nil, BlackHoleCluster, BlackHoleCluster),
	}}
	out = append(out, sniffedPassthrough(0, sec.mtls.mode, sec)...)
	ports := make([]int32, 0, len(sec.mtls.ports))
	for port := range sec.mtls.ports {
		if p := int32(port); !slices.Contains(declared, p) && p != VirtualInboundPort {
			ports = append(ports, p)
		}
	}
	slices.Sort(ports)
	for _, p := range ports {
		out = append(out, sniffedPassthrough(p, sec.mtls.forPort(p), sec)...)
	}
	return out
}

// sniffedPassthrough are the passthrough chains of mode for connections to
// port (0: any), with Istio's filter chain match options for a sniffed
// destination (getFilterChainMatchOptions, ListenerProtocolAuto).
func sniffedPassthrough(port int32, mode MTLSMode, sec inboundSecurity) []*listenerv3.FilterChain {
	http := inboundChainTo(passthroughHTTPChain, InboundPassthroughCluster, 0, 0, model.ProtocolHTTP, sec)
	tcp := inboundChainTo(passthroughTCPChain, InboundPassthroughCluster, 0, 0, model.ProtocolTCP, sec)
	chain := func(base *listenerv3.FilterChain, transport string, alpn []string, mtls bool) *listenerv3.FilterChain {
		fc := &listenerv3.FilterChain{
			Name:             base.Name,
			FilterChainMatch: &listenerv3.FilterChainMatch{TransportProtocol: transport, ApplicationProtocols: alpn},
			Filters:          base.Filters,
		}
		if port != 0 {
			fc.FilterChainMatch.DestinationPort = wrapperspb.UInt32(uint32(port))
		}
		if mtls {
			fc.TransportSocket = sec.serverTLS.socket(base == http)
		}
		return fc
	}
	switch mode {
	case MTLSStrict:
		return []*listenerv3.FilterChain{
			chain(http, tlsTransport, mtlsHTTPALPNs, true),
			chain(tcp, tlsTransport, nil, true),
		}
	case MTLSDisable:
		return []*listenerv3.FilterChain{
			chain(http, rawBufferTransport, plaintextHTTPALPNs, false),
			chain(tcp, rawBufferTransport, nil, false),
		}
	}
	return []*listenerv3.FilterChain{
		chain(http, tlsTransport, mtlsHTTPALPNs, true),
		chain(http, rawBufferTransport, plaintextHTTPALPNs, false),
		chain(tcp, tlsTransport, mtlsTCPALPNs, true),
		chain(tcp, rawBufferTransport, nil, false),
		chain(tcp, tlsTransport, nil, false),
	}
}

// setInboundInspectors appends to l's listener filters the TLS and HTTP
// inspectors its filter chains need, as istiod derives them
// (populateListenerFilters): a destination port needs the TLS inspector
// when one of its chains matches transport protocol tls or a TLS ALPN, the HTTP
// inspector when one matches ALPN http/1.1 or h2c; the chains without a
// port (the passthrough) stand for every other port. An inspector that the
// passthrough needs runs everywhere except on the ports that do not; one
// it does not need runs only on the ports that do. Without the TLS
// inspector a connection's transport protocol is raw_buffer.
func setInboundInspectors(l *listenerv3.Listener) {
	type need struct{ tls, http bool }
	needs := map[uint32]need{}
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		n := needs[m.GetDestinationPort().GetValue()]
		sniffedHTTP := func(a string) bool { return a == "http/1.1" || a == "h2c" }
		alpn := m.GetApplicationProtocols()
		// TLS ALPNs are the TLS inspector's too: discovery's STRICT
		// chains match Istio's ALPNs without transport_protocol tls
		// (listener_sniff.go).
		n.tls = n.tls || m.GetTransportProtocol() == tlsTransport || slices.ContainsFunc(alpn, func(a string) bool { return !sniffedHTTP(a) })
		n.http = n.http || slices.ContainsFunc(alpn, sniffedHTTP)
		needs[m.GetDestinationPort().GetValue()] = n
	}
	inspector := func(f *listenerv3.ListenerFilter, needed func(need) bool) {
		var on, off []int32
		for port, n := range needs {
			switch {
			case port == 0:
			case needed(n):
				on = append(on, int32(port))
			default:
				off = append(off, int32(port))
			}
		}
		if needed(needs[0]) {
			if len(off) > 0 {
				f.FilterDisabled = portsPredicate(off)
			}
		} else {
			if len(on) == 0 {
				return
			}
			f.FilterDisabled = &listenerv3.ListenerFilterChainMatchPredicate{
				Rule: &listenerv3.ListenerFilterChainMatchPredicate_NotMatch{NotMatch: portsPredicate(on)},
			}
		}
		l.ListenerFilters = append(l.ListenerFilters, f)
	}
	// The HTTP inspector after the TLS inspector: it does not look at a
	// connection the TLS inspector found to be TLS.
	inspector(tlsInspector(), func(n need) bool { return n.tls })
	inspector(httpInspector(), func(n need) bool { return n.http })
}

// portsPredicate matches connections to any of ports.
func portsPredicate(ports []int32) *listenerv3.ListenerFilterChainMatchPredicate {
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	rules := make([]*listenerv3.ListenerFilterChainMatchPredicate, len(ports))
	for i, p := range ports {
		rules[i] = &listenerv3.ListenerFilterChainMatchPredicate{
			Rule: &listenerv3.ListenerFilterChainMatchPredicate_DestinationPortRange{
				DestinationPortRange: &typev3.Int32Range{Start: p, End: p + 1},
			},
		}
	}
	if len(rules) == 1 {
		return rules[0]
	}
	return &listenerv3.ListenerFilterChainMatchPredicate{
		Rule: &listenerv3.ListenerFilterChainMatchPredicate_OrMatch{
			OrMatch: &listenerv3.ListenerFilterChainMatchPredicate_MatchSet{Rules: rules},
		},
	}
}
