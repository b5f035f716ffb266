package gen

import (
	"math"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// SDS secret names Istio's agent serves to its proxy.
const (
	SDSDefault = "default"
	SDSRootCA  = "ROOTCA"
	// SDSCluster is the agent's SDS cluster in the proxy's bootstrap.
	SDSCluster = "sds-grpc"
)

// drFields are the DestinationRule fields generation acts on.
var drFields = newFieldSet(
	"host", "exportTo", "workloadSelector", "subsets.name", "subsets.labels",
	"trafficPolicy.loadBalancer.simple",
	"trafficPolicy.loadBalancer.consistentHash.httpHeaderName", "trafficPolicy.loadBalancer.consistentHash.httpCookie.name",
	"trafficPolicy.loadBalancer.consistentHash.httpCookie.path", "trafficPolicy.loadBalancer.consistentHash.httpCookie.ttl",
	"trafficPolicy.loadBalancer.consistentHash.useSourceIp", "trafficPolicy.loadBalancer.consistentHash.httpQueryParameterName",
	"trafficPolicy.loadBalancer.consistentHash.ringHash", "trafficPolicy.loadBalancer.consistentHash.maglev",
	"trafficPolicy.loadBalancer.consistentHash.minimumRingSize",
	// enabled, distribute, failover, failoverPriority (endpoint_locality.go).
	"trafficPolicy.loadBalancer.localityLbSetting",
	"trafficPolicy.connectionPool.tcp.maxConnections", "trafficPolicy.connectionPool.tcp.connectTimeout",
	"trafficPolicy.connectionPool.tcp.maxConnectionDuration",
	"trafficPolicy.connectionPool.http.http1MaxPendingRequests", "trafficPolicy.connectionPool.http.http2MaxRequests",
	"trafficPolicy.connectionPool.http.maxRequestsPerConnection", "trafficPolicy.connectionPool.http.maxRetries",
	"trafficPolicy.connectionPool.http.idleTimeout", "trafficPolicy.connectionPool.http.h2UpgradePolicy",
	"trafficPolicy.outlierDetection.consecutive5xxErrors", "trafficPolicy.outlierDetection.consecutiveGatewayErrors",
	"trafficPolicy.outlierDetection.interval", "trafficPolicy.outlierDetection.baseEjectionTime",
	"trafficPolicy.outlierDetection.maxEjectionPercent", "trafficPolicy.outlierDetection.minHealthPercent",
	"trafficPolicy.outlierDetection.splitExternalLocalOriginErrors", "trafficPolicy.outlierDetection.consecutiveLocalOriginFailures",
	"trafficPolicy.tls.mode", "trafficPolicy.tls.clientCertificate", "trafficPolicy.tls.privateKey",
	"trafficPolicy.tls.caCertificates", "trafficPolicy.tls.subjectAltNames", "trafficPolicy.tls.sni",
	"trafficPolicy.tls.insecureSkipVerify",
	// Port-level and subset policies take the same fields (checked below
	// against the same names, see policyFieldPaths).
	//
	// Proxyless gRPC clients honour tls modes DISABLE and ISTIO_MUTUAL
	// (with subjectAltNames) only; SIMPLE and MUTUAL leave them in
	// plaintext, reported when a gRPC class is generated
	// (Generator.grpcClusterTLS), since the same rule serves sidecars.
)

func init() {
	var extra []string
	for p := range drFields {
		if rest, ok := strings.CutPrefix(p, "trafficPolicy."); ok {
			extra = append(extra, "trafficPolicy.portLevelSettings."+rest, "subsets.trafficPolicy."+rest,
				"subsets.trafficPolicy.portLevelSettings."+rest)
		}
	}
	extra = append(extra, "trafficPolicy.portLevelSettings.port", "subsets.trafficPolicy.portLevelSettings.port")
	for _, p := range extra {
		drFields[p] = true
	}
}

// policy is the traffic policy of one cluster, as istiod merges it
// (MergeSubsetTrafficPolicy): the DestinationRule's, or its settings for
// the port if it has some, which replace it whole (what they leave out
// takes the defaults, not the rule's); then the subset's policy, or its
// settings for the port, on top: each of load balancer, connection pool,
// outlier detection and TLS the subset sets replaces the rule's, and the
// subset's port settings replace all four.
func policy(dr *networking.DestinationRule, subset string, port int32) *networking.TrafficPolicy {
	if dr == nil {
		return nil
	}
	out := &networking.TrafficPolicy{}
	if top, _ := portPolicy(dr.TrafficPolicy, port); top != nil {
		over(out, top.LoadBalancer, top.ConnectionPool, top.OutlierDetection, top.Tls)
	}
	if subset == "" {
		return out
	}
	for _, s := range dr.Subsets {
		if s.GetName() != subset || s.TrafficPolicy == nil {
			continue
		}
		sub, whole := portPolicy(s.TrafficPolicy, port)
		if whole {
			out.LoadBalancer, out.ConnectionPool, out.OutlierDetection, out.Tls = sub.LoadBalancer, sub.ConnectionPool, sub.OutlierDetection, sub.Tls
		} else {
			over(out, sub.LoadBalancer, sub.ConnectionPool, sub.OutlierDetection, sub.Tls)
		}
		break
	}
	return out
}

// portPolicy is tp's settings for port when it has some (whole: they
// replace tp), else tp (Istio's GetPortLevelTrafficPolicy).
func portPolicy(tp *networking.TrafficPolicy, port int32) (out *networking.TrafficPolicy, whole bool) {
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort() != nil && int32(pl.GetPort().GetNumber()) == port {
			return &networking.TrafficPolicy{LoadBalancer: pl.LoadBalancer, ConnectionPool: pl.ConnectionPool, OutlierDetection: pl.OutlierDetection, Tls: pl.Tls}, true
		}
	}
	return tp, false
}

