package dataplane

import (
	"fmt"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthznetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Ports iptables redirects to.
const (
	OutboundCapturePort = 15001
	InboundCapturePort  = 15006
)

// Type URLs of the filters the evaluator reads.
const (
	typeHCM        = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	typeTCPProxy   = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	typeNetRBAC    = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"
	typeSNICluster = "type.googleapis.com/envoy.extensions.filters.network.sni_cluster.v3.SniCluster"
	typeTLSInspect = "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
	typeHTTPInsp   = "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"
)

// Evaluate decides what the proxy holding cfg does with req.
func Evaluate(cfg *Config, req Request) Decision {
	e := &evaluator{cfg: cfg, req: req.withDefaults()}
	if e.req.Mode == GRPC {
		return e.grpc()
	}
	return e.connection()
}

type evaluator struct {
	cfg   *Config
	req   Request
	trace []string
	// what the listener filters detected
	transport string
	sni       string
	alpn      []string
	// sniCluster: an sni_cluster filter ran; peerAuthenticated: the
	// chain terminated TLS with a client certificate.
	sniCluster        bool
	peerAuthenticated bool
	// tcpProxy: the connection is proxied as bytes (HTTP settings of
	// the upstream cluster do not apply).
	tcpProxy bool
	// metadata is the dynamic metadata RBAC filters wrote, by namespace;
	// netPolicy the facts of network filters before the TCP proxy
	// (extauthz.go).
	metadata  map[string]map[string]string
	netPolicy []string
	// netWasm names the network filters configured over ECDS
	// (WasmPlugins), in order.
	netWasm []string
}

func (e *evaluator) note(format string, args ...any) {
	e.trace = append(e.trace, fmt.Sprintf(format, args...))
}

func (e *evaluator) done(d Decision) Decision {
	d.Trace = e.trace
	return d
}

func (e *evaluator) reset(reason string) Decision {
	return e.done(Decision{Outcome: Reset, Reason: reason})
}

func (e *evaluator) connection() Decision {
	l := e.listener()
	if l == nil {
		return e.reset("no listener")
	}
	e.note("listener %s", l.GetName())
	e.inspect(l)
	fc, err := matchFilterChain(l, e.filterInput())
	if err != "" {
		return e.reset(err)
	}
	e.note("filter chain %q", fc.GetName())
	return e.chain(fc)
}

// listener finds the listener that handles the connection: the capture
// listener for the mode, handing off to the listener of the original
// destination when it uses original destination (Envoy's exact address
// first, then the wildcard address of the port); a gateway's listener on
// the port for gateways.
func (e *evaluator) listener() *listenerv3.Listener {
	var l *listenerv3.Listener
	switch e.req.Mode {
	case Outbound:
		l = e.listenerOn("", OutboundCapturePort, false)
	case Inbound:
		l = e.listenerOn("", InboundCapturePort, false)
	case Gateway:
		return e.bound(e.req.DstIP, e.req.DstPort, true)
	}
	if l == nil {
		return nil
	}
	if l.GetUseOriginalDst().GetValue() {
		if h := e.bound(e.req.DstIP, e.req.DstPort, false); h != nil && h != l {
			e.note("original destination hand-off from %s", l.GetName())
			return h
		}
	}
	return l
}

// bound returns the listener on ip:port, or on the wildcard address of
// port; bind says whether only listeners that bind the port count.
func (e *evaluator) bound(ip string, port uint32, bind bool) *listenerv3.Listener {
	if l := e.listenerOn(ip, port, bind); l != nil {
		return l
	}
	return e.listenerOn("", port, bind)
}

// listenerOn returns the listener with address ip:port ("" for the
// wildcard addresses).
func (e *evaluator) listenerOn(ip string, port uint32, bind bool) *listenerv3.Listener {
	for _, l := range e.cfg.Listeners {
		if l.GetApiListener() != nil {
			continue
		}
		if bind && l.GetBindToPort() != nil && !l.GetBindToPort().GetValue() {
			continue
		}
		addrs := []*corev3.Address{l.GetAddress()}
		for _, a := range l.GetAdditionalAddresses() {
			addrs = append(addrs, a.GetAddress())
		}
		for _, a := range addrs {
			sa := a.GetSocketAddress()
			if sa.GetPortValue() != port {
				continue
			}
			wild := sa.GetAddress() == "0.0.0.0" || sa.GetAddress() == "::"
			if (ip == "" && wild) || (ip != "" && sa.GetAddress() == ip) {
				return l
			}
		}
	}
	return nil
}

// inspect applies the listener filters: the TLS inspector reads SNI and
// ALPN from a ClientHello, the HTTP inspector sets ALPN for plaintext
// HTTP. A filter disabled for the destination port does nothing.
func (e *evaluator) inspect(l *listenerv3.Listener) {
	e.transport = "raw_buffer"
	var tlsInsp, httpInsp bool
	for _, f := range l.GetListenerFilters() {
		if disabled(f.GetFilterDisabled(), e.req.DstPort) {
			continue
		}
		switch f.GetTypedConfig().GetTypeUrl() {
		case typeTLSInspect:
			tlsInsp = true
		case typeHTTPInsp:
			httpInsp = true
		}
		switch f.GetName() {
		case "envoy.filters.listener.tls_inspector":
			tlsInsp = true
		case "envoy.filters.listener.http_inspector":
			httpInsp = true
		}
	}
	if e.req.TLS != Plaintext {
		if tlsInsp {
			e.transport, e.sni, e.alpn = "tls", e.req.SNI, e.req.ALPN
		}
		return
	}
	if httpInsp {
		switch e.req.Protocol {
		case HTTP1:
			e.alpn = []string{"http/1.1"}
		case HTTP2:
			e.alpn = []string{"h2c"}
		}
	}
}

// disabled evaluates a listener filter's filter_disabled predicate.
func disabled(p *listenerv3.ListenerFilterChainMatchPredicate, port uint32) bool {
	if p == nil {
		return false
	}
	switch r := p.GetRule().(type) {
	case *listenerv3.ListenerFilterChainMatchPredicate_AnyMatch:
		return r.AnyMatch
	case *listenerv3.ListenerFilterChainMatchPredicate_NotMatch:
		return !disabled(r.NotMatch, port)
	case *listenerv3.ListenerFilterChainMatchPredicate_OrMatch:
		for _, x := range r.OrMatch.GetRules() {
			if disabled(x, port) {
				return true
			}
		}
		return false
	case *listenerv3.ListenerFilterChainMatchPredicate_AndMatch:
		for _, x := range r.AndMatch.GetRules() {
			if !disabled(x, port) {
				return false
			}
		}
		return true
	case *listenerv3.ListenerFilterChainMatchPredicate_DestinationPortRange:
		return int64(port) >= int64(r.DestinationPortRange.GetStart()) && int64(port) < int64(r.DestinationPortRange.GetEnd())
	}
	return false
}

func (e *evaluator) filterInput() chainInput {
	return chainInput{
		dstIP: e.req.DstIP, dstPort: e.req.DstPort, srcIP: e.req.SrcIP,
		sni: e.sni, transport: e.transport, alpn: e.alpn,
	}
}

// chain runs a filter chain: its TLS termination, then its network
// filters in order.
func (e *evaluator) chain(fc *listenerv3.FilterChain) Decision {
	down, tlsErr := e.downstreamTLS(fc)
	if tlsErr != "" {
		return e.reset(tlsErr)
	}
	terminated := down != ""
	e.peerAuthenticated = terminated && e.req.TLS == MutualTLS
	for _, f := range fc.GetFilters() {
		if f.GetConfigDiscovery() != nil {
			// An extension over ECDS (a WasmPlugin): what it does is the
			// module's; which filters a connection passes, in what order,
			// is the fact.
			e.netWasm = append(e.netWasm, f.GetName())
			continue
		}
		tc := f.GetTypedConfig()
		switch tc.GetTypeUrl() {
		case typeNetRBAC:
			var r rbacnetv3.RBAC
			if err := tc.UnmarshalTo(&r); err != nil {
				return e.reset("invalid network RBAC")
			}
			e.shadowRules(r.GetShadowRules(), r.GetShadowRulesStatPrefix(), false)
			if !e.rbacAllows(r.GetRules(), false) {
				d := e.reset("rbac: denied")
				d.Downstream = down
				return d
			}
		case typeNetExtAuthz:
			var a extauthznetv3.ExtAuthz
			if err := tc.UnmarshalTo(&a); err != nil {
				return e.reset("invalid network ext_authz")
			}
			e.netPolicy = append(e.netPolicy, e.netExtAuthz(&a)...)
		case typeSNICluster:
			e.note("sni_cluster")
			e.sniCluster = true
		case typeHCM:
			var h hcmv3.HttpConnectionManager
			if err := tc.UnmarshalTo(&h); err != nil {
				return e.reset("invalid http connection manager")
			}
			if e.req.TLS != Plaintext && !terminated {
				return e.reset("protocol error: TLS bytes to an HTTP connection manager")
			}
			d := e.http(&h)
			d.Downstream = down
			d.Policy = append(wasmFacts("network", e.netWasm), d.Policy...)
			return d
		case typeTCPProxy:
			var t tcpv3.TcpProxy
			if err := tc.UnmarshalTo(&t); err != nil {
				return e.reset("invalid tcp_proxy")
			}
			d := e.tcp(&t)
			d.Downstream = down
			d.Policy = append(append(wasmFacts("network", e.netWasm), e.netPolicy...), d.Policy...)
			return d
		}
	}
	return e.reset("no terminal network filter")
}

// chainInput is what filter chain matching reads of a connection.
type chainInput struct {
	dstIP, srcIP string
	dstPort      uint32
	sni          string
	transport    string
	alpn         []string
}

// matchFilterChain follows Envoy's filter chain match order: destination
// port, destination IP (longest prefix), server name (exact, then longest
// wildcard), transport protocol, application protocols, source type,
// source IP (longest prefix), source port. At each step the chains that
// match best stay; if none matches, the chains that do not constrain the
// field stay. Without a chain the default chain, if any, takes it.
func matchFilterChain(l *listenerv3.Listener, in chainInput) (*listenerv3.FilterChain, string) {
	chains := l.GetFilterChains()
	steps := []func(*listenerv3.FilterChainMatch) (set bool, rank int){
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if m.GetDestinationPort() == nil {
				return false, 0
			}
			return true, b2i(m.GetDestinationPort().GetValue() == in.dstPort)
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			return len(m.GetPrefixRanges()) > 0, bestCIDR(m.GetPrefixRanges(), in.dstIP)
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			return len(m.GetServerNames()) > 0, serverNameRank(m.GetServerNames(), in.sni)
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if m.GetTransportProtocol() == "" {
				return false, 0
			}
			return true, b2i(m.GetTransportProtocol() == in.transport)
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			return len(m.GetApplicationProtocols()) > 0, b2i(anyIn(in.alpn, m.GetApplicationProtocols()))
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			if m.GetSourceType() == listenerv3.FilterChainMatch_ANY {
				return false, 0
			}
			local := in.srcIP == in.dstIP || strings.HasPrefix(in.srcIP, "127.")
			if m.GetSourceType() == listenerv3.FilterChainMatch_SAME_IP_OR_LOOPBACK {
				return true, b2i(local)
			}
			return true, b2i(!local)
		},
		func(m *listenerv3.FilterChainMatch) (bool, int) {
			return len(m.GetSourcePrefixRanges()) > 0, bestCIDR(m.GetSourcePrefixRanges(), in.srcIP)
		},
	}
	for _, step := range steps {
		chains = narrow(chains, step)
		if len(chains) == 0 {
			break
		}
	}
	switch {
	case len(chains) == 1:
		return chains[0], ""
	case len(chains) > 1:
		return nil, "ambiguous filter chains (Envoy refuses the listener)"
	case l.GetDefaultFilterChain() != nil:
		return l.GetDefaultFilterChain(), ""
	}
	return nil, "no filter chain"
}

