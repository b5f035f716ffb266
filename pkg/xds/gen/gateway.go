package gen

import (
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// gatewayServer is one plain HTTP server of a Gateway selected by the proxy.
type gatewayServer struct {
	gateway string // namespace/name
	ns      string
	hosts   []string // namespace/host or host, as written
	// redirect is tls.httpsRedirect: plain HTTP is redirected to https.
	redirect bool
}

// gateway adds a router's listeners (one per Gateway server port, named
// 0.0.0.0_PORT and bound) and their RouteConfigurations (http.PORT), with a
// virtual host per service host of the VirtualServices bound to the
// Gateway; it returns the route names the listeners use.
func (g *Generator) gateway(sc *Scope, bs map[string]*builder) []string {
	byPort := map[uint32][]gatewayServer{}
	tlsByPort := map[uint32][]*tlsServer{}
	passByPort := map[uint32][]gatewayServer{}
	for _, c := range sc.World.Configs(model.KindGateway) {
		gw, ok := c.Object.(*networkingv1.Gateway)
		if !ok || len(gw.Spec.GetSelector()) == 0 || !matchLabels(gw.Spec.GetSelector(), sc.Proxy.Labels()) {
			continue
		}
		g.warnGateway(c)
		for i, s := range gw.Spec.GetServers() {
			proto := strings.ToUpper(s.GetPort().GetProtocol())
			if (proto == "TLS" || proto == "HTTPS") && s.GetTls().GetMode() == networking.ServerTLSSettings_PASSTHROUGH {
				passByPort[s.GetPort().GetNumber()] = append(passByPort[s.GetPort().GetNumber()], gatewayServer{
					gateway: c.Key.Namespace + "/" + c.Key.Name, ns: c.Key.Namespace, hosts: s.GetHosts(),
				})
				continue
			}
			if proto == "HTTPS" {
				if ts, ok := gatewayTLSServer(c, i, s, g.credentials()); ok {
					tlsByPort[ts.port] = append(tlsByPort[ts.port], ts)
					continue
				}
			}
			if proto != "HTTP" && proto != "HTTP2" && proto != "GRPC" {
				g.log.Warn("gateway server not supported yet", "gateway", c.Key.String(), "protocol", proto, "tlsMode", s.GetTls().GetMode().String())
				continue
			}
			byPort[s.GetPort().GetNumber()] = append(byPort[s.GetPort().GetNumber()], gatewayServer{
				gateway: c.Key.Namespace + "/" + c.Key.Name, ns: c.Key.Namespace, hosts: s.GetHosts(),
				redirect: s.GetTls().GetHttpsRedirect(),
			})
		}
	}
	ports := make([]uint32, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	var refs []string
	for _, port := range ports {
		name := "http." + itoa(int32(port))
		rc := &routev3.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false)}
		rc.VirtualHosts = g.gatewayHosts(sc, byPort[port])
		requireTLS(rc.VirtualHosts, byPort[port])
		bs[RouteType].add(name, rc)
		l := &listenerv3.Listener{
			Name:             "0.0.0.0_" + itoa(int32(port)),
			Address:          socketAddress("0.0.0.0", int32(port)),
			TrafficDirection: corev3.TrafficDirection_OUTBOUND,
			FilterChains: []*listenerv3.FilterChain{{
				Filters: []*listenerv3.Filter{hcmFilter(rdsManager(name, name))},
			}},
		}
		bs[ListenerType].add(l.Name, l)
		refs = append(refs, name)
	}
	return append(refs, g.gatewayTLS(sc, bs, tlsByPort, passByPort, byPort)...)
}

// gatewayTLS adds the listeners and routes of the HTTPS and PASSTHROUGH
// servers, which share a port's listener (SNI tells them apart); a port
// that also has plain HTTP servers keeps those.
func (g *Generator) gatewayTLS(sc *Scope, bs map[string]*builder, tlsByPort map[uint32][]*tlsServer, passByPort map[uint32][]gatewayServer, httpPorts map[uint32][]gatewayServer) []string {
	seen := map[uint32]bool{}
	var ports []uint32
	for _, m := range []map[uint32]int{lens(tlsByPort), lens(passByPort)} {
		for p := range m {
			if !seen[p] {
				seen[p] = true
				ports = append(ports, p)
			}
		}
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	var refs []string
	for _, port := range ports {
		if len(httpPorts[port]) > 0 {
			g.log.Warn("gateway port has both HTTP and TLS servers; TLS left out", "port", port)
			continue
		}
		for _, s := range tlsByPort[port] {
			rc := &routev3.RouteConfiguration{Name: s.name, ValidateClusters: wrapperspb.Bool(false)}
			rc.VirtualHosts = g.gatewayHosts(sc, []gatewayServer{s.gatewayServer})
			bs[RouteType].add(s.name, rc)
			refs = append(refs, s.name)
		}
		l := tlsListener(port, tlsByPort[port])
		claims := chainClaims{}
		for _, fc := range l.FilterChains {
			claims.claim(fc.GetFilterChainMatch())
		}
		l.FilterChains = append(l.FilterChains, g.passthroughChains(sc, port, passByPort[port], claims)...)
		if len(l.FilterChains) == 0 {
			g.log.Warn("gateway TLS port has no filter chain (no VirtualService tls route matches its servers); no listener", "port", port)
			continue
		}
		bs[ListenerType].add(l.Name, l)
	}
	return refs
}

func lens[V any](m map[uint32][]V) map[uint32]int {
	out := make(map[uint32]int, len(m))
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// gatewayHosts builds one virtual host per host a bound VirtualService
// names, routed by that VirtualService.
func (g *Generator) gatewayHosts(sc *Scope, servers []gatewayServer) []*routev3.VirtualHost {
	seen := map[string]bool{}
	var out []*routev3.VirtualHost
	for _, srv := range servers {
		for _, c := range sc.World.Configs(model.KindVirtualService) {
			vs := c.Object.(*networkingv1.VirtualService)
			if !appliesTo(c, srv.gateway) {
				continue
			}
			for _, h := range vs.Spec.GetHosts() {
				if seen[h] || !hostAllowed(srv, c.Key.Namespace, h) {
					continue
				}
				seen[h] = true
				routes := g.vsRoutes(sc, []*model.Config{c}, ResolveHost(h, c.Key.Namespace, sc.World.DomainSuffix), 80, srv.gateway)
				if len(routes) == 0 {
					continue
				}
				out = append(out, &routev3.VirtualHost{Name: h, Domains: []string{h, h + ":*"}, Routes: routes})
			}
		}
	}
	if len(out) == 0 {
		out = []*routev3.VirtualHost{{
			Name: "blackhole", Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404}},
			}},
		}}
	}
	return out
}

// hostAllowed applies a Gateway server's hosts (ns/host, */host, host, with
// * and *.suffix wildcards) to a VirtualService host of namespace vsNS.
func hostAllowed(srv gatewayServer, vsNS, host string) bool {
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
		if name == "*" || name == host || (strings.HasPrefix(name, "*.") && strings.HasSuffix(host, name[1:])) {
			return true
		}
	}
	return false
}
