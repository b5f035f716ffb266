package dataplane

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Builders for hand-written configurations: each returns the smallest
// Envoy resource of its kind, to be adjusted by the test.

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func addr(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// captureListener is virtualOutbound: port 15001, original destination
// hand-off, a passthrough default chain.
func captureListener(t testing.TB, passthrough string) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: "capture", Address: addr("0.0.0.0", OutboundCapturePort), UseOriginalDst: wrapperspb.Bool(true),
		DefaultFilterChain: tcpChain(t, "passthrough", passthrough),
	}
}

func hcm(t testing.TB, rds string, filters ...*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router",
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}})
	return &hcmv3.HttpConnectionManager{
		StatPrefix: "x", HttpFilters: filters,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: rds}},
	}
}

func httpChain(t testing.TB, name string, h *hcmv3.HttpConnectionManager) *listenerv3.FilterChain {
	return &listenerv3.FilterChain{Name: name, Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, h)},
	}}}
}

func tcpChain(t testing.TB, name, cluster string) *listenerv3.FilterChain {
	tp := &tcpv3.TcpProxy{StatPrefix: "x", ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster}}
	return &listenerv3.FilterChain{Name: name, Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, tp)},
	}}}
}

func portListener(name, ip string, port uint32, chains ...*listenerv3.FilterChain) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, Address: addr(ip, port), BindToPort: wrapperspb.Bool(false), FilterChains: chains}
}

func withTLSInspector(t testing.TB, l *listenerv3.Listener) *listenerv3.Listener {
	l.ListenerFilters = append(l.ListenerFilters, &listenerv3.ListenerFilter{Name: "envoy.filters.listener.tls_inspector",
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(t, &tlsinspv3.TlsInspector{})}})
	return l
}

func routeConfig(name string, vhs ...*routev3.VirtualHost) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: vhs}
}

func vhost(name string, domains []string, routes ...*routev3.Route) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains, Routes: routes}
}

func prefixRoute(name, prefix, cluster string) *routev3.Route {
	return &routev3.Route{
		Name:  name,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}, Timeout: durationpb.New(0),
		}},
	}
}

func weighted(r *routev3.Route, weights map[string]uint32) *routev3.Route {
	var cs []*routev3.WeightedCluster_ClusterWeight
	for _, name := range sortedKeys(weights) {
		cs = append(cs, &routev3.WeightedCluster_ClusterWeight{Name: name, Weight: wrapperspb.UInt32(weights[name])})
	}
	r.GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: cs}}
	return r
}

func edsCluster(name, service string) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: service, EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
	}
	return c
}

func staticCluster(name string, addrs ...string) *clusterv3.Cluster {
	c := &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}}
	c.LoadAssignment = cla(name, addrs...)
	return c
}

func originalDst(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy: clusterv3.Cluster_CLUSTER_PROVIDED}
}

// cla builds endpoints "ip:port" in one locality; an address with a
// trailing "+mtls" carries Istio's tlsMode metadata.
func cla(name string, addrs ...string) *endpointv3.ClusterLoadAssignment {
	le := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{}, LoadBalancingWeight: wrapperspb.UInt32(uint32(len(addrs)))}
	for _, a := range addrs {
		mtls := false
		if n := len(a); n > 5 && a[n-5:] == "+mtls" {
			a, mtls = a[:n-5], true
		}
		host, port := splitHostPort(a)
		lbe := &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr(host, port)}}}
		if mtls {
			md, _ := structpb.NewStruct(map[string]any{"tlsMode": "istio"})
			lbe.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: md}}
		}
		le.LbEndpoints = append(le.LbEndpoints, lbe)
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{le}}
}

func splitHostPort(a string) (string, uint32) {
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			var p uint32
			for _, r := range a[i+1:] {
				p = p*10 + uint32(r-'0')
			}
			return a[:i], p
		}
	}
	return a, 0
}

// istioMTLS adds Istio's auto-mTLS socket match: endpoints labelled
// tlsMode=istio get mTLS with the given SAN, the others plaintext.
func istioMTLS(t testing.TB, c *clusterv3.Cluster, sni, san string) *clusterv3.Cluster {
	ctx := &tlsv3.UpstreamTlsContext{Sni: sni, CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "default"}},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchSubjectAltNames: []*matcherv3.StringMatcher{{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san},
			}}},
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "ROOTCA"},
		}},
		AlpnProtocols: []string{"istio"},
	}}
	match, _ := structpb.NewStruct(map[string]any{"tlsMode": "istio"})
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{{
		Name: "tlsMode-istio", Match: match,
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, ctx)}},
	}}
	return c
}

func rbacFilter(t testing.TB, action rbacv3.RBAC_Action, policies map[string]*rbacv3.Policy) *hcmv3.HttpFilter {
	r := &rbachttpv3.RBAC{Rules: &rbacv3.RBAC{Action: action, Policies: policies}}
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.rbac", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, r)}}
}

func principalPolicy(principal string) *rbacv3.Policy {
	return &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}},
		Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
			PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: principal}},
		}}}},
	}
}

func pathPolicy(prefix string) *rbacv3.Policy {
	return &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
			Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}}},
		}}}},
		Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}},
	}
}

func inboundMTLSChain(t testing.TB, name string, port uint32, h *hcmv3.HttpConnectionManager) *listenerv3.FilterChain {
	fc := httpChain(t, name, h)
	fc.FilterChainMatch = &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port), TransportProtocol: "tls"}
	ctx := &tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "default"}},
		ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "ROOTCA"}},
	}}
	fc.TransportSocket = &corev3.TransportSocket{Name: "tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, ctx)}}
	return fc
}

func exactHeader(name, value string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: value}},
	}}
}

type (
	clusterT        = clusterv3.Cluster
	claT            = endpointv3.ClusterLoadAssignment
	tlsT            = tlsv3.UpstreamTlsContext
	hcmFilterT      = hcmv3.HttpFilter
	hcmRouteConfigT = hcmv3.HttpConnectionManager_RouteConfig
)
