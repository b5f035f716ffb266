package gatewayapi

import (
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

// bucketKey names one VirtualService: a served listener and a host.
type bucketKey struct{ listener, host string }

// bucket gathers the rules of every route attached to one listener for
// one host, oldest route first.
type bucket struct {
	l     *listener
	host  string
	ns    string // the oldest route's namespace
	rules []*rule
	tcp   []*networking.TCPRoute
	tls   []*networking.TLSRoute
	from  []Ref
}

// routeInfo is what attach needs of a route of either kind.
type routeInfo struct {
	ref        Ref
	generation int64
	parents    []gw.ParentReference
	hostnames  []gw.Hostname
	rules      []*rule
	// tcp and tls are the Istio routes of a TCPRoute or TLSRoute (the
	// TLS ones without match: each host's VirtualService matches its SNI).
	tcp []*networking.TCPRoute
	tls []*networking.TLSRoute
	// resolved is the ResolvedRefs condition's verdict for every parent.
	resolvedOK             bool
	resolvedReason, resMsg string
	// partial is set when some rules were replaced by a 500 (a filter
	// discovery cannot apply): the PartiallyInvalid condition.
	partial string
	// mesh is the route translated for its Service parents (ruleState's
	// mesh), when it has any: their rules and status.
	mesh *routeInfo
}

// translateRoute attaches an HTTPRoute or GRPCRoute that build
// translates: with gateway semantics for its Gateway parents and, when it
// has Service parents, again with mesh semantics for those, as istiod
// converts a route once for each. The reports of what was not supported
// are the gateway translation's, or the mesh one's for a route of
// Service parents only.
func (t *translator) translateRoute(parents []gw.ParentReference, build func(mesh bool) (*routeInfo, []string, []string)) {
	gateways, services := false, false
	for _, p := range parents {
		if isServiceParent(p) {
			services = true
		} else {
			gateways = true
		}
	}
	ri, unsupported, denied := build(false)
	if services {
		mi, mu, md := build(true)
		ri.mesh = mi
		if !gateways {
			unsupported, denied = mu, md
		}
	}
	t.attach(ri)
	if rep := t.out.Reports[ri.ref]; rep != nil {
		rep.Unsupported = append(rep.Unsupported, unsupported...)
		rep.Denied = append(rep.Denied, denied...)
	}
}

func isServiceParent(p gw.ParentReference) bool {
	group, kind := string(ptrOr(p.Group, gw.GroupName)), string(ptrOr(p.Kind, "Gateway"))
	return (group == "" || group == "core") && kind == "Service"
}

// attach binds a route to the listeners of its parents and records its
// parents' status.
func (t *translator) attach(ri *routeInfo) {
	var rep *Report
	report := func() *Report {
		if rep == nil {
			rep = t.report(ri.ref, ri.generation)
		}
		return rep
	}
	for _, p := range ri.parents {
		group, kind := string(ptrOr(p.Group, gw.GroupName)), string(ptrOr(p.Kind, "Gateway"))
		ns := string(ptrOr(p.Namespace, gw.Namespace(ri.ref.Namespace)))
		switch {
		case isServiceParent(p):
			mi := ri
			if ri.mesh != nil {
				mi = ri.mesh
			}
			ok, reason, msg := t.attachToService(mi, p, ns, report())
			t.parentStatus(report(), mi, p, ok, reason, msg)
			continue
		case group != gw.GroupName || kind != "Gateway":
			report().Unsupported = append(report().Unsupported, fmt.Sprintf("spec.parentRefs[%s/%s %s]: not a parent discovery supports", group, kind, p.Name))
			continue
		}
		g := t.gateways[[2]string{ns, string(p.Name)}]
		if g == nil {
			if t.gatewayExists(ns, string(p.Name)) {
				continue // another controller's
			}
			t.parentStatus(report(), ri, p, false, string(gw.RouteReasonNoMatchingParent), fmt.Sprintf("gateway %s/%s not found", ns, p.Name))
			continue
		}
		ok, reason, msg := t.attachTo(ri, g, p)
		t.parentStatus(report(), ri, p, ok, reason, msg)
	}
}

func (t *translator) gatewayExists(ns, name string) bool {
	for _, g := range t.in.Gateways {
		if g.Namespace == ns && g.Name == name {
			return true
		}
	}
	return false
}

// attachTo binds the route to the listeners of g that p selects and
// admit it; it returns the Accepted verdict.
func (t *translator) attachTo(ri *routeInfo, g *gateway, p gw.ParentReference) (bool, string, string) {
	reason, msg := string(gw.RouteReasonNoMatchingParent), "no listener matches the parentRef"
	accepted := false
	for _, l := range g.listeners {
		if p.SectionName != nil && *p.SectionName != l.spec.Name {
			continue
		}
		if p.Port != nil && *p.Port != l.spec.Port {
			continue
		}
		if !listenerAccepted(l) {
			reason, msg = string(gw.RouteReasonNoMatchingParent), fmt.Sprintf("listener %s is not valid", l.spec.Name)
			continue
		}
		// A listener accepted but not programmed (a certificateRef that
		// does not resolve, a conflict) still takes and counts the route,
		// as the spec's attachedRoutes and istiod do; it serves nothing.
		if ok, why := l.admits(ri.ref.Namespace, ri.ref.Kind); !ok {
			if reason != string(gw.RouteReasonNoMatchingListenerHostname) {
				reason, msg = string(gw.RouteReasonNotAllowedByListeners), why
			}
			continue
		}
		hosts := intersectHosts(ri.hostnames, l.hostname())
		if ri.ref.Kind == KindTCPRoute {
			hosts = []string{"*"} // TCP has no host to match
		}
		if len(hosts) == 0 {
			reason, msg = string(gw.RouteReasonNoMatchingListenerHostname), fmt.Sprintf("no hostname of the route matches listener %s", l.spec.Name)
			continue
		}
		accepted = true
		l.attached++
		if !l.served {
			continue
		}
		for _, h := range hosts {
			if !l.isolated(h) {
				t.addToBucket(l, h, ri)
			}
		}
	}
	if accepted {
		return true, string(gw.RouteReasonAccepted), "Route was valid"
	}
	return false, reason, msg
}

func (t *translator) addToBucket(l *listener, host string, ri *routeInfo) {
	k := bucketKey{l.istioName(), host}
	b := t.buckets[k]
	if b == nil {
		b = &bucket{l: l, host: host, ns: ri.ref.Namespace}
		t.buckets[k] = b
		t.bucketIDs = append(t.bucketIDs, k)
	}
	b.rules = append(b.rules, ri.rules...)
	b.tcp = append(b.tcp, ri.tcp...)
	b.tls = append(b.tls, ri.tls...)
	b.from = append(b.from, ri.ref)
}

func (t *translator) parentStatus(rep *Report, ri *routeInfo, p gw.ParentReference, ok bool, reason, msg string) {
	gen := ri.generation
	conds := []metav1.Condition{condition(string(gw.RouteConditionAccepted), ok, reason, msg, gen)}
	resReason, resMsg := string(gw.RouteReasonResolvedRefs), "All references resolved"
	if !ri.resolvedOK {
		resReason, resMsg = ri.resolvedReason, ri.resMsg
	}
	conds = append(conds, condition(string(gw.RouteConditionResolvedRefs), ri.resolvedOK, resReason, resMsg, gen))
	if ri.partial != "" {
		conds = append(conds, condition(string(gw.RouteConditionPartiallyInvalid), true, string(gw.RouteReasonUnsupportedValue), ri.partial, gen))
	}
	rep.Parents = append(rep.Parents, gw.RouteParentStatus{ParentRef: p, ControllerName: ControllerName, Conditions: conds})
}

// intersectHosts is the spec's intersection of a route's hostnames with a
// listener's hostname ("" for any): each route hostname the listener
// admits, the more specific of the two when both could be wildcards; the
// listener's own hostname (or "*") for a route that names none.
func intersectHosts(route []gw.Hostname, listener string) []string {
	if len(route) == 0 {
		if listener == "" {
			return []string{"*"}
		}
		return []string{listener}
	}
	var out []string
	seen := map[string]bool{}
	add := func(h string) {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	for _, rh := range route {
		h := string(rh)
		switch {
		case listener == "" || h == listener:
			add(h)
		case wildcardCovers(listener, h):
			add(h)
		case wildcardCovers(h, listener):
			add(listener)
		}
	}
	return out
}

// wildcardCovers reports whether the wildcard pattern ("*.example.com")
// matches h, a host or a narrower wildcard: a wildcard label stands for
// one or more labels.
func wildcardCovers(pattern, h string) bool {
	suffix, ok := strings.CutPrefix(pattern, "*")
	if !ok {
		return false
	}
	return strings.HasSuffix(h, suffix) && len(h) > len(suffix) && strings.TrimPrefix(h, "*") != suffix
}

// isolated reports whether host h, which a route of l would serve, is the
// hostname of another accepted listener of l's Gateway on the same port
// and protocol: the spec's listener isolation gives requests for h to
// that more specific listener's routes only (GatewayHTTPListenerIsolation).
// A host merely covered by a more specific listener's wildcard needs
// nothing here: Envoy picks the most specific virtual host.
func (l *listener) isolated(h string) bool {
	if l.spec.Protocol == gw.TCPProtocolType || h == l.hostname() {
		return false
	}
	for _, o := range l.gw.listeners {
		if o != l && o.spec.Port == l.spec.Port && o.spec.Protocol == l.spec.Protocol && o.hostname() == h && listenerAccepted(o) {
			return true
		}
	}
	return false
}