func over(tp *networking.TrafficPolicy, lb *networking.LoadBalancerSettings, cp *networking.ConnectionPoolSettings, od *networking.OutlierDetection, tls *networking.ClientTLSSettings) {
	if lb != nil {
		tp.LoadBalancer = lb
	}
	if cp != nil {
		tp.ConnectionPool = cp
	}
	if od != nil {
		tp.OutlierDetection = od
	}
	if tls != nil {
		tp.Tls = tls
	}
}

// applyPolicy sets a cluster's load balancing, circuit breakers, outlier
// detection and TLS origination: Envoy's from SDS (without server
// identities: the outbound clusters of a service get those from
// Generator.envoyClusterTLS), a proxyless gRPC client's from its
// certificate providers (grpc_security.go; Generator.grpcClusterTLS adds
// the identities).
func applyPolicy(c *clusterv3.Cluster, tp *networking.TrafficPolicy, envoy bool) {
	if tp == nil {
		return
	}
	applyTraffic(c, tp)
	if envoy {
		c.TransportSocket = upstreamTLS(tp.Tls, c, nil)
	} else {
		c.TransportSocket = grpcUpstreamTLS(tp.Tls, nil)
	}
}

// applyTraffic sets what a traffic policy says of a cluster except TLS:
// load balancing, circuit breakers and outlier detection.
func applyTraffic(c *clusterv3.Cluster, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	applyLB(c, tp.LoadBalancer)
	applyPool(c, tp.ConnectionPool)
	c.OutlierDetection = outlier(tp.OutlierDetection)
	if od := tp.OutlierDetection; od != nil && od.MinHealthPercent > 0 {
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: float64(od.MinHealthPercent)}}
	}
}

func applyLB(c *clusterv3.Cluster, lb *networking.LoadBalancerSettings) {
	if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
		// The connection's destination is the host: Envoy takes no other
		// load balancer for such a cluster, and Istio ignores the rule's.
		c.LbPolicy, c.LbConfig = clusterv3.Cluster_CLUSTER_PROVIDED, nil
		return
	}
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_LEAST_REQUEST, networking.LoadBalancerSettings_LEAST_CONN:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	case networking.LoadBalancerSettings_RANDOM:
		c.LbPolicy = clusterv3.Cluster_RANDOM
	case networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	}
	ch := lb.GetConsistentHash()
	if ch == nil {
		return
	}
	if ch.GetMaglev() != nil {
		c.LbPolicy = clusterv3.Cluster_MAGLEV
		if t := ch.GetMaglev().GetTableSize(); t > 0 {
			c.LbConfig = &clusterv3.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterv3.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(t)}}
		}
		return
	}
	c.LbPolicy = clusterv3.Cluster_RING_HASH
	size := ch.GetRingHash().GetMinimumRingSize()
	if size == 0 {
		size = ch.GetMinimumRingSize()
	}
	if size > 0 {
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(size)}}
	}
}

