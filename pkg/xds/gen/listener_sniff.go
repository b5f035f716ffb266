package gen

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	httpinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshplane/discovery/pkg/model"
)

// Protocol sniffing, as istiod does it by default
// (PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND and _INBOUND): a port that
// declares no protocol Istio knows (model.ProtocolUnknown, Istio's
// UnsupportedProtocol: a ServiceEntry or Sidecar port without protocol, a
// Kubernetes Service port whose appProtocol or name says none) is served
// by a sidecar as HTTP when Envoy's HTTP inspector finds HTTP/1.1 or h2c
// in its first bytes, and as TCP otherwise. Gateways and proxyless gRPC
// do not sniff, as in Istio. A sidecar's outbound and inbound clusters of
// such a port speak HTTP upstream as the request came in (cluster_outbound.go).
//
// Outbound (istiod's buildSidecarOutboundListener, ListenerProtocolAuto):
// a service address on a sniffed port has the TCP chain of a TCP port,
// matched also by transport_protocol raw_buffer, and beside it the chain
// Istio adds for HTTP: application_protocols http/1.1 and h2c (what the
// HTTP inspector reports; Istio adds http/1.0 only with PILOT_HTTP10),
// raw_buffer, an HttpConnectionManager with the service port's route
// HOST:PORT, which, as for an HTTP port, the class sends. Istio gives
// each sniffed service address a listener of its own (ADDRESS_PORT) whose
// default chain is the TCP one; here the address's chains sit on the
// port's listener like every other service's, so the TCP chain needs the
// match (Envoy picks the most specific transport protocol and does not
// fall back). When the listener also has the TLS inspector (another
// service on the port is matched by SNI), TLS to the address reaches
// neither chain, so a third one takes it to the same TCP proxy, which on
// Istio's own listener the default chain does. Services without address:
// HTTP goes to the port's shared route (PORT), everything else to the
// first such service's TCP proxy as the listener's default chain, as
// Istio's 0.0.0.0_PORT listener does. Headless services: both chains per
// endpoint address, with the route HOST:PORT (Istio's per-endpoint
// listeners use it too).
//
// The listener filters are Istio's, in its order: tls_inspector when a
// chain matches on SNI, then http_inspector; a sniffing listener has
// Istio's listener_filters_timeout (the mesh's protocolDetectionTimeout,
// 0s: the inspector waits as long as the client takes to speak first)
// and continue_on_listener_filters_timeout. Istio sets both on every
// sidecar listener, where they change nothing without inspectors; here
// listeners that do not sniff keep Envoy's defaults (15s, then close).
//
// Chains are named (Istio leaves outbound ones unnamed): the TCP chain as
// a TCP port's, the others with "|http" and "|tls" after it.

// Transport protocols a filter chain matches: raw_buffer is what Envoy
// sets when no inspector found TLS.
const (
	rawBufferTransport = "raw_buffer"
	tlsTransport       = "tls"
)

// plaintextHTTPALPNs are the application protocols the HTTP inspector
// reports for plaintext HTTP (Istio's, without PILOT_HTTP10).
var plaintextHTTPALPNs = []string{"http/1.1", "h2c"}

// sniffed reports whether p sniffs the traffic of a port of proto.
func sniffed(p *model.Proxy, proto model.Protocol) bool {
	return proto.IsSniffed() && p.Type == model.ProxySidecar && !p.IsGRPC()
}

func httpInspector() *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{
		Name:       "envoy.filters.listener.http_inspector",
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&httpinspectorv3.HttpInspector{})},
	}
}

// sniffingTimeouts gives a listener Istio's listener filter timeout: the
// MeshConfig's protocolDetectionTimeout (0 by default: none), and go on
// once it passes. Istio sets it on virtualInbound always, on an outbound
// listener when it sniffs HTTP.
func sniffingTimeouts(l *listenerv3.Listener, w *view) {
	l.ListenerFiltersTimeout = durationpb.New(w.Mesh().ProtocolDetectionTimeout())
	l.ContinueOnListenerFiltersTimeout = true
}

