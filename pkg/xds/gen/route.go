package gen

import (
	"fmt"
	"sort"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// hostNames are the names a client in namespace clientNS may use for a
// service port: FQDN, name.ns.svc, name.ns, the short name (same namespace
// only), the addresses, each with and without the port.
func hostNames(svc *model.Service, port int32, clientNS string) []string {
	bare := []string{svc.Hostname, svc.Name + "." + svc.Namespace + ".svc", svc.Name + "." + svc.Namespace}
	if svc.Namespace == clientNS {
		bare = append(bare, svc.Name)
	}
	bare = append(bare, svc.Addresses...)
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
		vh.Routes = g.vsRoutes(sc, vss[0], svc.Hostname, port.Port)
	}
	if len(vh.Routes) == 0 {
		vh.Routes = []*routev3.Route{defaultRoute(ClusterName(port.Port, "", svc.Hostname))}
	}
	return vh
}

func defaultRoute(cluster string) *routev3.Route {
	return &routev3.Route{
		Name:  "default",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
			Timeout:          durationpb.New(0),
		}},
	}
}

// serviceRoute is the RouteConfiguration HOST:PORT of one service port.
func (g *Generator) serviceRoute(sc *Scope, svc *model.Service, port model.Port, extraDomains ...string) *routev3.RouteConfiguration {
	domains := append(hostNames(svc, port.Port, sc.Proxy.Namespace), extraDomains...)
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
		rc.VirtualHosts = append(rc.VirtualHosts, g.virtualHost(sc, svc, p, "mesh", hostNames(svc, port, sc.Proxy.Namespace)))
	}
	rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
		Name: "allow_any", Domains: []string{"*"},
		Routes: []*routev3.Route{defaultRoute(PassthroughCluster)},
	})
	return rc
}

// vsRoutes translates a VirtualService's http routes for one host and port.
// Weighted destinations and uri, header, method and port matches are
// supported; other fields are reported once and ignored.
func (g *Generator) vsRoutes(sc *Scope, c *model.Config, host string, port int32) []*routev3.Route {
	vs := c.Object.(*networkingv1.VirtualService)
	g.warnUnsupported(c, vs)
	var out []*routev3.Route
	for i, hr := range vs.Spec.GetHttp() {
		action := g.routeAction(sc, c.Key.Namespace, hr, host, port)
		if action == nil {
			continue
		}
		name := hr.GetName()
		if name == "" {
			name = fmt.Sprintf("%s.%s.%d", c.Key.Namespace, c.Key.Name, i)
		}
		matches := hr.GetMatch()
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		for _, m := range matches {
			if m.GetPort() != 0 && int32(m.GetPort()) != port {
				continue
			}
			out = append(out, &routev3.Route{
				Name:   name,
				Match:  routeMatch(m),
				Action: &routev3.Route_Route{Route: action},
			})
		}
	}
	return out
}

func (g *Generator) routeAction(sc *Scope, ns string, hr *networking.HTTPRoute, host string, port int32) *routev3.RouteAction {
	var wcs []*routev3.WeightedCluster_ClusterWeight
	for _, d := range hr.GetRoute() {
		dst := d.GetDestination()
		if dst == nil {
			continue
		}
		dhost := ResolveHost(dst.GetHost(), ns, sc.World.DomainSuffix)
		dport := int32(dst.GetPort().GetNumber())
		if dport == 0 {
			dport = port
			if dhost != host {
				if s := sc.World.ServiceByHost(dhost); s != nil && len(s.Ports) == 1 {
					dport = s.Ports[0].Port
				}
			}
		}
		w := d.GetWeight()
		if len(hr.GetRoute()) == 1 && w == 0 {
			w = 100
		}
		if w <= 0 {
			continue
		}
		wcs = append(wcs, &routev3.WeightedCluster_ClusterWeight{
			Name: ClusterName(dport, dst.GetSubset(), dhost), Weight: wrapperspb.UInt32(uint32(w)),
		})
	}
	switch len(wcs) {
	case 0:
		return nil
	case 1:
		return &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: wcs[0].Name}, Timeout: durationpb.New(0)}
	}
	return &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: wcs}},
		Timeout:          durationpb.New(0),
	}
}

func routeMatch(m *networking.HTTPMatchRequest) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return rm
	}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	}
	names := make([]string, 0, len(m.GetHeaders()))
	for k := range m.GetHeaders() {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if hm := headerMatch(k, m.GetHeaders()[k]); hm != nil {
			rm.Headers = append(rm.Headers, hm)
		}
	}
	if hm := headerMatch(":method", m.GetMethod()); hm != nil {
		rm.Headers = append(rm.Headers, hm)
	}
	return rm
}

func headerMatch(name string, sm *networking.StringMatch) *routev3.HeaderMatcher {
	var m *matcherv3.StringMatcher
	switch v := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v.Exact}}
	case *networking.StringMatch_Prefix:
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v.Prefix}}
	case *networking.StringMatch_Regex:
		m = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v.Regex}}}
	default:
		return nil
	}
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m}}
}

var (
	supportedVS    = map[protoreflect.Name]bool{"hosts": true, "gateways": true, "http": true, "export_to": true}
	supportedRoute = map[protoreflect.Name]bool{"name": true, "match": true, "route": true}
	supportedMatch = map[protoreflect.Name]bool{"name": true, "uri": true, "headers": true, "method": true, "port": true}
	supportedDest  = map[protoreflect.Name]bool{"destination": true, "weight": true}
)

// warnUnsupported logs, once per VirtualService version, the fields this
// generator ignores.
func (g *Generator) warnUnsupported(c *model.Config, vs *networkingv1.VirtualService) {
	key := c.Key.String() + "@" + vs.ResourceVersion
	if _, done := g.warned.LoadOrStore(key, true); done {
		return
	}
	var fields []string
	collect := func(prefix string, m proto.Message, ok map[protoreflect.Name]bool) {
		m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			if !ok[fd.Name()] {
				fields = append(fields, prefix+string(fd.Name()))
			}
			return true
		})
	}
	collect("", &vs.Spec, supportedVS)
	for i, hr := range vs.Spec.GetHttp() {
		p := fmt.Sprintf("http[%d].", i)
		collect(p, hr, supportedRoute)
		for j, m := range hr.GetMatch() {
			collect(fmt.Sprintf("%smatch[%d].", p, j), m, supportedMatch)
		}
		for j, d := range hr.GetRoute() {
			collect(fmt.Sprintf("%sroute[%d].", p, j), d, supportedDest)
		}
	}
	if len(fields) > 0 {
		g.log.Warn("VirtualService fields not supported yet are ignored", "virtualservice", c.Key.String(), "fields", fields)
	}
}