// hashPolicy is the route hash policy of a consistent-hash load balancer.
func hashPolicy(tp *networking.TrafficPolicy) []*routev3.RouteAction_HashPolicy {
	ch := tp.GetLoadBalancer().GetConsistentHash()
	if ch == nil {
		return nil
	}
	var hp *routev3.RouteAction_HashPolicy
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: k.HttpHeaderName}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		cookie := &routev3.RouteAction_HashPolicy_Cookie{Name: k.HttpCookie.GetName(), Path: k.HttpCookie.GetPath()}
		if ttl := k.HttpCookie.GetTtl(); ttl != nil {
			cookie.Ttl = durationpb.New(ttl.AsDuration())
		}
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: cookie}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: k.UseSourceIp}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: k.HttpQueryParameterName}}}
	default:
		return nil
	}
	return []*routev3.RouteAction_HashPolicy{hp}
}

// envoyClusterDefaults are what istiod gives every Envoy cluster before
// its DestinationRule: circuit breakers that never trip (Envoy's own
// defaults, 1024 connections and 3 parallel retries, would turn a burst
// or pod churn into 503s), remaining capacity tracked; the panic threshold
// off, so that unready endpoints are never sent traffic (istiod sends them
// with a 0% threshold); LEAST_REQUEST load balancing (an original
// destination cluster keeps CLUSTER_PROVIDED).
func envoyClusterDefaults(c *clusterv3.Cluster) {
	setDefaultLimits(c)
	c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
	if c.GetType() != clusterv3.Cluster_ORIGINAL_DST && c.LbPolicy == clusterv3.Cluster_ROUND_ROBIN {
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
}

// setDefaultLimits gives c istiod's default circuit breakers (unlimited).
func setDefaultLimits(c *clusterv3.Cluster) {
	maxU := wrapperspb.UInt32(math.MaxUint32)
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		MaxConnections: maxU, MaxPendingRequests: maxU, MaxRequests: maxU, MaxRetries: maxU, TrackRemaining: true,
	}}}
}

// applyPool sets the connection pool's limits and timeouts on c; limits it
// leaves unset keep c's (envoyClusterDefaults), else Envoy's.
func applyPool(c *clusterv3.Cluster, cp *networking.ConnectionPoolSettings) {
	if cp == nil {
		return
	}
	th := &clusterv3.CircuitBreakers_Thresholds{}
	if ths := c.GetCircuitBreakers().GetThresholds(); len(ths) == 1 {
		th = proto.Clone(ths[0]).(*clusterv3.CircuitBreakers_Thresholds)
	}
	set := false
	u32 := func(v int32, dflt *wrapperspb.UInt32Value) *wrapperspb.UInt32Value {
		if v > 0 {
			set = true
			return wrapperspb.UInt32(uint32(v))
		}
		return dflt
	}
	th.MaxConnections = u32(cp.GetTcp().GetMaxConnections(), th.MaxConnections)
	th.MaxPendingRequests = u32(cp.GetHttp().GetHttp1MaxPendingRequests(), th.MaxPendingRequests)
	th.MaxRequests = u32(cp.GetHttp().GetHttp2MaxRequests(), th.MaxRequests)
	th.MaxRetries = u32(cp.GetHttp().GetMaxRetries(), th.MaxRetries)
	if set {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
	}
	if d := cp.GetTcp().GetConnectTimeout(); d != nil {
		c.ConnectTimeout = durationpb.New(d.AsDuration())
	}
	hpo := &corev3.HttpProtocolOptions{}
	hset := false
	if n := cp.GetHttp().GetMaxRequestsPerConnection(); n > 0 {
		hpo.MaxRequestsPerConnection, hset = wrapperspb.UInt32(uint32(n)), true
	}
	if d := cp.GetHttp().GetIdleTimeout(); d != nil {
		hpo.IdleTimeout, hset = durationpb.New(d.AsDuration()), true
	}
	if d := cp.GetTcp().GetMaxConnectionDuration(); d != nil {
		hpo.MaxConnectionDuration, hset = durationpb.New(d.AsDuration()), true
	}
	if hset {
		setCommonHTTPOptions(c, hpo)
	}
}

