package gen

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Gateway TCP servers, as Istio serves them: a server without tls (TCP,
// MONGO, REDIS, MYSQL) owns its port, whose listener 0.0.0.0_PORT has one
// filter chain matching everything; a TLS server terminated here gets a
// chain matched by SNI on its hosts (gateway_tls.go). Either way the chain's
// tcp_proxy is the first tcp route, of the VirtualServices bound to the
// server's Gateway and with a host the server's hosts allow, whose match
// holds for the server's port and Gateway: one cluster or weighted
// clusters; a destination without a port takes the service's only port,
// else the server's. A server no route matches gets no chain (logged).

// tcpPort adds the listener of a port served by one TCP server.
func (g *Generator) tcpPort(sc *Scope, bs map[string]*builder, port uint32, srv gatewayServer, az gatewayAuthz) {
	f := g.gatewayTCPFilter(sc, srv)
	if f == nil {
		g.log.Warn("gateway TCP server has no VirtualService tcp route; no listener", "gateway", srv.gateway, "port", port)
		return
	}
	l := &listenerv3.Listener{
		Name:             "0.0.0.0_" + itoa(int32(port)),
		Address:          socketAddress("0.0.0.0", int32(port)),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains:     []*listenerv3.FilterChain{{Name: srv.name, Filters: az.tcpChain(f)}},
	}
	bs[ListenerType].add(l.Name, az.tel.listener(l))
}

// terminatedTCPChains builds a chain per TLS server that terminates TLS
// and routes by tcp routes: SNI on its hosts, its TLS context, the
// gateway's RBAC, the tcp_proxy of its first matching tcp route.
func (g *Generator) terminatedTCPChains(sc *Scope, port uint32, servers []*tlsServer, claims chainClaims, az gatewayAuthz) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	for _, s := range servers {
		f := g.gatewayTCPFilter(sc, s.gatewayServer)
		if f == nil {
			g.log.Warn("gateway TLS server has no VirtualService tcp route; left out", "gateway", s.gateway, "port", port)
			continue
		}
		match := sniMatch(s.hosts)
		if !claims.claim(match) {
			continue
		}
		out = append(out, &listenerv3.FilterChain{
			Name: s.name, FilterChainMatch: match, Filters: az.tcpChain(f), TransportSocket: downstreamTLS(s.context),
		})
	}
	return out
}

// gatewayTCPFilter is the tcp_proxy of a TCP server: the first tcp route
// that holds for the server's port, or nil.
func (g *Generator) gatewayTCPFilter(sc *Scope, srv gatewayServer) *listenerv3.Filter {
	port := srv.port
	for _, c := range sc.w.ConfigsWhere(model.KindVirtualService, boundTo(srv.gateway)) {
		vs, ok := c.Object.(*networkingv1.VirtualService)
		if !ok || !hostsOverlap(srv, c.Key.Namespace, resolveHosts(sc, c.Key.Namespace, vs.Spec.GetHosts())) {
			continue
		}
		g.warn(c, vs.ResourceVersion, &vs.Spec, vsFields)
		for _, r := range vs.Spec.GetTcp() {
			if !gatewayTCPRouteHolds(r, c.Key.Namespace, port, srv.gateway, sc.Proxy) {
				continue
			}
			if f := tcpRouteFilter(sc, c.Key.Namespace, r.GetRoute(), "", int32(port)); f != nil {
				return f
			}
		}
	}
	return nil
}

// gatewayTCPRouteHolds applies a tcp route's matches (port, gateways,
// and the gateway pod's labels and namespace; destinationSubnets do not
// apply on a gateway) to a server of gateway proxy p: one holding match is
// enough, and a route without matches always holds.
func gatewayTCPRouteHolds(r *networking.TCPRoute, ns string, port uint32, gateway string, p *model.Proxy) bool {
	for _, m := range r.GetMatch() {
		if l4Holds(m, ns, int32(port), gateway) && sourceHolds(m.GetSourceLabels(), m.GetSourceNamespace(), p) {
			return true
		}
	}
	return len(r.GetMatch()) == 0
}

// hostsOverlap reports whether a server's hosts admit one of the hosts of a
// VirtualService of namespace vsNS. Opaque TCP has no host to route by,
// so, as in Istio, a wildcard on either side matches the other.
func hostsOverlap(srv gatewayServer, vsNS string, vsHosts []string) bool {
	for _, h := range srv.hosts {
		ns, name, ok := strings.Cut(h, "/")
		if !ok {
			ns, name = "*", h
		}
		if ns == "." {
			ns = srv.ns
		}
		if ns != "*" && ns != vsNS {
			continue
		}
		for _, vh := range vsHosts {
			if wildcardMatch(name, vh) || wildcardMatch(vh, name) {
				return true
			}
		}
	}
	return false
}

// resolveHosts turns the short names of a VirtualService's hosts into
// FQDNs, as Istio does before matching them to a server's hosts.
func resolveHosts(sc *Scope, ns string, hosts []string) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = ResolveHost(h, ns, sc.w.DomainSuffix)
	}
	return out
}

// wildcardMatch reports whether host is pattern or falls under it (* or
// *.suffix).
func wildcardMatch(pattern, host string) bool {
	return pattern == "*" || pattern == host || (strings.HasPrefix(pattern, "*.") && strings.HasSuffix(host, pattern[1:]))
}
