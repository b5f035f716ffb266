package gen

import (
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshplane/discovery/pkg/model"
)

// Names of the clusters every sidecar has.
const (
	BlackHoleCluster          = "BlackHoleCluster"
	PassthroughCluster        = "PassthroughCluster"
	InboundPassthroughCluster = "InboundPassthroughCluster"
)

// Subset is one DestinationRule subset of a service.
type Subset struct {
	Name   string
	Labels map[string]string
}

// subsets returns the DestinationRule subsets of host, with the unnamed
// default first.
func (sc *Scope) subsets(host string) []Subset {
	out := []Subset{{}}
	if dr := sc.DestinationRule(host); dr != nil {
		for _, s := range dr.Spec.GetSubsets() {
			if s.GetName() != "" {
				out = append(out, Subset{Name: s.GetName(), Labels: s.GetLabels()})
			}
		}
	}
	return out
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// edsCluster is an outbound cluster whose endpoints come over ADS, named and
// shaped so that grpc-go's xDS client accepts it as well as Envoy.
func edsCluster(name string, proto model.Protocol, envoy bool) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		ConnectTimeout:       durationpb.New(10 * time.Second),
	}
	if envoy && (proto == model.ProtocolHTTP2 || proto == model.ProtocolGRPC) {
		opts := mustAny(&httpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
				ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
						Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
					},
				},
			},
		})
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
	}
	return c
}

// fixedClusters are BlackHoleCluster, PassthroughCluster and
// InboundPassthroughCluster, as every sidecar has them, with the mesh's
// connect timeout.
func fixedClusters(timeout *durationpb.Duration) []*clusterv3.Cluster {
	origDst := func(name string) *clusterv3.Cluster {
		return &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
			LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
			ConnectTimeout:       timeout,
		}
	}
	passthrough := origDst(PassthroughCluster)
	setDefaultLimits(passthrough)
	passthroughHTTPOptions(passthrough)
	// Istio's metadata exchange on the passthrough, for peers in the mesh
	// reached by address.
	passthrough.Filters = []*clusterv3.Filter{tcpClusterMX}
	inbound := origDst(InboundPassthroughCluster)
	setDefaultLimits(inbound)
	passthroughHTTPOptions(inbound)
	// Istio sends inbound passthrough traffic from 127.0.0.6 so that the
	// application sees it as coming from outside the pod's own sidecar.
	inbound.UpstreamBindConfig = &corev3.BindConfig{SourceAddress: socketAddress("127.0.0.6", 0).GetSocketAddress()}
	return []*clusterv3.Cluster{
		{
			Name:                 BlackHoleCluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			ConnectTimeout:       timeout,
		},
		passthrough,
		inbound,
	}
}

// passthroughHTTPOptions are Istio's HTTP options of its passthrough
// clusters (passthroughHttpProtocolOptions): the downstream's HTTP version
// upstream, and idle connections closed after 5 minutes rather than
// Envoy's hour.
func passthroughHTTPOptions(c *clusterv3.Cluster) {
	useDownstreamProtocol(c)
	setCommonHTTPOptions(c, &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(5 * time.Minute)})
}

// inboundCluster sends traffic for a pod port to the application on
// 127.0.0.1: a Sidecar ingress listener's, and every port's with the
// MeshConfig's inboundTrafficPolicy LOCALHOST (inboundServiceCluster).
func inboundCluster(port int32) *clusterv3.Cluster {
	name := InboundClusterName(port)
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(10 * time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: socketAddress("127.0.0.1", port),
					}},
				}},
			}},
		},
	}
}

func socketAddress(ip string, port int32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
