package gen

import (
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	origdstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshplane/discovery/pkg/model"
)

// Listener names and ports of a sidecar.
const (
	VirtualOutbound     = "virtualOutbound"
	VirtualInbound      = "virtualInbound"
	VirtualOutboundPort = 15001
	VirtualInboundPort  = 15006
)

// mustAny wraps m in an Any, marshaled deterministically as the
// resources around it are (marshalOpts): a map in m (a Struct's fields:
// TypedStruct configurations, metadata) is otherwise written in Go's
// random map order, and the same configuration would hash differently
// from one generation, or one process, to the next, resending unchanged
// resources (every listener after a restart, at M1).
func mustAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, marshalOpts); err != nil {
		// It fails only for a message without a registered type, which
		// the generated Envoy types always have.
		panic(err)
	}
	return a
}

func routerFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name:       "envoy.filters.http.router",
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
	}
}

// rdsManager is an HttpConnectionManager that fetches routeName over ADS and
// ends its filters with the router, as grpc-go requires; t is the
// telemetry of its listener's traffic class (nil: none). Like every
// connection manager here it normalizes paths (RFC 3986: dot segments,
// percent-encoded unreserved characters) before RBAC and routing see
// them, which is Istio's default path normalization (BASE): a path rule
// cannot be sidestepped with /x/../admin. grpc-go ignores the setting.
func rdsManager(t *listenerTelemetry, statPrefix, routeName string) *hcmv3.HttpConnectionManager {
	m := &hcmv3.HttpConnectionManager{
		StatPrefix:     statPrefix,
		NormalizePath:  wrapperspb.Bool(true),
		UpgradeConfigs: websocketUpgrade,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: adsSource(), RouteConfigName: routeName,
		}},
	}
	// Fault before CORS, as istiod orders them; the telemetry filters
	// around them (telemetry_filters.go).
	return t.manager(m, nil, faultFilter(), corsFilter())
}

// websocketUpgrade lets WebSocket upgrades through every Envoy
// connection manager, as istiod allows them.
var websocketUpgrade = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}

// inboundRoute is the route of an inbound chain to the application port
// behind cluster, as istiod builds it: no timeout, gRPC deadlines
// (grpc-timeout) honoured, and retries of what was reset before the
// request (inboundRetry).
func inboundRoute(cluster string, p model.Protocol) *routev3.Route {
	r := defaultRoute(cluster, inboundRetry(p))
	r.GetRoute().MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{
		MaxStreamDuration: durationpb.New(0), GrpcTimeoutHeaderMax: durationpb.New(0),
	}
	return r
}

func inlineManager(statPrefix string, rc *routev3.RouteConfiguration) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix:     statPrefix,
		NormalizePath:  wrapperspb.Bool(true),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc},
		HttpFilters:    []*hcmv3.HttpFilter{routerFilter()},
	}
}

func hcmFilter(m *hcmv3.HttpConnectionManager) *listenerv3.Filter {
	return &listenerv3.Filter{
		Name:       "envoy.filters.network.http_connection_manager",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(m)},
	}
}

func tcpFilter(statPrefix, cluster string) *listenerv3.Filter {
	return &listenerv3.Filter{
		Name: "envoy.filters.network.tcp_proxy",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&tcpv3.TcpProxy{
			StatPrefix: statPrefix, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster},
		})},
	}
}

// virtualOutbound captures outbound traffic on 15001 and hands each
// connection to the listener of its original destination port; what no
// listener claims passes through.
func virtualOutbound(t *listenerTelemetry) *listenerv3.Listener {
	return t.listener(&listenerv3.Listener{
		Name:             VirtualOutbound,
		Address:          socketAddress("0.0.0.0", VirtualOutboundPort),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains: []*listenerv3.FilterChain{{
			Name:    "PassthroughFilterChain",
			Filters: t.stack(t.tcpProxy(PassthroughCluster, PassthroughCluster)),
		}},
	})
}

// servicesByPort groups the visible services by port number (UDP ports
// have no listener), ports ascending. A port's listener that takes its
// services from here records the answer (qPortServices).
func servicesByPort(sc *Scope) ([]int32, map[int32][]*model.Service) {
	m := sc.portServices()
	return sc.byPort.ports, m
}

// portIndex is servicesByPort's answer, computed once per scope.
type portIndex struct {
	once  sync.Once
	ports []int32
	m     map[int32][]*model.Service
}

