package main

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// Extensions the server's configuration may carry: registered so their
	// typed configs decode, as they would in Envoy.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// The xDS types a sidecar asks for, in Envoy's order.
var (
	typeCDS = resourcev3.ClusterType
	typeEDS = resourcev3.EndpointType
	typeLDS = resourcev3.ListenerType
	typeRDS = resourcev3.RouteType
)

func shortType(t string) string {
	switch t {
	case typeCDS:
		return "cds"
	case typeEDS:
		return "eds"
	case typeLDS:
		return "lds"
	case typeRDS:
		return "rds"
	}
	return t
}

type validator interface{ Validate() error }

// decode unmarshals one resource as Envoy would: the resource itself, its
// field constraints, and every typed config (Any) inside it. An error is
// what Envoy would NACK.
func decode(typeURL string, value []byte) (proto.Message, error) {
	var m proto.Message
	switch typeURL {
	case typeCDS:
		m = &clusterv3.Cluster{}
	case typeEDS:
		m = &endpointv3.ClusterLoadAssignment{}
	case typeLDS:
		m = &listenerv3.Listener{}
	case typeRDS:
		m = &routev3.RouteConfiguration{}
	default:
		return nil, fmt.Errorf("unexpected type %s", typeURL)
	}
	if err := proto.Unmarshal(value, m); err != nil {
		return nil, fmt.Errorf("unmarshal %s: %w", shortType(typeURL), err)
	}
	if err := m.(validator).Validate(); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", shortType(typeURL), err)
	}
	if typeURL != typeEDS { // endpoints carry no typed configs
		if err := decodeAnys(m.ProtoReflect()); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var anyName = (&anypb.Any{}).ProtoReflect().Descriptor().FullName()

// decodeAnys unmarshals and validates every Any under m, recursively.
func decodeAnys(m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = decodeMessage(l.Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					err = decodeMessage(mv.Message())
					return err == nil
				})
			}
		default:
			err = decodeMessage(v.Message())
		}
		return err == nil
	})
	return err
}

func decodeMessage(m protoreflect.Message) error {
	if m.Descriptor().FullName() != anyName {
		return decodeAnys(m)
	}
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		return nil
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err)
	}
	if v, ok := inner.(validator); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err)
		}
	}
	return decodeAnys(inner.ProtoReflect())
}

// routeNames lists the RouteConfigurations a listener asks for over RDS.
func routeNames(l *listenerv3.Listener) []string {
	var out []string
	chains := l.GetFilterChains()
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(chains[:len(chains):len(chains)], d)
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			tc := f.GetTypedConfig()
			if tc == nil || tc.GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if err := tc.UnmarshalTo(&hcm); err != nil {
				continue // decode has already refused such a listener
			}
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				out = append(out, n)
			}
		}
	}
	return out
}

// edsName is the ClusterLoadAssignment an EDS cluster asks for; "" for
// clusters of other types.
func edsName(c *clusterv3.Cluster) string {
	if c.GetType() != clusterv3.Cluster_EDS {
		return ""
	}
	if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n
	}
	return c.GetName()
}

// hasAddress reports whether a ClusterLoadAssignment holds addr.
func hasAddress(m proto.Message, addr string) bool {
	cla, ok := m.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return false
	}
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			if e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() == addr {
				return true
			}
		}
	}
	return false
}

// hasEndpoints reports whether a ClusterLoadAssignment holds any endpoint.
func hasEndpoints(m proto.Message) bool {
	cla, ok := m.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return false
	}
	for _, l := range cla.GetEndpoints() {
		if len(l.GetLbEndpoints()) > 0 {
			return true
		}
	}
	return false
}

// hasRoute reports whether a RouteConfiguration holds a route named name.
func hasRoute(m proto.Message, name string) bool {
	rc, ok := m.(*routev3.RouteConfiguration)
	if !ok {
		return false
	}
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if r.GetName() == name {
				return true
			}
		}
	}
	return false
}
