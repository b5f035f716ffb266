package gen

import (
	"sort"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// gatewayServer is one server of a Gateway selected by the proxy.
type gatewayServer struct {
	gateway string // namespace/name
	ns      string
	hosts   []string // namespace/host or host, as written
	// redirect is tls.httpsRedirect: plain HTTP is redirected to https.
	redirect bool
	// name names a TCP server's filter chain.
	name string
	// port is the server's port number, which VirtualService matches and
	// destinations without a port read (Istio's server.Port.Number); the
	// listener's port may differ (gatewayPortTranslation).
	port uint32
	// tls: the server has TLS settings (istiod's IsTLS for its routes:
	// a redirect without a scheme keeps https).
	tls bool
}

// portServers are the servers one Gateway port serves; class is the
// port's portClass, set by its first server.
type portServers struct {
	class  string
	http   []gatewayServer
	https  []*tlsServer
	pass   []gatewayServer
	auto   []gatewayServer
	tcp    *gatewayServer
	tlsTCP []*tlsServer
}

// gateway adds a router's listeners (one per Gateway server port, named
// 0.0.0.0_PORT and bound) and their RouteConfigurations (http.PORT and
// https.PORT...), with a virtual host per service host of the
// VirtualServices bound to the Gateway; it returns the route names the
// listeners use. The AuthorizationPolicies that apply to the gateway are
// enforced on every chain but AUTO_PASSTHROUGH's (gateway_authz.go).
func (g *Generator) gateway(sc *Scope, bs map[string]*builder) []string {
	ports, byPort := g.gatewayServers(sc)
	if len(ports) == 0 {
		return nil
	}
	az := g.gatewayAuthorization(sc)
	var refs []string
	for _, port := range ports {
		ps := byPort[port]
		switch ps.class {
		case "http":
			refs = append(refs, g.httpPort(sc, bs, port, ps.http, az))
		case "tcp":
			g.tcpPort(sc, bs, port, *ps.tcp, az)
		case "tls":
			refs = append(refs, g.tlsPort(sc, bs, port, ps, az)...)
		}
	}
	return refs
}

// gatewayServers sorts the servers of the Gateways that select the proxy
// by port, ports ascending. A server whose port already serves another
// class, and a second TCP server on a port, are left out (logged), as
// Istio does when it merges Gateways; unsupported servers are reported by
// warnGateway.
func (g *Generator) gatewayServers(sc *Scope) ([]uint32, map[uint32]*portServers) {
	byPort := map[uint32]*portServers{}
	var ports []uint32
	listenPort := gatewayPortTranslation(sc.w, sc.Proxy)
	for _, c := range sc.w.ConfigsWhere(model.KindGateway, selectsGateway(sc.Proxy)) {
		gw := c.Object.(*networkingv1.Gateway)
		g.warnGateway(c)
		for i, s := range gw.Spec.GetServers() {
			kind, why := classifyServer(s)
			if kind == serverUnsupported {
				if why == "" {
					g.log.Warn("gateway server is invalid (no tls settings); left out", "gateway", c.Key.String(), "port", s.GetPort().GetNumber())
				}
				continue
			}
			srv := gatewayServer{
				gateway: c.Key.Namespace + "/" + c.Key.Name, ns: c.Key.Namespace, hosts: s.GetHosts(),
				redirect: kind == serverHTTP && s.GetTls().GetHttpsRedirect(), name: serverName("tcp", c, i, s),
				port: s.GetPort().GetNumber(), tls: s.GetTls() != nil,
			}
			var ts *tlsServer
			if kind == serverHTTPS || kind == serverTLSTCP {
				var ok bool
				if ts, ok = gatewayTLSServer(c, i, s, g.credentials); !ok {
					g.log.Warn("gateway TLS server has no usable certificate; left out", "gateway", c.Key.String(), "port", s.GetPort().GetNumber())
					continue
				}
			}
			port := listenPort(s.GetPort().GetNumber())
			ps := byPort[port]
			if ps == nil {
				ps = &portServers{class: kind.portClass()}
				byPort[port] = ps
				ports = append(ports, port)
			}
			if ps.class != kind.portClass() || (kind == serverTCP && ps.tcp != nil) {
				g.log.Warn("gateway server conflicts with an earlier server on its port; left out",
					"gateway", c.Key.String(), "port", port, "protocol", s.GetPort().GetProtocol(), "portCarries", ps.class)
				continue
			}
			ps.add(kind, srv, ts)
		}
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	return ports, byPort
}

// disablePortTranslation is the Service label with which a gateway
// Service opts out of the translation of gatewayPortTranslation (Istio's
// DisableGatewayPortTranslationLabel).
const disablePortTranslation = "experimental.istio.io/disable-gateway-port-translation"

// gatewayPortTranslation returns the port a gateway listens on for a
// Gateway server's port number, as Istio's resolvePorts does for Gateways
// that select their proxies by label: the targetPort of the first Service
// (by name) selecting the proxy that has a port of that number, so that a
// server on port 80 of a Service 80 -> 8080 gets the listener the Service
// sends its traffic to; the number itself when no Service has it. A named
// targetPort is looked up in the container ports of the class's proxy's
// pod (the pods of one gateway deployment have the same).
// selectsGateway is the rule of the Gateways whose selector selects the
// router p.
func selectsGateway(p *model.Proxy) func(*view, *model.Config) bool {
	return func(_ *view, c *model.Config) bool {
		gw, ok := c.Object.(*networkingv1.Gateway)
		return ok && len(gw.Spec.GetSelector()) > 0 && matchLabels(gw.Spec.GetSelector(), p.Labels())
	}
}

func gatewayPortTranslation(w *view, p *model.Proxy) func(uint32) uint32 {
	if p == nil || len(p.Labels()) == 0 {
		return func(n uint32) uint32 { return n }
	}
	pod := w.Pod(p.Namespace, p.PodName)
	to := map[uint32]uint32{}
	for _, svc := range w.ServicesSelecting(p.Namespace, p.Labels()) {
		if _, off := svc.Labels[disablePortTranslation]; off {
			continue
		}
		for _, sp := range svc.Ports {
			if sp.Protocol == model.ProtocolUDP || sp.Port <= 0 {
				continue
			}
			if _, done := to[uint32(sp.Port)]; done {
				continue
			}
			target, err := strconv.Atoi(sp.TargetPort)
			switch {
			case sp.TargetPort == "":
				target = int(sp.Port)
			case err != nil:
				if pod == nil || pod.ContainerPorts[sp.TargetPort] == 0 {
					continue
				}
				target = int(pod.ContainerPorts[sp.TargetPort])
			}
			if target > 0 && target <= 65535 {
				to[uint32(sp.Port)] = uint32(target)
			}
		}
	}
	return func(n uint32) uint32 {
		if t, ok := to[n]; ok {
			return t
		}
		return n
	}
}

func (ps *portServers) add(kind serverKind, srv gatewayServer, ts *tlsServer) {
	switch kind {
	case serverHTTP:
		ps.http = append(ps.http, srv)
	case serverHTTPS:
		ps.https = append(ps.https, ts)
	case serverTLSTCP:
		ts.name = srv.name
		ps.tlsTCP = append(ps.tlsTCP, ts)
	case serverPassthrough:
		ps.pass = append(ps.pass, srv)
	case serverAutoPassthrough:
		ps.auto = append(ps.auto, srv)
	case serverTCP:
		ps.tcp = &srv
	}
}

// httpPort adds the listener and RouteConfiguration (http.PORT) of a port
// of plain HTTP servers and returns the route's name.
func (g *Generator) httpPort(sc *Scope, bs map[string]*builder, port uint32, servers []gatewayServer, az gatewayAuthz) string {
	name := "http." + itoa(int32(port))
	rc := &routev3.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false)}
	rc.VirtualHosts = redirectHosts(g.gatewayHosts(sc, servers), servers)
	requireTLS(rc.VirtualHosts, servers)
	bs[RouteType].add(name, rc)
	l := &listenerv3.Listener{
		Name:             "0.0.0.0_" + itoa(int32(port)),
		Address:          socketAddress("0.0.0.0", int32(port)),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{hcmFilter(gatewayManager(name, name, az))},
		}},
	}
	bs[ListenerType].add(l.Name, az.tel.listener(l))
	return name
}