// portServices maps each port number to the visible services with it.
func (sc *Scope) portServices() map[int32][]*model.Service {
	x := sc.byPort
	x.once.Do(func() {
		x.m = map[int32][]*model.Service{}
		for _, svc := range sc.Services {
			for _, p := range svc.Ports {
				if p.Protocol != model.ProtocolUDP {
					x.m[p.Port] = append(x.m[p.Port], svc)
				}
			}
		}
		x.ports = make([]int32, 0, len(x.m))
		for p := range x.m {
			x.ports = append(x.ports, p)
		}
		slices.Sort(x.ports)
	})
	return x.m
}

// portRefs is what a port's outbound listener refers to, or leaves out,
// of the class's routes.
type portRefs struct {
	// refs are the route names the listener uses.
	refs []string
	// addressless are the HTTP services without an address, routed by
	// the RouteConfiguration named after the port.
	addressless []*model.Service
	// portRoute says that the listener uses the RouteConfiguration named
	// after the port (addressless, plus allow_any): the port has HTTP
	// services, so that traffic on it to an address of no service is read
	// as HTTP, as on istiod's 0.0.0.0_PORT HTTP listener.
	portRoute bool
	// unclaimed are the HOST:PORT routes of services (serviceUnit builds
	// them) that have no chain on the listener: an earlier service
	// claimed their addresses. They are not sent (consistent()).
	unclaimed []string
	// headless are the sniffed services whose chains are per endpoint
	// address; the port builds their HOST:PORT routes, which exist only
	// when an endpoint has a chain.
	headless []*model.Service
}