// sniffedChains turns tcp, the TCP chain of one service address (or
// endpoint address) on a sniffed port, into the chains that sniff it:
// tcp matched on raw_buffer, the HTTP chain to route and, with withTLS,
// the TLS chain (tcp's filters for tcp's addresses on TLS), which
// outboundListener keeps only when the listener inspects TLS.
func sniffedChains(t *listenerTelemetry, tcp *listenerv3.FilterChain, route string, withTLS bool) (plain, http, tls *listenerv3.FilterChain) {
	http = &listenerv3.FilterChain{
		Name: tcp.Name + "|http",
		FilterChainMatch: &listenerv3.FilterChainMatch{
			PrefixRanges: tcp.FilterChainMatch.PrefixRanges, TransportProtocol: rawBufferTransport, ApplicationProtocols: plaintextHTTPALPNs,
		},
		Filters: []*listenerv3.Filter{hcmFilter(rdsManager(t, "outbound_"+route, route))},
	}
	if withTLS {
		tls = &listenerv3.FilterChain{
			Name:             tcp.Name + "|tls",
			FilterChainMatch: &listenerv3.FilterChainMatch{PrefixRanges: tcp.FilterChainMatch.PrefixRanges, TransportProtocol: tlsTransport},
			Filters:          tcp.Filters,
		}
	}
	tcp.FilterChainMatch.TransportProtocol = rawBufferTransport
	return tcp, http, tls
}

// sniffedOutbound collects the chains of one port's listener that sniff.
type sniffedOutbound struct {
	// tel is the telemetry of the listener's traffic class.
	tel *listenerTelemetry
	any bool
	// mayInspectTLS is set when a service on the port is TLS, whose chains
	// may match on SNI: only then can the listener inspect TLS.
	mayInspectTLS bool
	// tls are the TLS chains, dropped unless the listener inspects TLS.
	tls map[*listenerv3.FilterChain]bool
	// dflt is the first TCP or sniffed service without address: its TCP
	// proxy is the listener's default chain.
	dflt *model.Service
	// sniffedDflt is set when a sniffed service without address is on the
	// port: HTTP on the default path is then read by the port's route.
	sniffedDflt bool
}

// addressless records svc, a service without address on the port, which
// is not per endpoint (endpointChained). The first TCP or sniffed one
// takes what no address matches, as on istiod's 0.0.0.0_PORT listener (a
// service without VIP binds the wildcard; TCPOverTCP keeps the first
// chain); the others are reported.
func (s *sniffedOutbound) addressless(g *Generator, svc *model.Service, port int32, sniffs, http bool) {
	if http && !sniffs {
		return
	}
	s.sniffedDflt = s.sniffedDflt || sniffs
	if s.dflt == nil {
		s.dflt = svc
		return
	}
	g.warnShadowedAddressless(svc, s.dflt, port)
}

// add returns chains, the TCP chains of one sniffed service, each with the
// chains that sniff beside it (sniffedChains).
func (s *sniffedOutbound) add(chains []*listenerv3.FilterChain, route string) []*listenerv3.FilterChain {
	out := make([]*listenerv3.FilterChain, 0, 3*len(chains))
	for _, fc := range chains {
		plain, http, tls := sniffedChains(s.tel, fc, route, s.mayInspectTLS)
		out = append(out, plain, http)
		if tls != nil {
			if s.tls == nil {
				s.tls = map[*listenerv3.FilterChain]bool{}
			}
			s.tls[tls] = true
			out = append(out, tls)
		}
	}
	s.any = s.any || len(out) > 0
	return out
}

// finish sets l's listener filters and, for services without address,
// its default chain and the chain of their HTTP. A TCP service without
// address on a port that has no HTTP (httpPort) and no sniffed service
// without address gets the whole default path, HTTP included: istiod's
// 0.0.0.0_PORT listener is then TCP only. With HTTP on the port istiod
// merges the two into a sniffed listener (HTTPOverTCP), as here.
func (s *sniffedOutbound) finish(g *Generator, sc *Scope, l *listenerv3.Listener, port int32, httpPort bool) {
	inspectTLS := usesSNI(l)
	if !inspectTLS && len(s.tls) > 0 {
		kept := l.FilterChains[:0]
		for _, fc := range l.FilterChains {
			if !s.tls[fc] {
				kept = append(kept, fc)
			}
		}
		l.FilterChains = kept
	}
	if inspectTLS {
		l.ListenerFilters = []*listenerv3.ListenerFilter{tlsInspector()}
	}
	httpChain := s.dflt != nil && (s.sniffedDflt || httpPort)
	if httpChain {
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
			Name: "addressless",
			FilterChainMatch: &listenerv3.FilterChainMatch{
				TransportProtocol: rawBufferTransport, ApplicationProtocols: plaintextHTTPALPNs,
			},
			Filters: []*listenerv3.Filter{hcmFilter(rdsManager(s.tel, "outbound_0.0.0.0_"+itoa(port), itoa(port)))},
		})
	}
	if s.dflt != nil {
		l.DefaultFilterChain = &listenerv3.FilterChain{
			Name:    RouteName(s.dflt.Hostname, port),
			Filters: g.meshTCPFilters(sc, s.dflt, port),
		}
	}
	if s.any || httpChain {
		l.ListenerFilters = append(l.ListenerFilters, httpInspector())
		sniffingTimeouts(l, sc.w)
	}
}