func outlier(od *networking.OutlierDetection) *clusterv3.OutlierDetection {
	if od == nil {
		return nil
	}
	out := &clusterv3.OutlierDetection{}
	// Istio: consecutive5xxErrors of 0 disables 5xx ejection; gateway
	// errors are off unless set.
	if v := od.GetConsecutive_5XxErrors(); v != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(v.GetValue())
		if v.GetValue() > 0 {
			out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(100)
		} else {
			out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(0)
		}
	} else if od.GetConsecutiveErrors() > 0 {
		out.Consecutive_5Xx = wrapperspb.UInt32(uint32(od.GetConsecutiveErrors()))
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(100)
	}
	if v := od.GetConsecutiveGatewayErrors(); v != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(v.GetValue())
		if v.GetValue() > 0 {
			out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(100)
		}
	}
	if d := od.GetInterval(); d != nil {
		out.Interval = durationpb.New(d.AsDuration())
	}
	if d := od.GetBaseEjectionTime(); d != nil {
		out.BaseEjectionTime = durationpb.New(d.AsDuration())
	}
	if p := od.GetMaxEjectionPercent(); p > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(min(p, 100)))
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if v := od.GetConsecutiveLocalOriginFailures(); v != nil {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(v.GetValue())
		}
	}
	return out
}

// sdsSecret names a secret of Istio's agent, fetched over its SDS cluster.
func sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ResourceApiVersion:  corev3.ApiVersion_V3,
		InitialFetchTimeout: durationpb.New(0),
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType: corev3.ApiConfigSource_GRPC, TransportApiVersion: corev3.ApiVersion_V3,
			SetNodeOnFirstMessageOnly: true,
			GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: SDSCluster},
			}}},
		}},
	}}
}

// IstioSNI is the SNI Istio's sidecars send for ISTIO_MUTUAL to a cluster.
func IstioSNI(cluster string) string {
	parts := strings.SplitN(cluster, "|", 4)
	if len(parts) != 4 {
		return cluster
	}
	return parts[0] + "_." + parts[1] + "_." + parts[2] + "_." + parts[3]
}

// SDSSystemRoots is the secret of Istio's agent holding the system's root
// certificates.
const SDSSystemRoots = "file-root:system"

// upstreamTLS is the transport socket of a DestinationRule's tls for
// cluster c, as istiod builds it: TLS 1.2 to 1.3; for ISTIO_MUTUAL the
// server must present one of the rule's subjectAltNames, or if it lists
// none one of identities (the destination's service accounts,
// Generator.serviceIdentities), the SNI is the rule's or Istio's
// outbound_.PORT_.SUBSET_.HOST and ALPN says in-mesh (and h2 for an
// HTTP/2 cluster); SIMPLE and MUTUAL verify the server against the rule's
// caCertificates, else the system's roots (Istio's default), and its
// subjectAltNames, unless insecureSkipVerify, and offer h2 to an HTTP/2
// cluster.
func upstreamTLS(tls *networking.ClientTLSSettings, c *clusterv3.Cluster, identities []string) *corev3.TransportSocket {
	return upstreamTLSWithCA(tls, c, identities, nil)
}