// outboundListener builds the listener of one service port number, named
// 0.0.0.0_PORT and not bound (virtualOutbound hands connections over). Each
// service address on the port has its own filter chain: HTTP ports use RDS
// with the service port's own RouteConfiguration (HOST:PORT), TCP ports a
// TCP proxy routed by the host's VirtualService tcp routes, TLS ports
// chains matched by SNI (listener_vs_tcp.go), sniffed ports both an HTTP and a TCP
// chain (listener_sniff.go). The TCP and sniffed ports of a service without
// addresses that sends connections where they were dialled (headless)
// have chains per endpoint address (listener_headless.go). HTTP hosts without an
// address share the default chain, which uses the RouteConfiguration named
// PORT. An address belongs to the first service that has it (chainClaims):
// a later service with the same address gets no chain, and its HOST:PORT
// route is left out (portRefs.unclaimed) and reported.
//
// memo, if not nil, supplies the plaintext HTTP chains the previous
// generation marshaled (listener_memo.go); the listener is then to be
// marshaled by memo.resource.
func (g *Generator) outboundListener(sc *Scope, port int32, svcs []*model.Service, memo *chainMemo) (*listenerv3.Listener, portRefs) {
	l := &listenerv3.Listener{
		Name:             "0.0.0.0_" + itoa(port),
		Address:          socketAddress("0.0.0.0", port),
		BindToPort:       wrapperspb.Bool(false),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
	var out portRefs
	httpPort := false
	sniff := sniffedOutbound{tel: sc.outTel()}
	for _, svc := range svcs {
		if p, _ := svc.PortByNumber(port); isTLS(p.Protocol) {
			sniff.mayInspectTLS = true
			break
		}
	}
	claims := chainClaims{}
	for _, svc := range svcs {
		p, _ := svc.PortByNumber(port)
		sniffs := sniffed(sc.Proxy, p.Protocol)
		httpPort = httpPort || p.Protocol.IsHTTP()
		switch {
		case isTLS(p.Protocol):
			l.FilterChains = append(l.FilterChains, g.meshTLSChains(sc, svc, port, claims)...)
		case endpointChained(svc, p):
			chains := g.endpointChains(sc, svc, p, claims)
			if sniffs && len(chains) > 0 {
				route := RouteName(svc.Hostname, port)
				chains = sniff.add(chains, route)
				out.refs = append(out.refs, route)
				out.headless = append(out.headless, svc)
			}
			l.FilterChains = append(l.FilterChains, chains...)
		case len(svc.Addresses) == 0:
			if p.Protocol.IsHTTP() || sniffs {
				out.addressless = append(out.addressless, svc)
			}
			sniff.addressless(g, svc, port, sniffs, p.Protocol.IsHTTP())
		default:
			// A service chain is named after the service port's route.
			var fc *listenerv3.FilterChain
			if sniffs {
				// Sniffing rewrites the chain: never a kept one.
				fc = g.serviceChain(sc, svc, p, claims, nil)
			} else {
				fc = g.serviceChain(sc, svc, p, claims, memo)
			}
			switch {
			case fc != nil && sniffs:
				l.FilterChains = append(l.FilterChains, sniff.add([]*listenerv3.FilterChain{fc}, fc.Name)...)
				out.refs = append(out.refs, fc.Name)
			case fc != nil:
				l.FilterChains = append(l.FilterChains, fc)
				if p.Protocol.IsHTTP() {
					out.refs = append(out.refs, fc.Name)
				}
			case routedByService(sc.Proxy, svc, p):
				out.unclaimed = append(out.unclaimed, RouteName(svc.Hostname, port))
				g.warnUnclaimed(svc, port)
			}
		}
	}
	sniff.finish(g, sc, l, port, httpPort)
	out.portRoute = len(out.addressless) > 0 || httpPort
	if out.portRoute {
		out.refs = append(out.refs, itoa(port))
	}
	if l.DefaultFilterChain == nil {
		l.DefaultFilterChain = defaultOutboundChain(sc.outTel(), port, out.portRoute)
	}
	return sc.outTel().listener(l), out
}

// defaultOutboundChain is the default chain of a port's outbound listener
// that does not sniff services without address: on a port with HTTP
// services, an HttpConnectionManager with the port's route (its services
// without address, then allow_any to the passthrough or, REGISTRY_ONLY,
// block_all), as istiod's 0.0.0.0_PORT HTTP listener reads everything no
// service address claims; else passthrough. (istiod's port route also has
// the virtual hosts of the services with addresses, so that a request
// sent to an address of no service with the Host of one is routed to
// it; here it goes where it was sent.)
func defaultOutboundChain(t *listenerTelemetry, port int32, http bool) *listenerv3.FilterChain {
	if http {
		return &listenerv3.FilterChain{
			Name:    "addressless",
			Filters: []*listenerv3.Filter{hcmFilter(rdsManager(t, "outbound_0.0.0.0_"+itoa(port), itoa(port)))},
		}
	}
	return &listenerv3.FilterChain{
		Name:    "PassthroughFilterChain",
		Filters: t.stack(t.tcpProxy(PassthroughCluster, PassthroughCluster)),
	}
}

// routedByService reports whether the class of p has the route HOST:PORT
// of svc's port (serviceUnit), which a listener chain must use: an HTTP
// or sniffed port of a service with addresses, on a sidecar.
func routedByService(p *model.Proxy, svc *model.Service, port model.Port) bool {
	return p.Type == model.ProxySidecar && !p.IsGRPC() && len(svc.Addresses) > 0 &&
		(port.Protocol.IsHTTP() || port.Protocol.IsSniffed())
}

// warnUnclaimed reports, once per version of svc, a service port whose
// addresses an earlier service on the port has: traffic to them goes to
// that service.
func (g *Generator) warnUnclaimed(svc *model.Service, port int32) {
	key := "unclaimed|" + RouteName(svc.Hostname, port) + "@" + svc.ResourceVersion
	if _, done := g.warns.once.LoadOrStore(key, true); done {
		return
	}
	g.log.Warn("service port left out of its outbound listener: another service on the port has its addresses",
		"service", svc.Namespace+"/"+svc.Name, "host", svc.Hostname, "port", port, "addresses", svc.Addresses)
}

// warnShadowedAddressless reports, once per version of svc, a TCP or
// sniffed service without address on a port whose default path an earlier
// one (first) already takes: connections to addresses of no service go
// to first.
func (g *Generator) warnShadowedAddressless(svc, first *model.Service, port int32) {
	key := "shadowed|" + RouteName(svc.Hostname, port) + "@" + svc.ResourceVersion
	if _, done := g.warns.once.LoadOrStore(key, true); done {
		return
	}
	g.log.Warn("service port without address left out of its outbound listener: another service without address on the port takes the connections no address matches",
		"service", svc.Namespace+"/"+svc.Name, "host", svc.Hostname, "port", port, "taken by", first.Hostname)
}

// serviceChain is the filter chain of a plaintext service port, matched by
// the service's addresses that no earlier chain claimed.
// An HTTP chain is its name, match and the class's outbound telemetry
// alone: memo, if not nil, may supply it as marshaled before.
func (g *Generator) serviceChain(sc *Scope, svc *model.Service, p model.Port, claims chainClaims, memo *chainMemo) *listenerv3.FilterChain {
	match := &listenerv3.FilterChainMatch{PrefixRanges: addressRanges(svc.Addresses)}
	if len(match.PrefixRanges) == 0 || !claims.claim(match) {
		return nil
	}
	name := RouteName(svc.Hostname, p.Port)
	if !p.Protocol.IsHTTP() {
		return &listenerv3.FilterChain{Name: name, FilterChainMatch: match, Filters: g.meshTCPFilters(sc, svc, p.Port)}
	}
	build := func() *listenerv3.FilterChain {
		return &listenerv3.FilterChain{
			Name: name, FilterChainMatch: match,
			Filters: []*listenerv3.Filter{hcmFilter(rdsManager(sc.outTel(), "outbound_"+name, name))},
		}
	}
	if memo == nil {
		return build()
	}
	return memo.httpChain(name, match, build)
}

// InboundPort is one port of the proxy's own workload.
type InboundPort struct {
	Port     int32
	Protocol model.Protocol
}

// inboundSecurity is what Istio's security APIs add to a sidecar's inbound
// listener, RBAC filters and the mTLS mode of each port, and what its
// telemetry adds (nil: nothing).
type inboundSecurity struct {
	authz inboundAuthz
	mtls  inboundMTLS
	// serverTLS terminates mesh mTLS on the chains that take it.
	serverTLS meshServerTLS
	tel       *listenerTelemetry
}

// virtualInbound accepts inbound traffic on 15006 with filter chains per
// pod port, to that port's inbound cluster; other ports pass through
// (passthroughChains). The workload's AuthorizationPolicies run as RBAC
// filters on every chain and its PeerAuthentication mode decides whether
// a chain takes mTLS, plaintext or both; sniffed ports have HTTP and TCP
// chains of each (listener_sniff.go). declared are further ports the caller adds
// chains for (a Sidecar's TLS-terminating ingress ports), which the
// passthrough leaves alone. The caller sets the listener filters once its
// chains are complete (setInboundInspectors).
func virtualInbound(ports []InboundPort, declared []int32, sec inboundSecurity) *listenerv3.Listener {
	l := &listenerv3.Listener{
		Name:             VirtualInbound,
		Address:          socketAddress("0.0.0.0", VirtualInboundPort),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name:       "envoy.filters.listener.original_dst",
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&origdstv3.OriginalDst{})},
		}},
	}
	for _, p := range ports {
		declared = append(declared, p.Port)
		mode := sec.mtls.forPort(p.Port)
		if p.Protocol.IsSniffed() {
			l.FilterChains = append(l.FilterChains, sniffedInboundChains(p, mode, sec)...)
			continue
		}
		l.FilterChains = append(l.FilterChains, securedChains(inboundChain(p, sec), p, mode, sec)...)
	}
	l.FilterChains = append(passthroughChains(declared, sec), l.FilterChains...)
	return sec.tel.listener(l)
}