func narrow(chains []*listenerv3.FilterChain, step func(*listenerv3.FilterChainMatch) (bool, int)) []*listenerv3.FilterChain {
	best := 0
	var top, unset []*listenerv3.FilterChain
	for _, c := range chains {
		set, rank := step(c.GetFilterChainMatch())
		switch {
		case !set:
			unset = append(unset, c)
		case rank > best:
			best, top = rank, []*listenerv3.FilterChain{c}
		case rank == best && rank > 0:
			top = append(top, c)
		}
	}
	if len(top) > 0 {
		return top
	}
	return unset
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func anyIn(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w {
				return true
			}
		}
	}
	return false
}

// bestCIDR ranks a list of ranges by the longest one holding ip (prefix
// length + 1, so that a /0 still ranks above no match).
func bestCIDR(ranges []*corev3.CidrRange, ip string) int {
	best := 0
	for _, r := range ranges {
		if ok, bits := inCIDR(r, ip); ok && bits+1 > best {
			best = bits + 1
		}
	}
	return best
}

// serverNameRank: an exact name ranks highest, then wildcards
// (*.example.com) by length.
func serverNameRank(names []string, sni string) int {
	best := 0
	sni = strings.ToLower(sni)
	for _, n := range names {
		n = strings.ToLower(n)
		switch {
		case n == sni && sni != "":
			return 1 << 20
		case strings.HasPrefix(n, "*.") && strings.HasSuffix(sni, n[1:]) && len(sni) > len(n)-1:
			if len(n) > best {
				best = len(n)
			}
		}
	}
	return best
}

// unmarshalAny decodes a typed config, reporting whether it had that type.
func unmarshalAny[T any, PT interface {
	*T
	anyMessage
}](a *anypb.Any) (PT, bool) {
	m := PT(new(T))
	if a == nil || a.GetTypeUrl() != "type.googleapis.com/"+string(m.ProtoReflect().Descriptor().FullName()) {
		return nil, false
	}
	if err := a.UnmarshalTo(m); err != nil {
		return nil, false
	}
	return m, true
}

func validIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// wasmFacts is one fact naming the ECDS filters (WasmPlugins) of a chain
// or connection manager in their order; none without any.
func wasmFacts(kind string, names []string) []string {
	if len(names) == 0 {
		return nil
	}
	return []string{"wasm " + kind + ": " + strings.Join(names, " > ")}
}