// Inbound (istiod's inboundChainForOpts with getFilterChainMatchOptions
// for ListenerProtocolAuto): a sniffed port's virtualInbound chains are
// Istio's for its mTLS mode, HTTP chains with the workload's HTTP RBAC
// before the router and TCP chains with its network RBAC, as for HTTP and
// TCP ports:
//
//	PERMISSIVE  mTLS with Istio's HTTP ALPNs (HTTP), plaintext HTTP
//	            (http/1.1, h2c), mTLS with istio-peer-exchange or istio
//	            (TCP), plaintext (TCP), the application's own TLS (TCP)
//	STRICT      mTLS with Istio's HTTP ALPNs (HTTP), mTLS (TCP)
//	DISABLE     plaintext HTTP, plaintext TCP
//
// The listener's TLS and HTTP inspectors run where its chains need them,
// derived from the chains as istiod does (setInboundInspectors): the
// passthrough chains sniff too (listener_inbound_passthrough.go), so in PERMISSIVE
// both run everywhere except on the ports that do not need them.
//
// STRICT chains do not require transport_protocol tls (Istio's do, and
// what they miss finds no chain and is closed): here plaintext reaches
// the TCP chain and fails its handshake, the same refusal. A Sidecar
// ingress port that terminates its own TLS is served as TCP after
// termination and reported (Istio builds no chain for it either:
// inboundChainForOpts has none for a sniffed protocol after TLS
// termination).

// Istio's mTLS application protocols: those its sidecars send for HTTP,
// and those of TCP with or without metadata exchange.
var (
	mtlsHTTPALPNs = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}
	mtlsTCPALPNs  = []string{"istio-peer-exchange", "istio"}
)

// sniffedInboundChains are the virtualInbound chains of sniffed port p in
// mode.
func sniffedInboundChains(p InboundPort, mode MTLSMode, sec inboundSecurity) []*listenerv3.FilterChain {
	http := inboundChain(InboundPort{Port: p.Port, Protocol: model.ProtocolHTTP}, sec)
	tcp := inboundChain(InboundPort{Port: p.Port, Protocol: model.ProtocolTCP}, sec)
	chain := func(base *listenerv3.FilterChain, suffix, transport string, alpn []string, mtls bool) *listenerv3.FilterChain {
		fc := &listenerv3.FilterChain{
			Name: base.Name + suffix,
			FilterChainMatch: &listenerv3.FilterChainMatch{
				DestinationPort: base.FilterChainMatch.DestinationPort, TransportProtocol: transport, ApplicationProtocols: alpn,
			},
			Filters: base.Filters,
		}
		if mtls {
			fc.TransportSocket = sec.serverTLS.socket(base == http)
		}
		return fc
	}
	switch mode {
	case MTLSStrict:
		return []*listenerv3.FilterChain{
			chain(http, "-http", "", mtlsHTTPALPNs, true),
			chain(tcp, "", "", nil, true),
		}
	case MTLSDisable:
		return []*listenerv3.FilterChain{
			chain(http, "-http", rawBufferTransport, plaintextHTTPALPNs, false),
			chain(tcp, "", rawBufferTransport, nil, false),
		}
	}
	return []*listenerv3.FilterChain{
		chain(http, "-mtls-http", tlsTransport, mtlsHTTPALPNs, true),
		chain(http, "-http", rawBufferTransport, plaintextHTTPALPNs, false),
		chain(tcp, "-mtls", tlsTransport, mtlsTCPALPNs, true),
		chain(tcp, "", rawBufferTransport, nil, false),
		chain(tcp, "-tls", tlsTransport, nil, false),
	}
}
