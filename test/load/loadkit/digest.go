package loadkit

import (
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// A digest is what a proxy keeps of one resource: its name, what it
// refers to (a cluster's ClusterLoadAssignment, a listener's route
// configurations over RDS), and what changes are timed by and Verify
// checks (a ClusterLoadAssignment's endpoint addresses, the edit-N routes
// of a RouteConfiguration).
//
// A full decode (decode, then digestOf) takes it from the decoded and
// validated resource, as Envoy would see it. The light client mode
// (FleetOptions.Decode = "light") reads it from the wire without
// unmarshaling anything else (scan): the proxies still receive, track
// versions, subscribe and ACK exactly as Envoy would, but stop checking
// the rest of each resource, so that the fleet's CPU is no longer what
// limits a measurement of the server. "both" does both and NACKs any
// disagreement, which is how the tests hold scan to the full decode.
type digest struct {
	name   string
	eds    string   // a cluster's ClusterLoadAssignment; "" for clusters of other types
	routes []string // a listener's route configurations over RDS
	addrs  []string // a ClusterLoadAssignment's endpoint addresses
	edit   uint64   // a RouteConfiguration's highest N of the routes named edit-N, plus one; 0 when none
}

// digestOf is the digest of a decoded resource; routes are the route
// names decode returned for a listener.
func digestOf(m proto.Message, routes []string) digest {
	switch r := m.(type) {
	case *clusterv3.Cluster:
		return digest{name: r.GetName(), eds: edsName(r)}
	case *listenerv3.Listener:
		return digest{name: r.GetName(), routes: routes}
	case *endpointv3.ClusterLoadAssignment:
		d := digest{name: r.GetClusterName()}
		for _, l := range r.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				d.addrs = append(d.addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		return d
	case *routev3.RouteConfiguration:
		d := digest{name: r.GetName()}
		for _, vh := range r.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				if n, ok := editNumber(rt.GetName()); ok {
					d.edit = max(d.edit, uint64(n)+1)
				}
			}
		}
		return d
	}
	return digest{}
}

// equal compares two digests (addresses as sets, as fingerprint does).
func (d digest) equal(o digest) bool {
	return d.name == o.name && d.eds == o.eds && slices.Equal(d.routes, o.routes) &&
		addressHash(d.addrs) == addressHash(o.addrs) && len(d.addrs) == len(o.addrs) && d.edit == o.edit
}

// String shows a digest with its lists cut short.
func (d digest) String() string {
	short := func(s []string) string {
		if len(s) > 3 {
			return fmt.Sprintf("%q and %d more", s[:3], len(s)-3)
		}
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("{name %q eds %q routes %s addrs %s edit %d}", d.name, d.eds, short(d.routes), short(d.addrs), d.edit)
}

// The field numbers scan reads, taken from the generated descriptors so
// that they cannot drift from go-control-plane's protos.
var wire = struct {
	clusterName, clusterType, clusterEDS, edsServiceName                protowire.Number
	listenerName, listenerChains, listenerDefault, chainFilters         protowire.Number
	filterTypedConfig, anyTypeURL, anyValue, hcmRDS, rdsRouteName       protowire.Number
	claName, claEndpoints, localityLB, lbEndpoint, endpointAddress      protowire.Number
	addressSocket, socketAddress, routesName, routesVHosts, vhostRoutes protowire.Number
	routeName                                                           protowire.Number
	edsType                                                             uint64
}{
	clusterName: field(&clusterv3.Cluster{}, "name"), clusterType: field(&clusterv3.Cluster{}, "type"),
	clusterEDS: field(&clusterv3.Cluster{}, "eds_cluster_config"), edsServiceName: field(&clusterv3.Cluster_EdsClusterConfig{}, "service_name"),
	listenerName: field(&listenerv3.Listener{}, "name"), listenerChains: field(&listenerv3.Listener{}, "filter_chains"),
	listenerDefault: field(&listenerv3.Listener{}, "default_filter_chain"), chainFilters: field(&listenerv3.FilterChain{}, "filters"),
	filterTypedConfig: field(&listenerv3.Filter{}, "typed_config"),
	anyTypeURL:        field(&anypb.Any{}, "type_url"), anyValue: field(&anypb.Any{}, "value"),
	hcmRDS: field(&hcmv3.HttpConnectionManager{}, "rds"), rdsRouteName: field(&hcmv3.Rds{}, "route_config_name"),
	claName: field(&endpointv3.ClusterLoadAssignment{}, "cluster_name"), claEndpoints: field(&endpointv3.ClusterLoadAssignment{}, "endpoints"),
	localityLB: field(&endpointv3.LocalityLbEndpoints{}, "lb_endpoints"), lbEndpoint: field(&endpointv3.LbEndpoint{}, "endpoint"),
	endpointAddress: field(&endpointv3.Endpoint{}, "address"), addressSocket: field(&corev3.Address{}, "socket_address"),
	socketAddress: field(&corev3.SocketAddress{}, "address"),
	routesName:    field(&routev3.RouteConfiguration{}, "name"), routesVHosts: field(&routev3.RouteConfiguration{}, "virtual_hosts"),
	vhostRoutes: field(&routev3.VirtualHost{}, "routes"), routeName: field(&routev3.Route{}, "name"),
	edsType: uint64(clusterv3.Cluster_EDS),
}

func field(m proto.Message, name string) protowire.Number {
	f := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("%s has no field %s", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return f.Number()
}

var errWire = errors.New("malformed protobuf")

// fields calls onBytes for each length-delimited field of a message's
// encoding (strings, bytes, messages) and onVarint, unless nil, for each
// varint; a field of another wire type than its number's (which
// proto.Unmarshal keeps as unknown) goes to neither.
func fields(b []byte, onBytes func(n protowire.Number, bytes []byte), onVarint func(n protowire.Number, varint uint64)) error {
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errWire
		}
		b = b[l:]
		switch t {
		case protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errWire
			}
			onBytes(n, v)
			b = b[l:]
		case protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errWire
			}
			if onVarint != nil {
				onVarint(n, v)
			}
			b = b[l:]
		default:
			l := protowire.ConsumeFieldValue(n, t, b)
			if l < 0 {
				return errWire
			}
			b = b[l:]
		}
	}
	return nil
}