// tlsPort adds the listener of a port of TLS servers, which share it told
// apart by SNI: HTTPS servers (with their RouteConfigurations, whose names
// it returns), TLS servers terminated here, PASSTHROUGH and
// AUTO_PASSTHROUGH servers, in that order. A server or route whose match
// an earlier chain claimed is left out (Envoy refuses two chains with the
// same match; Istio refuses a TLS server repeating a host of its port).
func (g *Generator) tlsPort(sc *Scope, bs map[string]*builder, port uint32, ps *portServers, az gatewayAuthz) []string {
	claims := chainClaims{}
	var https []*tlsServer
	for _, s := range ps.https {
		if !claims.claim(sniMatch(s.hosts)) {
			g.log.Warn("gateway HTTPS server repeats a host of an earlier server on its port; left out", "gateway", s.gateway, "port", port, "hosts", s.hosts)
			continue
		}
		https = append(https, s)
	}
	var refs []string
	for _, s := range https {
		rc := &routev3.RouteConfiguration{Name: s.name, ValidateClusters: wrapperspb.Bool(false)}
		rc.VirtualHosts = g.gatewayHosts(sc, []gatewayServer{s.gatewayServer})
		bs[RouteType].add(s.name, rc)
		refs = append(refs, s.name)
	}
	l := tlsListener(port, https, az)
	l.FilterChains = append(l.FilterChains, g.terminatedTCPChains(sc, port, ps.tlsTCP, claims, az)...)
	l.FilterChains = append(l.FilterChains, g.passthroughChains(sc, port, ps.pass, claims, az)...)
	l.FilterChains = append(l.FilterChains, autoPassthroughChains(sc, ps.auto, claims)...)
	if len(l.FilterChains) == 0 {
		g.log.Warn("gateway TLS port has no filter chain (no VirtualService route matches its servers); no listener", "port", port)
		return refs
	}
	bs[ListenerType].add(l.Name, l)
	return refs
}

