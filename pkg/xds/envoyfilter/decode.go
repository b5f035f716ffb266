package envoyfilter

import (
	"fmt"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	_ "github.com/meshplane/discovery/internal/envoytypes" // the Envoy types istiod resolves typed_config with
)

// newTarget is a new message of the Envoy type applyTo patches.
func newTarget(applyTo networking.EnvoyFilter_ApplyTo) proto.Message {
	switch applyTo {
	case networking.EnvoyFilter_CLUSTER:
		return &cluster.Cluster{}
	case networking.EnvoyFilter_LISTENER:
		return &listener.Listener{}
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		return &route.RouteConfiguration{}
	case networking.EnvoyFilter_FILTER_CHAIN:
		return &listener.FilterChain{}
	case networking.EnvoyFilter_HTTP_FILTER:
		return &hcm.HttpFilter{}
	case networking.EnvoyFilter_NETWORK_FILTER:
		return &listener.Filter{}
	case networking.EnvoyFilter_VIRTUAL_HOST:
		return &route.VirtualHost{}
	case networking.EnvoyFilter_HTTP_ROUTE:
		return &route.Route{}
	case networking.EnvoyFilter_EXTENSION_CONFIG:
		return &core.TypedExtensionConfig{}
	case networking.EnvoyFilter_BOOTSTRAP:
		return &bootstrap.Bootstrap{}
	case networking.EnvoyFilter_LISTENER_FILTER:
		return &listener.ListenerFilter{}
	}
	return nil
}

// DecodePatch decodes an EnvoyFilter patch value as the Envoy type applyTo
// names, as istiod's xds.BuildXDSObjectFromStruct does: the value is the
// JSON form of the Envoy proto, a typed_config carrying its @type. strict
// refuses unknown fields; generation decodes leniently, as istiod does, so
// that a filter written for another Envoy version still applies.
func DecodePatch(applyTo networking.EnvoyFilter_ApplyTo, value *structpb.Struct, strict bool) (proto.Message, error) {
	obj := newTarget(applyTo)
	if obj == nil {
		return nil, fmt.Errorf("Envoy filter: unknown object type for applyTo %s", applyTo) //nolint:staticcheck // Istio's message
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("Envoy filter: %w", err) //nolint:staticcheck // Istio's message
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: !strict}).Unmarshal(js, obj); err != nil {
		return nil, fmt.Errorf("Envoy filter: %w", err) //nolint:staticcheck // Istio's message
	}
	return obj, nil
}
