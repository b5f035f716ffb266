package gen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Outbound clusters of a service, per port and DestinationRule subset, as
// Istio's cluster builder makes them:
//
//   - the discovery type follows the service's resolution and the proxy
//     (cluster_serviceentry.go): passthrough services are ORIGINAL_DST on sidecars;
//   - the DestinationRule's traffic policy for the port and subset;
//   - a sidecar's cluster of a sniffed port (no protocol Istio knows)
//     speaks HTTP upstream as the request came in, HTTP/1.1 or HTTP/2
//     (Istio's setUseDownstreamProtocol; not on gateways, which do not
//     sniff);
//   - TLS: the rule's, else Istio's auto mTLS. ISTIO_MUTUAL, set or
//     automatic, verifies that the server presents the SPIFFE ID of one of
//     the service's accounts (of its endpoints), unless the rule lists
//     subjectAltNames. Auto mTLS on an EDS cluster is a transport socket
//     match per endpoint (tlsMode label); an ORIGINAL_DST cluster has no
//     endpoints to match, so it is mTLS when every endpoint of the port is
//     in the mesh, plaintext otherwise. Mesh-external services get none.
//
// Only clusters that are EDS get a ClusterLoadAssignment, so the class's
// endpoints are exactly those its clusters reference (consistent()).

// outboundClusters generates the outbound clusters of svc, and the
// endpoints of those that take them over EDS, into u.
func (g *Generator) outboundClusters(sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, u *unit) {
	grpc := sc.Proxy.IsGRPC()
	if grpc && skipsGRPC(svc) {
		return
	}
	dr := sc.DestinationRule(svc.Hostname)
	g.warnRules(sc, svc.Hostname)
	ids := g.serviceIdentities(sc.w, svc, eps)
	for _, port := range svc.Ports {
		if port.Protocol == model.ProtocolUDP {
			continue
		}
		for _, ss := range sc.subsets(svc.Hostname) {
			name := ClusterName(port.Port, ss.Name, svc.Hostname)
			c := g.outboundCluster(sc, svc, eps, dr, port, ss, ids)
			g.addTo(sc, &u.clusters, name, ClusterType, c)
			if c.GetType() == clusterv3.Cluster_EDS {
				if !u.localEndpoints {
					g.addTo(sc, &u.endpoints, name, EndpointType, sc.clusterEndpoints(svc, name, port, eps, ss))
				}
				u.edsRefs = append(u.edsRefs, name)
			}
		}
	}
}

// outboundCluster builds the cluster of one port and subset of svc for
// the class of sc; dr is the DestinationRule the class sees for svc (or
// nil) and ids the service's identities.
func (g *Generator) outboundCluster(sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, dr *networkingv1.DestinationRule,
	port model.Port, ss Subset, ids []string,
) *clusterv3.Cluster {
	name := ClusterName(port.Port, ss.Name, svc.Hostname)
	grpc := sc.Proxy.IsGRPC()
	var c *clusterv3.Cluster
	if originalDst(sc.Proxy, svc) {
		c = originalDstCluster(name, port.Protocol)
	} else {
		c = serviceCluster(svc, name, port, eps, ss.Labels, !grpc)
		dnsRefresh(c, sc.w)
	}
	c.ConnectTimeout = connectTimeout(sc.w)
	if !grpc {
		envoyClusterDefaults(c)
	}
	if downstreamProtocol(sc.Proxy, port) {
		useDownstreamProtocol(c)
	}
	var tp *networking.TrafficPolicy
	if dr != nil {
		tp = policy(&dr.Spec, ss.Name, port.Port)
	}
	// Before the traffic policy, whose HTTP options keep the protocol.
	if !grpc && shouldH2Upgrade(port, sc.w.Mesh().H2Upgrade(), tp.GetConnectionPool()) {
		upgradeToH2(c)
	}
	applyTraffic(c, tp)
	if !grpc {
		applyLocalityCluster(c, sc.w.Mesh().LocalityLB(), tp, sc.w.TrafficDistribution(svc))
	}
	if grpc {
		if dr != nil {
			g.grpcClusterTLS(sc, svc, eps, c, tp)
		}
		return c
	}
	// Auto mTLS sends plaintext to a namespace whose mesh or namespace
	// PeerAuthentication is DISABLE, as istiod does.
	auto := sc.w.Mesh().AutoMTLS() && (tp.GetTls() != nil || namespaceMTLS(sc.w, svc.Namespace) != MTLSDisable)
	envoyClusterTLS(c, tp.GetTls(), svc, eps, port, ids, auto, backendCA(dr, port.Port))
	clusterTelemetry(c, svc, ss.Name)
	return c
}