// inboundChain is the plaintext chain of one pod port: an
// HttpConnectionManager with the RBAC filters before the router, or the
// network RBAC filters before a TCP proxy; with telemetry, Istio's filters
// around them (telemetry_filters.go).
func inboundChain(p InboundPort, sec inboundSecurity) *listenerv3.FilterChain {
	cluster := InboundClusterName(p.Port)
	return inboundChainTo(cluster, cluster, p.Port, p.Port, p.Protocol, sec)
}

// inboundChainTo is the plaintext chain name of protocol proto to cluster
// for connections to port (0: any), its virtual host named after
// vhostPort as Istio names them (inbound|http|PORT).
func inboundChainTo(name, cluster string, port, vhostPort int32, proto model.Protocol, sec inboundSecurity) *listenerv3.FilterChain {
	fc := &listenerv3.FilterChain{Name: name}
	if port != 0 {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(uint32(port))}
	}
	if !proto.IsHTTP() {
		fc.Filters = sec.tel.tcpChain(true, sec.authz.tcp, cluster, cluster)
		return fc
	}
	rc := &routev3.RouteConfiguration{
		Name: cluster,
		VirtualHosts: []*routev3.VirtualHost{{
			Name: "inbound|http|" + itoa(vhostPort), Domains: []string{"*"},
			Routes: []*routev3.Route{inboundRoute(cluster, proto)},
		}},
	}
	m := &hcmv3.HttpConnectionManager{
		StatPrefix:     cluster,
		NormalizePath:  wrapperspb.Bool(true),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc},
		UpgradeConfigs: websocketUpgrade,
	}
	if sec.tel == nil {
		m.HttpFilters = append(append([]*hcmv3.HttpFilter{}, sec.authz.http...), routerFilter())
	} else {
		sec.tel.manager(m, sec.authz.http, faultFilter(), corsFilter())
	}
	fc.Filters = sec.tel.httpChainFilters(m)
	return fc
}

// apiListener is the Listener a proxyless gRPC client asks for when it dials
// xds:///HOST:PORT: an API listener whose HttpConnectionManager fetches the
// RouteConfiguration of the same name.
func apiListener(name string) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(grpcManager(name))},
	}
}

// grpcManager is the HttpConnectionManager of a proxyless gRPC API
// listener: only filters grpc-go implements (fault injection, router).
func grpcManager(name string) *hcmv3.HttpConnectionManager {
	m := rdsManager(nil, "outbound_"+name, name)
	m.HttpFilters = []*hcmv3.HttpFilter{faultFilter(), routerFilter()}
	m.UpgradeConfigs = nil // no upgrades in gRPC
	return m
}
