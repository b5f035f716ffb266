package gen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshplane/discovery/pkg/model"
)

// Auto mTLS, as Istio does it: an endpoint whose pod carries the label
// security.istio.io/tlsMode=istio (set by sidecar injection) is marked in
// its metadata, and an outbound cluster without DestinationRule TLS picks
// ISTIO_MUTUAL for marked endpoints and plaintext for the others.
const (
	TLSModeLabel = "security.istio.io/tlsMode"
	// TransportSocketMatchKey is the endpoint metadata filter Envoy reads
	// transport_socket_matches against.
	TransportSocketMatchKey = "envoy.transport_socket_match"
)

// tlsModeMetadata is the metadata of an endpoint in the mesh (nil for
// others), for the cluster's transport_socket_matches.
func tlsModeMetadata(ep *model.Endpoint) *corev3.Metadata {
	mode := ep.Labels[TLSModeLabel]
	if mode == "" {
		return nil
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		TransportSocketMatchKey: {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(mode)}},
	}}
}

// autoMTLSWith gives an Envoy cluster that has no TLS of its own Istio's
// two transport socket matches: ISTIO_MUTUAL for endpoints marked tlsMode
// istio, verifying that the server is one of identities (the service's
// accounts; none: any workload of the mesh), plaintext for the rest. A
// cluster with a transport socket (its DestinationRule's TLS) keeps it.
func autoMTLSWith(c *clusterv3.Cluster, identities []string) {
	if c.TransportSocket != nil || len(c.TransportSocketMatches) > 0 {
		return
	}
	mutual := upstreamTLS(istioMutual, c, identities)
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{
		{
			Name:            "tlsMode-istio",
			Match:           &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue("istio")}},
			TransportSocket: mutual,
		},
		{
			Name:  "tlsMode-disabled",
			Match: &structpb.Struct{},
			TransportSocket: &corev3.TransportSocket{
				Name:       "envoy.transport_sockets.raw_buffer",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&rawbufferv3.RawBuffer{})},
			},
		},
	}
}