// envoyClusterTLS sets the TLS an Envoy cluster of svc originates: tls, the
// DestinationRule's for the cluster (nil for none), else auto mTLS unless
// the MeshConfig turns it off (enableAutoMtls false: plaintext, as in
// Istio).
func envoyClusterTLS(c *clusterv3.Cluster, tls *networking.ClientTLSSettings, svc *model.Service, eps *model.ServiceEndpoints, port model.Port, ids []string, auto bool, ca []byte) {
	switch {
	case tls != nil:
		// The rule's, DISABLE included: no auto mTLS then, as in Istio.
		c.TransportSocket = upstreamTLSWithCA(tls, c, ids, ca)
	case !auto:
	case svc.Entry != nil && svc.Entry.External:
		// Istio infers no mTLS mode for mesh-external services.
	case c.GetType() == clusterv3.Cluster_ORIGINAL_DST:
		if allInMesh(eps, port) {
			c.TransportSocket = upstreamTLS(istioMutual, c, ids)
		}
	default:
		autoMTLSWith(c, ids)
	}
}

var istioMutual = &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}

// allInMesh reports whether svc has endpoints serving port and every one
// of them runs Istio's sidecar: Istio's inference for passthrough
// services, where one endpoint without (label security.istio.io/tlsMode
// missing or "disabled") makes the whole port plaintext.
func allInMesh(eps *model.ServiceEndpoints, port model.Port) bool {
	if eps == nil {
		return false
	}
	n := 0
	for _, ep := range eps.Endpoints {
		if _, ok := endpointPort(ep, port); !ok {
			continue
		}
		if mode, ok := ep.Labels[TLSModeLabel]; !ok || mode == "disabled" {
			return false
		}
		n++
	}
	return n > 0
}

// downstreamProtocol reports whether p's clusters of port use the
// downstream HTTP protocol: a sidecar's, for a sniffed port.
func downstreamProtocol(p *model.Proxy, port model.Port) bool {
	return sniffed(p, port.Protocol)
}

// sniffsAny reports whether p's clusters of svc use the downstream
// protocol on some port (partKey).
func sniffsAny(p *model.Proxy, svc *model.Service) bool {
	for _, port := range svc.Ports {
		if downstreamProtocol(p, port) {
			return true
		}
	}
	return false
}

// shouldH2Upgrade is Istio's rule for upgrading a cluster's HTTP/1.1 to
// HTTP/2: the DestinationRule's connectionPool.http decides when it says
// UPGRADE or DO_NOT_UPGRADE (useClientProtocol: never), else the
// MeshConfig's h2UpgradePolicy, for HTTP ports only (a sniffed port keeps
// the protocol the client spoke).
func shouldH2Upgrade(port model.Port, meshUpgrade bool, cp *networking.ConnectionPoolSettings) bool {
	if h := cp.GetHttp(); h != nil {
		if h.GetUseClientProtocol() {
			return false
		}
		switch h.GetH2UpgradePolicy() {
		case networking.ConnectionPoolSettings_HTTPSettings_UPGRADE:
			return true
		case networking.ConnectionPoolSettings_HTTPSettings_DO_NOT_UPGRADE:
			return false
		}
	}
	return port.Protocol.IsHTTP() && meshUpgrade
}

// upgradeToH2 makes c speak HTTP/2 upstream, unless it already chose its
// upstream protocol (HTTP/2 ports, the downstream protocol of a sniffed
// port), as Istio's setH2Options does.
func upgradeToH2(c *clusterv3.Cluster) {
	if _, ok := c.TypedExtensionProtocolOptions[httpOptionsKey]; ok {
		return
	}
	if c.TypedExtensionProtocolOptions == nil {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{}
	}
	c.TypedExtensionProtocolOptions[httpOptionsKey] = mustAny(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
			},
		},
	})
}

// useDownstreamProtocol makes c speak upstream the HTTP version the
// request came in with; connection pool settings applied after keep it
// (setCommonHTTPOptions).
func useDownstreamProtocol(c *clusterv3.Cluster) {
	opts := &httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
			},
		},
	}
	if c.TypedExtensionProtocolOptions == nil {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{}
	}
	c.TypedExtensionProtocolOptions[httpOptionsKey] = mustAny(opts)
}
