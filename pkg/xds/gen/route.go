package gen

import (
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshplane/discovery/pkg/model"
)

// hostNames are the names the class's proxies may use for a service
// port: FQDN, name.ns.svc, name.ns, the short name (proxies of the
// service's namespace only), the addresses, each with and without the
// port.
func (sc *Scope) hostNames(svc *model.Service, port int32) []string {
	return hostNames(svc, port, svc.Entry == nil && sc.inNamespace(svc.Namespace))
}

// hostNames is Scope.hostNames for a client in the service's namespace
// (own) or another.
func hostNames(svc *model.Service, port int32, own bool) []string {
	bare := []string{svc.Hostname, svc.Name + "." + svc.Namespace + ".svc", svc.Name + "." + svc.Namespace}
	if svc.Entry != nil {
		bare = bare[:1] // a ServiceEntry host has no short names
	} else if own {
		bare = append(bare, svc.Name)
	}
	for _, a := range svc.Addresses {
		if !strings.Contains(a, "/") { // a ServiceEntry's CIDR is no Host
			bare = append(bare, a)
		}
	}
	out := make([]string, 0, 2*len(bare))
	seen := map[string]bool{}
	for _, n := range bare {
		for _, d := range []string{n, n + ":" + itoa(port)} {
			if strings.Contains(n, ":") && d == n+":"+itoa(port) {
				d = "[" + n + "]:" + itoa(port) // IPv6 address with port
			}
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// virtualHost routes one service port: by its VirtualService when one
// applies, else everything to the port's default cluster.
func (g *Generator) virtualHost(sc *Scope, svc *model.Service, port model.Port, gateway string, domains []string) *routev3.VirtualHost {
	vh := &routev3.VirtualHost{Name: RouteName(svc.Hostname, port.Port), Domains: domains}
	if vss := sc.VirtualServices(svc.Hostname, gateway); len(vss) > 0 {
		vh.Routes = g.vsRoutes(sc, vss, svc.Hostname, port.Port, gateway, false)
	}
	if len(vh.Routes) == 0 {
		r := defaultRoute(ClusterName(port.Port, "", svc.Hostname), retryPolicy(meshRetry(sc.w), false))
		// The DestinationRule's consistent hash, as istiod puts it on the
		// default route (its retries still go to other hosts).
		r.GetRoute().HashPolicy = hashPolicy(sc.clusterPolicy(svc.Hostname, "", port.Port))
		vh.Routes = []*routev3.Route{r}
	}
	return vh
}

// defaultRoute sends everything to cluster, without timeout, with the
// retry policy rp (nil: none).
func defaultRoute(cluster string, rp *routev3.RetryPolicy) *routev3.Route {
	return &routev3.Route{
		Name:  "default",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
			Timeout:          durationpb.New(0),
			RetryPolicy:      rp,
		}},
	}
}

// serviceRoute is the RouteConfiguration HOST:PORT of one service port.
func (g *Generator) serviceRoute(sc *Scope, svc *model.Service, port model.Port, extraDomains ...string) *routev3.RouteConfiguration {
	domains := append(append(sc.hostNames(svc, port.Port), sc.aliasNames(svc, port.Port)...), extraDomains...)
	return &routev3.RouteConfiguration{
		Name:             RouteName(svc.Hostname, port.Port),
		VirtualHosts:     []*routev3.VirtualHost{g.virtualHost(sc, svc, port, "mesh", domains)},
		ValidateClusters: wrapperspb.Bool(false),
	}
}

// portRoute is the shared RouteConfiguration named after a port, for the
// HTTP services on that port that have no address; anything else goes
// through as plain TCP.
func (g *Generator) portRoute(sc *Scope, port int32, svcs []*model.Service) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: itoa(port), ValidateClusters: wrapperspb.Bool(false)}
	for _, svc := range svcs {
		p, _ := svc.PortByNumber(port)
		rc.VirtualHosts = append(rc.VirtualHosts, g.virtualHost(sc, svc, p, "mesh", append(sc.hostNames(svc, port), sc.aliasNames(svc, port)...)))
	}
	rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
		Name: "allow_any", Domains: []string{"*"},
		Routes: []*routev3.Route{defaultRoute(PassthroughCluster, nil)}, // no retries, as istiod's allow_any
	})
	return rc
}