// upstreamTLSWithCA is upstreamTLS whose SIMPLE and MUTUAL modes verify
// the server against ca (PEM) inline when it is set: a BackendTLSPolicy's
// CA (backendCA).
func upstreamTLSWithCA(tls *networking.ClientTLSSettings, c *clusterv3.Cluster, identities []string, inlineCA []byte) *corev3.TransportSocket {
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{TlsParams: &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
		TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
	}}}
	file := func(p string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: p}}
	}
	h2 := isHTTP2Cluster(c)
	switch tls.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		ctx.Sni = tls.GetSni()
		if ctx.Sni == "" {
			ctx.Sni = IstioSNI(c.GetName())
		}
		names := tls.GetSubjectAltNames()
		if len(names) == 0 {
			names = identities
		}
		ctx.CommonTlsContext.AlpnProtocols = meshClientALPN
		if h2 {
			ctx.CommonTlsContext.AlpnProtocols = meshClientH2ALPN
		}
		ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsSecret(SDSDefault)}
		ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(names)},
				ValidationContextSdsSecretConfig: sdsSecret(SDSRootCA),
			},
		}
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		ctx.Sni = tls.GetSni()
		vc := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(tls.GetSubjectAltNames())}
		switch ca := tls.GetCaCertificates(); {
		case tls.GetInsecureSkipVerify().GetValue():
		case inlineCA != nil:
			vc.TrustedCa = inlineBytes(inlineCA)
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
		case ca != "":
			vc.TrustedCa = file(ca)
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
		default:
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         vc,
					ValidationContextSdsSecretConfig: sdsSecret(SDSSystemRoots),
				},
			}
		}
		if tls.GetMode() == networking.ClientTLSSettings_MUTUAL && tls.GetClientCertificate() != "" {
			ctx.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
				CertificateChain: file(tls.GetClientCertificate()), PrivateKey: file(tls.GetPrivateKey()),
			}}
		}
		if h2 {
			ctx.CommonTlsContext.AlpnProtocols = []string{"h2"}
		}
	default:
		return nil
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// Istio's client ALPN for mesh mTLS: in-mesh ("istio") with the TCP
// metadata exchange, and h2 for an HTTP/2 cluster.
var (
	meshClientALPN   = []string{"istio-peer-exchange", "istio"}
	meshClientH2ALPN = []string{"istio-peer-exchange", "istio", "h2"}
)

// isHTTP2Cluster reports whether c speaks HTTP/2 to its endpoints
// explicitly (Istio's isHttp2Cluster).
func isHTTP2Cluster(c *clusterv3.Cluster) bool {
	a := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if a == nil {
		return false
	}
	opts := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(opts); err != nil {
		return false
	}
	return opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
}

// sanMatchers match a peer certificate's subject alt names exactly
// against names: SPIFFE IDs as URI SANs, anything else as DNS SANs.
func sanMatchers(names []string) []*tlsv3.SubjectAltNameMatcher {
	var out []*tlsv3.SubjectAltNameMatcher
	for _, s := range names {
		typ := tlsv3.SubjectAltNameMatcher_DNS
		if strings.HasPrefix(s, "spiffe://") {
			typ = tlsv3.SubjectAltNameMatcher_URI
		}
		out = append(out, &tlsv3.SubjectAltNameMatcher{SanType: typ, Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}})
	}
	return out
}

const httpOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// setCommonHTTPOptions puts common HTTP options into the cluster's
// HttpProtocolOptions, keeping its upstream protocol (HTTP/1.1 if none).
func setCommonHTTPOptions(c *clusterv3.Cluster, common *corev3.HttpProtocolOptions) {
	opts := &httpv3.HttpProtocolOptions{}
	if a := c.TypedExtensionProtocolOptions[httpOptionsKey]; a != nil {
		_ = a.UnmarshalTo(opts)
	}
	if opts.UpstreamProtocolOptions == nil {
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
		}}
	}
	opts.CommonHttpProtocolOptions = common
	if c.TypedExtensionProtocolOptions == nil {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{}
	}
	c.TypedExtensionProtocolOptions[httpOptionsKey] = mustAny(opts)
}

// clusterPolicy is the traffic policy of the cluster for host, subset and
// port, or nil without a DestinationRule.
func (sc *Scope) clusterPolicy(host, subset string, port int32) *networking.TrafficPolicy {
	dr := sc.DestinationRule(host)
	if dr == nil {
		return nil
	}
	return policy(&dr.Spec, subset, port)
}

// backendCA is the PEM CA a DestinationRule derived from BackendTLSPolicies
// makes the clusters of port verify servers with
// (gatewayapi.AnnotationBackendCA), or nil: for any other rule, and
// where the policy trusts the system roots. Only a rule named as the
// translation names it and marked as derived from a BackendTLSPolicy is
// read; a user's rule of that name and annotations could say no more
// than its own caCertificates could.
func backendCA(dr *networkingv1.DestinationRule, port int32) []byte {
	if dr == nil || !strings.HasSuffix(dr.Name, "~istio-autogenerated-k8s-gateway") ||
		!strings.Contains(dr.Annotations[gatewayapi.AnnotationDerivedFrom], gatewayapi.KindBackendTLSPolicy+"/") {
		return nil
	}
	_, portLevel := portPolicy(dr.Spec.GetTrafficPolicy(), port)
	if ca, ok := gatewayapi.BackendCA(dr.Annotations, uint32(port), portLevel); ok {
		return []byte(ca)
	}
	return nil
}