// scan reads a resource's digest from its encoding. Like Go's own
// unmarshaling it takes the last occurrence of a singular field; it does
// not merge a message field that occurs more than once (no marshaler
// writes one so).
func scan(typeURL string, b []byte) (digest, error) {
	w := &walker{}
	var d digest
	switch typeURL {
	case typeCDS:
		d = w.cluster(b)
	case typeLDS:
		d = w.listener(b)
	case typeEDS:
		d = w.endpoints(b)
	case typeRDS:
		d = w.routes(b)
	default:
		return digest{}, fmt.Errorf("unexpected type %s", typeURL)
	}
	if w.err != nil {
		return digest{}, fmt.Errorf("%s: %w", shortType(typeURL), w.err)
	}
	return d, nil
}

// walker reads fields out of an encoding and keeps the first error.
type walker struct{ err error }

func (w *walker) note(err error) {
	if w.err == nil {
		w.err = err
	}
}

// each calls fn with each occurrence of the length-delimited field n.
func (w *walker) each(b []byte, n protowire.Number, fn func([]byte)) {
	w.note(fields(b, func(m protowire.Number, v []byte) {
		if m == n {
			fn(v)
		}
	}, nil))
}

// last is the field at path (a field of a field ...): the last
// occurrence at each step; nil when one is missing.
func (w *walker) last(b []byte, path ...protowire.Number) []byte {
	for _, n := range path {
		var found []byte
		w.each(b, n, func(v []byte) { found = v })
		if found == nil {
			return nil
		}
		b = found
	}
	return b
}

func (w *walker) cluster(b []byte) digest {
	var d digest
	var typ uint64
	var eds []byte
	w.note(fields(b, func(n protowire.Number, v []byte) {
		switch n {
		case wire.clusterName:
			d.name = string(v)
		case wire.clusterEDS:
			eds = v
		}
	}, func(n protowire.Number, x uint64) {
		if n == wire.clusterType {
			typ = x
		}
	}))
	if typ == wire.edsType {
		if d.eds = string(w.last(eds, wire.edsServiceName)); d.eds == "" {
			d.eds = d.name
		}
	}
	return d
}

// listener reads the name and the RDS route names of the connection
// managers of its filter chains, the default chain last.
func (w *walker) listener(b []byte) digest {
	var d digest
	var chains [][]byte
	var fallback []byte
	w.note(fields(b, func(n protowire.Number, v []byte) {
		switch n {
		case wire.listenerName:
			d.name = string(v)
		case wire.listenerChains:
			chains = append(chains, v)
		case wire.listenerDefault:
			fallback = v
		}
	}, nil))
	if fallback != nil {
		chains = append(chains, fallback)
	}
	for _, c := range chains {
		w.each(c, wire.chainFilters, func(f []byte) {
			a := w.last(f, wire.filterTypedConfig)
			if a == nil || string(w.last(a, wire.anyTypeURL)) != hcmType {
				return
			}
			if r := w.last(w.last(a, wire.anyValue), wire.hcmRDS, wire.rdsRouteName); len(r) > 0 {
				d.routes = append(d.routes, string(r))
			}
		})
	}
	return d
}

// endpoints reads the name and the address of every LbEndpoint ("" for
// one without a socket address).
func (w *walker) endpoints(b []byte) digest {
	d := digest{name: string(w.last(b, wire.claName))}
	w.each(b, wire.claEndpoints, func(l []byte) {
		w.each(l, wire.localityLB, func(e []byte) {
			d.addrs = append(d.addrs, string(w.last(e, wire.lbEndpoint, wire.endpointAddress, wire.addressSocket, wire.socketAddress)))
		})
	})
	return d
}

// routes reads the name and the highest edit-N route name.
func (w *walker) routes(b []byte) digest {
	d := digest{name: string(w.last(b, wire.routesName))}
	w.each(b, wire.routesVHosts, func(vh []byte) {
		w.each(vh, wire.vhostRoutes, func(r []byte) {
			if e, ok := editNumber(string(w.last(r, wire.routeName))); ok {
				d.edit = max(d.edit, uint64(e)+1)
			}
		})
	})
	return d
}
