package gen

import (
	"fmt"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// vsRoutes translates the http routes of the VirtualServices vss bound to
// host, in precedence order, for one port and gateway ("mesh" for
// sidecars), first match first (scope_vs.go has the rules). A sidecar uses
// the first VirtualService that yields a route and reports the ones it
// shadows; a gateway joins the routes of all, catch-all routes last, as
// Istio does.
func (g *Generator) vsRoutes(sc *Scope, vss []*model.Config, host string, port int32, gateway string, tls bool) []*routev3.Route {
	if gateway == "mesh" {
		for i, c := range vss {
			if routes := g.vsHTTPRoutes(sc, c, host, port, gateway, tls); len(routes) > 0 {
				if i+1 < len(vss) {
					g.warnShadowed(vss[i], vss[i+1:], host)
				}
				return routes
			}
		}
		return nil
	}
	if len(vss) == 1 {
		g.warnGatewayJoin(sc, vss[0], host, gateway)
	}
	var out []*routev3.Route
	for _, c := range vss {
		out = combineRoutes(out, g.vsHTTPRoutes(sc, c, host, port, gateway, tls))
	}
	return out
}

// warnGatewayJoin reports, once per set of versions, a gateway host
// routed by one VirtualService while others bound to the gateway name it
// too: the gateway's caller passes one VirtualService per host, so they
// are not joined yet (gatewayVirtualServices lists them all).
func (g *Generator) warnGatewayJoin(sc *Scope, used *model.Config, host, gateway string) {
	all := sc.VirtualServices(host, gateway)
	if len(all) < 2 {
		return
	}
	key := "gatewayjoin/" + gateway + "|" + host
	var others []string
	for _, c := range all {
		key += "|" + configVersion(c)
		if c != used {
			others = append(others, c.Key.Namespace+"/"+c.Key.Name)
		}
	}
	if _, done := g.warns.once.LoadOrStore(key, true); done {
		return
	}
	g.log.Warn("several VirtualServices bound to a gateway name one host; joining them is not supported yet, one applies",
		"gateway", gateway, "host", host, "used", used.Key.Namespace+"/"+used.Key.Name, "ignored", others)
}

// vsHTTPRoutes translates the http routes of one VirtualService, its
// delegates merged in.
func (g *Generator) vsHTTPRoutes(sc *Scope, c *model.Config, host string, port int32, gateway string, tls bool) []*routev3.Route {
	vs := c.Object.(*networkingv1.VirtualService)
	g.warn(c, vs.ResourceVersion, &vs.Spec, vsFields)
	var out []*routev3.Route
	if isRoot(vs) {
		d := sc.delegations[c]
		if d != nil {
			sc.w.r.scope(scopeRead{q: qDelegation, cfg: c, ok: true, cfgs: d.delegates})
		} else {
			sc.w.r.scope(scopeRead{q: qDelegation, cfg: c})
		}
		if d == nil {
			// A gateway may bind a root its namespace does not see.
			d = resolveDelegation(sc.w, c)
		}
		g.reportDelegation(d)
		sc.use(d.delegates...)
		for _, r := range d.routes {
			out = append(out, g.httpRoutes(sc, r, host, port, gateway, tls)...)
		}
		return out
	}
	gatewayAPI := vs.Annotations[gatewayapi.AnnotationDerivedFrom] != ""
	for i, hr := range vs.Spec.GetHttp() {
		r := httpRoute{hr: hr, ns: c.Key.Namespace, name: fmt.Sprintf("%s.%s.%d", c.Key.Namespace, c.Key.Name, i), gatewayAPI: gatewayAPI}
		out = append(out, g.httpRoutes(sc, r, host, port, gateway, tls)...)
	}
	return out
}

// reportDelegation logs, once per set of versions, what went wrong
// merging a root's delegates, and the delegates' unsupported fields.
func (g *Generator) reportDelegation(d *delegation) {
	for _, dc := range d.delegates {
		dvs := dc.Object.(*networkingv1.VirtualService)
		g.warn(dc, dvs.ResourceVersion, &dvs.Spec, vsFields)
	}
	for _, p := range d.problems {
		if _, done := g.warns.once.LoadOrStore("delegate/"+p.key, true); !done {
			g.log.Warn(p.msg, p.attrs...)
		}
	}
}

// warnShadowed reports, once per set of versions, the VirtualServices of
// a host that sidecars ignore because used comes first, and counts the
// report (discovery_xds_vservice_dup_domain_total).
func (g *Generator) warnShadowed(used *model.Config, ignored []*model.Config, host string) {
	key := "shadow/" + host + "|" + configVersion(used)
	names := make([]string, 0, len(ignored))
	for _, c := range ignored {
		names = append(names, c.Key.Namespace+"/"+c.Key.Name)
		key += "|" + configVersion(c)
	}
	if _, done := g.warns.once.LoadOrStore(key, true); done {
		return
	}
	g.log.Warn("several VirtualServices for one host: sidecars use the first that routes it, as Istio does; the others are ignored",
		"host", host, "used", used.Key.Namespace+"/"+used.Key.Name, "ignored", names)
	g.warns.dupDomains.inc()
}

func configVersion(c *model.Config) string {
	return c.Key.String() + "@" + c.Object.(*networkingv1.VirtualService).ResourceVersion
}

// combineRoutes appends b to a with the catch-all routes of both last,
// keeping their order otherwise (Istio's CombineVHostRoutes), so that one
// VirtualService's catch-all does not hide the next one's routes.
func combineRoutes(a, b []*routev3.Route) []*routev3.Route {
	if len(a) == 0 {
		return b
	}
	out := make([]*routev3.Route, 0, len(a)+len(b))
	var last []*routev3.Route
	for _, r := range append(a[:len(a):len(a)], b...) {
		if isCatchAll(r) {
			last = append(last, r)
		} else {
			out = append(out, r)
		}
	}
	return append(out, last...)
}

// isCatchAll reports whether r matches every request: path prefix "/" (or
// regex "*") and no header or query parameter condition.
func isCatchAll(r *routev3.Route) bool {
	m := r.GetMatch()
	all := false
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		all = p.Prefix == "/"
	case *routev3.RouteMatch_PathSeparatedPrefix:
		all = p.PathSeparatedPrefix == "/"
	case *routev3.RouteMatch_SafeRegex:
		all = p.SafeRegex.GetRegex() == "*"
	}
	return all && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && len(m.GetDynamicMetadata()) == 0
}
