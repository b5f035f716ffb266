package gen

import (
	"net"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/meshplane/discovery/pkg/model"
)

// GRPCServerListenerPrefix begins the name of the Listener an xDS-enabled
// grpc-go server asks for: the bootstrap Istio's agent writes sets
// server_listener_resource_name_template to
// "xds.istio.io/grpc/lds/inbound/%s" and grpc-go puts the server's
// listening address (HOST:PORT) in place of %s.
const GRPCServerListenerPrefix = "xds.istio.io/grpc/lds/inbound/"

// GRPCServerListenerName is the listener a gRPC server listening on
// host:port fetches.
func GRPCServerListenerName(host string, port int32) string {
	return GRPCServerListenerPrefix + net.JoinHostPort(host, itoa(port))
}

// grpcServerListeners are the server-side listeners of a proxyless gRPC
// workload: one per inbound port and address it may listen on (each of its
// IPs and the wildcard addresses), grpc-go checks that the listener's
// address is its own. Each has one filter chain without match criteria
// (grpc-go drops chains that match on destination port) whose
// HttpConnectionManager runs the workload's RBAC filters and then routes
// every request to the server itself (a non-forwarding route). A port
// served STRICT has the chain require mTLS (grpc_security.go).
func grpcServerListeners(p *model.Proxy, ports []InboundPort, authz inboundAuthz, mtls inboundMTLS) []*listenerv3.Listener {
	hosts := append(append([]string{}, p.IPs...), "0.0.0.0", "::")
	var out []*listenerv3.Listener
	for _, port := range ports {
		name := InboundClusterName(port.Port)
		rc := &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name: "inbound|grpc|" + itoa(port.Port), Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}
		m := inlineManager(name, rc)
		m.HttpFilters = append(append([]*hcmv3.HttpFilter{}, authz.http...), m.HttpFilters...)
		chain := &listenerv3.FilterChain{Name: name, Filters: []*listenerv3.Filter{hcmFilter(m)}}
		if grpcServerMode(p, mtls, port.Port) == MTLSStrict {
			chain.TransportSocket = grpcDownstreamMTLS()
		}
		for _, h := range hosts {
			out = append(out, &listenerv3.Listener{
				Name:         GRPCServerListenerName(h, port.Port),
				Address:      socketAddress(h, port.Port),
				FilterChains: []*listenerv3.FilterChain{chain},
			})
		}
	}
	return out
}

// grpcServer adds a proxyless gRPC workload's server-side listeners to pc.
func (g *Generator) grpcServer(w *view, p *model.Proxy, pc *ProxyConfig) *ProxyConfig {
	pc.InboundPorts = inboundPorts(w, p)
	if len(pc.InboundPorts) == 0 {
		return pc
	}
	mtls := g.peerAuthentication(w, p)
	g.warnGRPCPermissive(w, p, pc.InboundPorts, mtls)
	listeners := newBuilder(ListenerType)
	for _, l := range grpcServerListeners(p, pc.InboundPorts, g.authorization(w, p), mtls) {
		listeners.add(l.Name, l)
	}
	for _, err := range listeners.errs {
		g.report(pc.Class.Scope(), p.ID, err)
	}
	pc.Own[ListenerType] = listeners.set()
	return pc
}