// gatewayHosts builds one virtual host per host a bound VirtualService
// names, routed by that VirtualService.
func (g *Generator) gatewayHosts(sc *Scope, servers []gatewayServer) []*routev3.VirtualHost {
	seen := map[string]bool{}
	var out []*routev3.VirtualHost
	for _, srv := range servers {
		// Every VirtualService bound to the gateway and naming a host the
		// server allows, in Istio's precedence; vsRoutes joins them.
		byHost := map[string][]*model.Config{}
		var hosts []string
		for _, c := range sc.gatewayVirtualServices(srv.gateway) {
			for _, h := range c.Object.(*networkingv1.VirtualService).Spec.GetHosts() {
				if seen[h] || !hostAllowed(srv, c.Key.Namespace, h) {
					continue
				}
				if byHost[h] == nil {
					hosts = append(hosts, h)
				}
				byHost[h] = append(byHost[h], c)
			}
		}
		for _, h := range hosts {
			seen[h] = true
			vss := byHost[h]
			routes := g.vsRoutes(sc, vss, ResolveHost(h, vss[0].Key.Namespace, sc.w.DomainSuffix), int32(srv.port), srv.gateway, srv.tls)
			if len(routes) == 0 {
				continue
			}
			out = append(out, &routev3.VirtualHost{Name: h, Domains: []string{h, h + ":*"}, Routes: routes})
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
