package gen

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// passthroughChains builds the filter chains of a Gateway port's
// PASSTHROUGH servers: one per tls route match of a VirtualService bound to
// the server, matched on the match's sniHosts that the server's hosts
// allow, with the gateway's network RBAC and a tcp_proxy to the route's
// destinations. The TLS session is not terminated. A destination without a port takes the service's only
// port, else the server's port. Matches claimed by an earlier chain (an
// HTTPS server or another route) are left out.
func (g *Generator) passthroughChains(sc *Scope, port uint32, servers []gatewayServer, claims chainClaims, az gatewayAuthz) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	for _, srv := range servers {
		for _, c := range sc.w.ConfigsWhere(model.KindVirtualService, boundTo(srv.gateway)) {
			vs, ok := c.Object.(*networkingv1.VirtualService)
			if !ok || !anyHostAllowed(srv, c.Key.Namespace, vs.Spec.GetHosts()) {
				continue
			}
			g.warn(c, vs.ResourceVersion, &vs.Spec, vsFields)
			for i, r := range vs.Spec.GetTls() {
				f := tcpRouteFilter(sc, c.Key.Namespace, r.GetRoute(), "", int32(srv.port))
				if f == nil {
					continue
				}
				for j, m := range r.GetMatch() {
					if !l4Holds(m, c.Key.Namespace, int32(srv.port), srv.gateway) ||
						!sourceHolds(m.GetSourceLabels(), m.GetSourceNamespace(), sc.Proxy) {
						continue
					}
					var names []string
					all := false
					for _, sni := range m.GetSniHosts() {
						if hostAllowed(srv, c.Key.Namespace, sni) {
							names = append(names, sni)
							all = all || sni == "*"
						}
					}
					match := &listenerv3.FilterChainMatch{ServerNames: sortedCopy(names)}
					if all {
						// sniHosts "*" matches every server name, as
						// istiod's filter chain without server_names
						// (Envoy has no "*" server name).
						match.ServerNames = nil
					}
					if len(names) == 0 || !claims.claim(match) {
						continue
					}
					out = append(out, &listenerv3.FilterChain{
						Name:             "passthrough." + itoa(int32(port)) + "." + c.Key.Namespace + "." + c.Key.Name + ".tls." + itoa(int32(i)) + "." + itoa(int32(j)),
						FilterChainMatch: match,
						Filters:          az.tcpChain(f),
					})
				}
			}
		}
	}
	return out
}

func anyHostAllowed(srv gatewayServer, ns string, hosts []string) bool {
	for _, h := range hosts {
		if hostAllowed(srv, ns, h) {
			return true
		}
	}
	return false
}
