package loadkit

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	// Extensions Istio's configuration uses, registered so that their typed
	// configs decode as they would in Envoy (an unknown one is NACKed).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/alternate_protocols_cache/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_stats/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_web/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/set_filter_state/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/set_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/stateful_session/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_src/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/connection_limit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/direct_response/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/set_filter_state/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/http_11_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/internal_upstream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tcp_stats/v3"
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

const hcmType = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// decode unmarshals one resource as Envoy would: the resource itself, its
// field constraints, and the typed configs (Any) Envoy unpacks: listener
// filters, network filters, HTTP filters, cluster transport sockets and
// protocol options, per-filter route configs. An error is what Envoy
// would NACK. For a listener it also returns the route names it asks for
// over RDS.
func decode(typeURL string, value []byte) (proto.Message, []string, error) {
	m := newResource(typeURL)
	if m == nil {
		return nil, nil, fmt.Errorf("unexpected type %s", typeURL)
	}
	if err := proto.Unmarshal(value, m); err != nil {
		return nil, nil, fmt.Errorf("unmarshal %s: %w", shortType(typeURL), err)
	}
	if err := m.(validator).Validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid %s: %w", shortType(typeURL), err)
	}
	var routes []string
	var err error
	switch r := m.(type) {
	case *clusterv3.Cluster:
		err = unpackCluster(r)
	case *listenerv3.Listener:
		routes, err = unpackListener(r)
	case *routev3.RouteConfiguration:
		err = unpackRoutes(r)
	}
	if err != nil {
		return nil, nil, err
	}
	return m, routes, nil
}

// newResource is an empty resource of a sidecar's type; nil for another.
func newResource(typeURL string) proto.Message {
	switch typeURL {
	case typeCDS:
		return &clusterv3.Cluster{}
	case typeEDS:
		return &endpointv3.ClusterLoadAssignment{}
	case typeLDS:
		return &listenerv3.Listener{}
	case typeRDS:
		return &routev3.RouteConfiguration{}
	}
	return nil
}

// unpack decodes and validates a typed config.
func unpack(a *anypb.Any) (proto.Message, error) {
	if a == nil {
		return nil, nil
	}
	m, err := a.UnmarshalNew()
	if errors.Is(err, protoregistry.NotFound) && strings.HasPrefix(string(a.MessageName()), "istio.") {
		return nil, nil // Istio's own Envoy extensions: known to Istio's Envoy, not to go-control-plane
	}
	if err != nil {
		return nil, fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err)
	}
	if v, ok := m.(validator); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err)
		}
	}
	return m, nil
}

func unpackAll(as map[string]*anypb.Any) error {
	for _, a := range as {
		if _, err := unpack(a); err != nil {
			return err
		}
	}
	return nil
}

func unpackCluster(c *clusterv3.Cluster) error {
	if _, err := unpack(c.GetTransportSocket().GetTypedConfig()); err != nil {
		return err
	}
	for _, m := range c.GetTransportSocketMatches() {
		if _, err := unpack(m.GetTransportSocket().GetTypedConfig()); err != nil {
			return err
		}
	}
	return unpackAll(c.GetTypedExtensionProtocolOptions())
}

// unpackListener decodes the listener's filters (and the HTTP filters of
// its connection managers) and returns the route names it uses.
func unpackListener(l *listenerv3.Listener) ([]string, error) {
	for _, f := range l.GetListenerFilters() {
		if _, err := unpack(f.GetTypedConfig()); err != nil {
			return nil, err
		}
	}
	chains := l.GetFilterChains()
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(chains[:len(chains):len(chains)], d)
	}
	var routes []string
	for _, fc := range chains {
		if _, err := unpack(fc.GetTransportSocket().GetTypedConfig()); err != nil {
			return nil, err
		}
		for _, f := range fc.GetFilters() {
			m, err := unpack(f.GetTypedConfig())
			if err != nil {
				return nil, err
			}
			hcm, ok := m.(*hcmv3.HttpConnectionManager)
			if !ok {
				continue
			}
			for _, hf := range hcm.GetHttpFilters() {
				if _, err := unpack(hf.GetTypedConfig()); err != nil {
					return nil, err
				}
			}
			if rc := hcm.GetRouteConfig(); rc != nil {
				if err := unpackRoutes(rc); err != nil {
					return nil, err
				}
			}
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				routes = append(routes, n)
			}
		}
	}
	return routes, nil
}

func unpackRoutes(rc *routev3.RouteConfiguration) error {
	if err := unpackAll(rc.GetTypedPerFilterConfig()); err != nil {
		return err
	}
	for _, vh := range rc.GetVirtualHosts() {
		if err := unpackAll(vh.GetTypedPerFilterConfig()); err != nil {
			return err
		}
		for _, r := range vh.GetRoutes() {
			if err := unpackAll(r.GetTypedPerFilterConfig()); err != nil {
				return err
			}
		}
	}
	return nil
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

// hasAddressFrom reports whether a ClusterLoadAssignment holds addr or a
// higher IPv4 address.
func hasAddressFrom(d *digest, addr string) bool {
	want, ok := ipv4(addr)
	if !ok {
		return false
	}
	for _, a := range d.addrs {
		if got, ok := ipv4(a); ok && got >= want {
			return true
		}
	}
	return false
}

// ipv4 parses a dotted IPv4 address as a number.
func ipv4(s string) (uint32, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return 0, false
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), true
}

// hasEndpoints reports whether a ClusterLoadAssignment holds any endpoint.
func hasEndpoints(d *digest) bool { return len(d.addrs) > 0 }

// hasEditFrom reports whether a RouteConfiguration holds a route named
// edit-N for N at least edit.
func hasEditFrom(d *digest, edit int) bool { return d.edit >= uint64(edit)+1 }

// fingerprint is what Verify compares of a resource: for a
// ClusterLoadAssignment a hash of its endpoint addresses (in any order),
// for a RouteConfiguration the highest N of the routes named edit-N (the
// VirtualService edits of the world) plus one, 0 when none; 0 otherwise.
func fingerprint(typeURL string, d *digest) uint64 {
	switch typeURL {
	case typeEDS:
		return addressHash(d.addrs)
	case typeRDS:
		return d.edit
	}
	return 0
}

// addressHash hashes a set of addresses, whatever their order; an empty
// set hashes to 0.
func addressHash(addrs []string) uint64 {
	s := slices.Clone(addrs)
	slices.Sort(s)
	s = slices.Compact(s)
	if len(s) == 0 {
		return 0
	}
	h := fnv.New64a()
	for _, a := range s {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	return h.Sum64() | 1
}

// editNumber parses a route name edit-N.
func editNumber(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "edit-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}
