package gen

import (
	"sort"
	"strings"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// Which VirtualServices route a host, and in what order, as Istio decides:
//
//	order     the VirtualServices visible to the proxy's namespace, those
//	          exported to it privately first (exportTo "." or the namespace
//	          itself, in the VirtualService's own namespace), then those
//	          exported to it by name, then the public ones (no exportTo,
//	          or "*"); within each group oldest first (creation time), then
//	          by name, then by namespace (pilot's sortConfigByCreationTime
//	          and VirtualServicesForGateway); before all of them the Gateway
//	          API mesh routes (GAMMA) of the proxy's own namespace, as
//	          istiod favours them
//	http      a sidecar uses the first VirtualService naming the host that
//	          yields a route for the port and proxy; the others are
//	          shadowed (Istio's pilot_vservice_dup_domain). A gateway joins
//	          the routes of all of them, catch-all routes last
//	wildcard  a host with no VirtualService of its own for sidecars takes
//	          the first one naming the most specific wildcard that covers
//	          it ("*.ns.svc.cluster.local" before "*.cluster.local")
//	tcp, tls  a sidecar goes through the routes of every VirtualService
//	          naming the host or a wildcard covering it, in order
//	delegate  VirtualServices without hosts are delegates: they route
//	          nothing by themselves, their http routes are merged into the
//	          roots that name them (route_vs_delegate.go)
//	Sidecar   of those, a sidecar whose Sidecar has egress hosts sees the
//	          ones its hosts import by the VirtualService's namespace
//	          (importsVirtualService, Istio's SelectVirtualServices);
//	          DestinationRules are not filtered so (Istio takes the rules
//	          of the services the Sidecar imports, cluster_drselect.go)

// exportBucket is a VirtualService's group in the order above, for proxies
// of namespace ns: 0 private, 1 exported by name, 2 public.
func exportBucket(exportTo []string, own, ns string) int {
	if len(exportTo) == 0 {
		return 2
	}
	bucket := 1
	for _, e := range exportTo {
		switch {
		case e == "*":
			return 2
		case own == ns && (e == "." || e == own):
			bucket = 0
		}
	}
	return bucket
}

// sortVirtualServices orders the VirtualServices visible to proxies of ns.
func sortVirtualServices(vss []*model.Config, ns string, dflt []string) {
	type rank struct {
		bucket int
		vs     *networkingv1.VirtualService
	}
	r := make(map[*model.Config]rank, len(vss))
	for _, c := range vss {
		vs := c.Object.(*networkingv1.VirtualService)
		b := exportBucket(orDefault(vs.Spec.GetExportTo(), dflt), c.Key.Namespace, ns)
		if c.Key.Namespace == ns && vs.Annotations[gatewayapi.AnnotationRouteSemantics] == gatewayapi.RouteSemanticsGateway {
			// A Gateway API mesh route of the client's own namespace
			// comes before every VirtualService of its host, as istiod
			// favours them (the GAMMA consumer override).
			b = -1
		}
		r[c] = rank{b, vs}
	}
	sort.SliceStable(vss, func(i, j int) bool {
		a, b := r[vss[i]], r[vss[j]]
		if a.bucket != b.bucket {
			return a.bucket < b.bucket
		}
		if ta, tb := a.vs.CreationTimestamp, b.vs.CreationTimestamp; !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		if vss[i].Key.Name != vss[j].Key.Name {
			return vss[i].Key.Name < vss[j].Key.Name
		}
		return vss[i].Key.Namespace < vss[j].Key.Namespace
	})
}

// indexVirtualServices fills sc.vs, sc.vsRank, sc.vsWild and
// sc.delegations from the VirtualServices visible to the proxy's
// namespace. It runs after sc.Services is known.
func (sc *Scope) indexVirtualServices() {
	w, ns := sc.w, sc.Proxy.Namespace
	vss := w.ConfigsWhere(model.KindVirtualService, func(u *view, c *model.Config) bool {
		vs, ok := c.Object.(*networkingv1.VirtualService)
		// A delegate (no hosts) routes nothing by itself: it is read
		// where a root names it (resolveDelegation). A sidecar's Sidecar
		// imports VirtualServices by their namespace (scope_sidecar.go).
		return ok && len(vs.Spec.GetHosts()) > 0 && exportedTo(vsExportTo(u, &vs.Spec), c.Key.Namespace, ns) &&
			sc.sidecar.importsVirtualService(c, vs.Spec.GetHosts(), u.DomainSuffix)
	})
	sortVirtualServices(vss, ns, w.Mesh().VirtualServiceExportTo())
	sc.vsRank = make(map[*model.Config]int, len(vss))
	wild := map[string]bool{}
	for i, c := range vss {
		sc.vsRank[c] = i
		vs := c.Object.(*networkingv1.VirtualService)
		for _, h := range vs.Spec.GetHosts() {
			host := ResolveHost(h, c.Key.Namespace, w.DomainSuffix)
			if l := sc.vs[host]; len(l) > 0 && l[len(l)-1] == c {
				continue // the same host written twice ("a" and its FQDN)
			}
			sc.vs[host] = append(sc.vs[host], c)
			if strings.HasPrefix(host, "*") {
				wild[host] = true
			}
		}
		if isRoot(vs) {
			if sc.delegations == nil {
				sc.delegations = map[*model.Config]*delegation{}
			}
			sc.delegations[c] = resolveDelegation(w, c)
		}
	}
	for h := range wild {
		sc.vsWild = append(sc.vsWild, h)
	}
	// Most specific (longest) first; ties cannot cover the same host.
	sort.Slice(sc.vsWild, func(i, j int) bool {
		a, b := sc.vsWild[i], sc.vsWild[j]
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	sc.addWildcardRoutes()
}

// addWildcardRoutes gives each visible service without a VirtualService
// of its own for sidecars the first sidecar VirtualService of the most
// specific wildcard host that covers it (Istio's
// mostSpecificWildcardVsIndex), appended to sc.vs[hostname].
func (sc *Scope) addWildcardRoutes() {
	if len(sc.vsWild) == 0 {
		return
	}
	for _, svc := range sc.Services {
		if firstApplying(sc.vs[svc.Hostname], "mesh") != nil {
			continue
		}
		for _, pattern := range sc.vsWild {
			if !wildcardCovers(pattern, svc.Hostname) {
				continue
			}
			if c := firstApplying(sc.vs[pattern], "mesh"); c != nil {
				sc.vs[svc.Hostname] = append(sc.vs[svc.Hostname], c)
				break
			}
		}
	}
}

func firstApplying(vss []*model.Config, gateway string) *model.Config {
	for _, c := range vss {
		if appliesTo(c, gateway) {
			return c
		}
	}
	return nil
}

// wildcardCovers reports whether the wildcard host pattern ("*" or
// "*.suffix") covers host.
func wildcardCovers(pattern, host string) bool {
	return pattern != host && strings.HasSuffix(host, pattern[1:])
}

// l4VirtualServices are the VirtualServices whose tcp and tls routes a
// sidecar goes through for host: those naming it or a wildcard covering
// it, in precedence order.
func (sc *Scope) l4VirtualServices(host string) []*model.Config {
	out := sc.l4VirtualServicesOf(host)
	sc.w.r.scope(scopeRead{q: qL4VirtualServices, host: host, cfgs: out})
	sc.use(out...)
	return out
}

// l4VirtualServicesOf is l4VirtualServices, unrecorded.
func (sc *Scope) l4VirtualServicesOf(host string) []*model.Config {
	var out []*model.Config
	seen := map[*model.Config]bool{}
	add := func(vss []*model.Config) {
		for _, c := range vss {
			if !seen[c] && appliesTo(c, "mesh") {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	add(sc.vs[host])
	for _, pattern := range sc.vsWild {
		if wildcardCovers(pattern, host) {
			add(sc.vs[pattern])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return sc.vsRank[out[i]] < sc.vsRank[out[j]] })
	return out
}

// resolveGatewayName turns a gateway reference written in namespace ns
// into namespace/name, as Istio does: "name" and "./name" are in ns,
// "name.namespace.svc..." (the legacy form) in that namespace; "mesh"
// stays as it is.
func resolveGatewayName(g, ns string) string {
	if g == "mesh" {
		return g
	}
	if gns, name, ok := strings.Cut(g, "/"); ok {
		if gns == "." {
			return ns + "/" + name
		}
		return g
	}
	name, rest, ok := strings.Cut(g, ".")
	if !ok {
		return ns + "/" + g
	}
	gns, _, _ := strings.Cut(rest, ".")
	return gns + "/" + name
}

// gatewayVirtualServices are the VirtualServices bound to gateway
// (namespace/name) that the class sees, in precedence order: a gateway
// joins the routes of those naming the same host, in this order
// (vsRoutes).
func (sc *Scope) gatewayVirtualServices(gateway string) []*model.Config {
	out := sc.gatewayVirtualServicesOf(gateway)
	sc.w.r.scope(scopeRead{q: qGatewayVirtualServices, host: gateway, cfgs: out})
	sc.use(out...)
	return out
}

// gatewayVirtualServicesOf is gatewayVirtualServices, unrecorded.
func (sc *Scope) gatewayVirtualServicesOf(gateway string) []*model.Config {
	out := make([]*model.Config, 0, len(sc.vsRank))
	for c := range sc.vsRank {
		if appliesTo(c, gateway) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return sc.vsRank[out[i]] < sc.vsRank[out[j]] })
	return out
}
