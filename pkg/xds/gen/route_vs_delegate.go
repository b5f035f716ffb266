package gen

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Delegation, as Istio does it (pilot's mergeVirtualServicesIfNeeded): an
// http route of a root VirtualService with `delegate: {name, namespace}`
// stands for the http routes of that VirtualService (the delegate), which
// has no hosts, no gateways and no tcp or tls routes. Each delegate route
// is merged with the root route: its matches must each fall inside one of
// the root's (a delegate `prefix: /api/v1` under a root `prefix: /api`)
// and are combined with them; what the delegate route leaves unset
// (rewrite, timeout, retries, fault, mirrors, cors, headers, direct
// response) comes from the root route. A delegate route whose matches
// conflict with the root's is left out. The namespace defaults to the
// root's; the delegate must be exported to the root's namespace. One
// level only: a delegate that delegates again is refused. Short host and
// gateway names resolve in the namespace of the VirtualService that wrote
// them.

// httpRoute is one http route of a VirtualService after delegation.
type httpRoute struct {
	hr *networking.HTTPRoute
	// ns is where hr's short names resolve.
	ns string
	// name is the route's name when hr has none.
	name string
	// gatewayAPI: hr is translated from a Gateway API route
	// (gatewayapi.AnnotationDerivedFrom on its VirtualService).
	gatewayAPI bool
}

// delegation is a root VirtualService's http routes with its delegates
// merged in, and what went wrong doing it.
type delegation struct {
	routes []httpRoute
	// delegates are the VirtualServices merged in.
	delegates []*model.Config
	// problems are reported once per set of versions (key).
	problems []delegationProblem
}

type delegationProblem struct {
	key, msg string
	attrs    []any
}

func isRoot(vs *networkingv1.VirtualService) bool {
	for _, hr := range vs.Spec.GetHttp() {
		if hr.GetDelegate() != nil {
			return true
		}
	}
	return false
}

// resolveDelegation merges the delegates of the root VirtualService c.
func resolveDelegation(w *view, c *model.Config) *delegation {
	vs := c.Object.(*networkingv1.VirtualService)
	d := &delegation{}
	for i, hr := range vs.Spec.GetHttp() {
		name := fmt.Sprintf("%s.%s.%d", c.Key.Namespace, c.Key.Name, i)
		if hr.GetDelegate() == nil {
			d.routes = append(d.routes, httpRoute{hr: hr, ns: c.Key.Namespace, name: name})
			continue
		}
		d.delegate(w, c, i, hr)
	}
	return d
}

// delegate appends the routes of the delegate named by the root's route
// i, or reports why there are none.
func (d *delegation) delegate(w *view, root *model.Config, i int, hr *networking.HTTPRoute) {
	rootVS := root.Object.(*networkingv1.VirtualService)
	ns := hr.GetDelegate().GetNamespace()
	if ns == "" {
		ns = root.Key.Namespace
	}
	ref := ns + "/" + hr.GetDelegate().GetName()
	where := fmt.Sprintf("http[%d]", i)
	base := root.Key.String() + "@" + rootVS.ResourceVersion + "|" + where + "|"
	fail := func(dvs *networkingv1.VirtualService, msg string) {
		key := base + ref
		if dvs != nil {
			key += "@" + dvs.ResourceVersion
		}
		d.problems = append(d.problems, delegationProblem{
			key: key + "|" + msg, msg: msg,
			attrs: []any{"virtualService", root.Key.Namespace + "/" + root.Key.Name, "route", where, "delegate", ref},
		})
	}
	dc := w.Config(model.KindVirtualService, ns, hr.GetDelegate().GetName())
	if dc == nil {
		fail(nil, "delegate VirtualService not found; the route is left out")
		return
	}
	dvs := dc.Object.(*networkingv1.VirtualService)
	switch {
	case len(dvs.Spec.GetHosts()) > 0:
		fail(dvs, "the delegate VirtualService has hosts, so it is not a delegate; the route is left out")
		return
	case !exportedTo(vsExportTo(w, &dvs.Spec), ns, root.Key.Namespace):
		fail(dvs, "the delegate VirtualService is not exported to the root's namespace; the route is left out")
		return
	case isRoot(dvs):
		fail(dvs, "the delegate VirtualService delegates again; only one level of delegation is supported, the route is left out")
		return
	}
	d.delegates = append(d.delegates, dc)
	parent := resolvedRoute(hr, root.Key.Namespace, w.DomainSuffix)
	for j, sub := range dvs.Spec.GetHttp() {
		merged := mergeHTTPRoute(parent, resolvedRoute(sub, ns, w.DomainSuffix))
		if merged == nil {
			fail(dvs, fmt.Sprintf("the matches of the delegate's http[%d] do not fall within the root route's; that delegate route is left out", j))
			continue
		}
		d.routes = append(d.routes, httpRoute{hr: merged, ns: ns, name: fmt.Sprintf("%s.%s.%d", ns, dc.Key.Name, j)})
	}
}

// resolvedRoute is a copy of hr whose destination hosts and match gateways
// are written in full, as they resolve in namespace ns.
func resolvedRoute(hr *networking.HTTPRoute, ns, domainSuffix string) *networking.HTTPRoute {
	out := proto.Clone(hr).(*networking.HTTPRoute)
	resolve := func(d *networking.Destination) {
		if d != nil {
			d.Host = ResolveHost(d.GetHost(), ns, domainSuffix)
		}
	}
	for _, rd := range out.GetRoute() {
		resolve(rd.GetDestination())
	}
	resolve(out.GetMirror())
	for _, m := range out.GetMirrors() {
		resolve(m.GetDestination())
	}
	for _, m := range out.GetMatch() {
		for i, g := range m.GetGateways() {
			m.Gateways[i] = resolveGatewayName(g, ns)
		}
	}
	return out
}

// mergeHTTPRoute merges a delegate route into its root route; nil when a
// match of the delegate falls within none of the root's. Neither argument
// is changed.
func mergeHTTPRoute(root, sub *networking.HTTPRoute) *networking.HTTPRoute {
	matches, ok := mergeMatches(root.GetMatch(), sub.GetMatch())
	if !ok {
		return nil
	}
	out := proto.Clone(sub).(*networking.HTTPRoute)
	out.Match = matches
	out.Name = joinNames(root.GetName(), sub.GetName())
	if out.Rewrite == nil {
		out.Rewrite = root.GetRewrite()
	}
	if out.DirectResponse == nil {
		out.DirectResponse = root.GetDirectResponse()
	}
	if out.Timeout == nil {
		out.Timeout = root.GetTimeout()
	}
	if out.Retries == nil {
		out.Retries = root.GetRetries()
	}
	if out.Fault == nil {
		out.Fault = root.GetFault()
	}
	if out.Mirror == nil {
		out.Mirror = root.GetMirror()
	}
	if out.MirrorPercent == nil {
		out.MirrorPercent = root.GetMirrorPercent()
	}
	if out.MirrorPercentage == nil {
		out.MirrorPercentage = root.GetMirrorPercentage()
	}
	if out.CorsPolicy == nil {
		out.CorsPolicy = root.GetCorsPolicy()
	}
	if out.Mirrors == nil {
		out.Mirrors = root.GetMirrors()
	}
	if out.Headers == nil {
		out.Headers = root.GetHeaders()
	}
	return out
}

// joinNames names a merged route or match: "root-delegate", or whichever
// is set.
func joinNames(root, sub string) string {
	switch {
	case sub == "":
		return root
	case root == "":
		return sub
	}
	return root + "-" + sub
}

// mergeMatches combines the root route's matches with the delegate's:
// every delegate match pairs with each root match it does not conflict
// with (the root holding as well). A delegate match that conflicts with
// every root match makes the whole delegate route fail (ok false), as in
// Istio. No matches on one side leave the other's as they are.
func mergeMatches(root, sub []*networking.HTTPMatchRequest) ([]*networking.HTTPMatchRequest, bool) {
	switch {
	case len(root) == 0:
		return sub, true
	case len(sub) == 0:
		return root, true
	}
	var out []*networking.HTTPMatchRequest
	for _, s := range sub {
		found := false
		for _, r := range root {
			if matchConflict(r, s) {
				continue
			}
			out = append(out, mergeMatch(r, s))
			found = true
		}
		if !found {
			return nil, false
		}
	}
	return out, len(out) > 0
}

// mergeMatch is the delegate match s constrained by the root match r: what
// s leaves unset comes from r, maps are joined (s wins on a shared key).
func mergeMatch(r, s *networking.HTTPMatchRequest) *networking.HTTPMatchRequest {
	out := proto.Clone(s).(*networking.HTTPMatchRequest)
	out.Name = joinNames(r.GetName(), s.GetName())
	if out.Uri == nil {
		out.Uri = r.GetUri()
	}
	if out.Scheme == nil {
		out.Scheme = r.GetScheme()
	}
	if out.Method == nil {
		out.Method = r.GetMethod()
	}
	if out.Authority == nil {
		out.Authority = r.GetAuthority()
	}
	out.Headers = joinMaps(r.GetHeaders(), s.GetHeaders())
	out.WithoutHeaders = joinMaps(r.GetWithoutHeaders(), s.GetWithoutHeaders())
	out.QueryParams = joinMaps(r.GetQueryParams(), s.GetQueryParams())
	out.SourceLabels = joinMaps(r.GetSourceLabels(), s.GetSourceLabels())
	if out.Port == 0 {
		out.Port = r.GetPort()
	}
	if out.SourceNamespace == "" {
		out.SourceNamespace = r.GetSourceNamespace()
	}
	if len(out.Gateways) == 0 {
		out.Gateways = r.GetGateways()
	}
	if out.StatPrefix == "" {
		out.StatPrefix = r.GetStatPrefix()
	}
	return out
}

// joinMaps is a copy of a with b's entries over it; nil when both are
// empty.
func joinMaps[V any](a, b map[string]V) map[string]V {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[string]V, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// matchConflict reports whether the delegate match s cannot fall within
// the root match r: a string match that is not narrower than the root's,
// another port, source namespace or source label value, different
// ignoreUriCase, or gateways the root does not list.
func matchConflict(r, s *networking.HTTPMatchRequest) bool {
	for _, p := range [][2]*networking.StringMatch{
		{r.GetUri(), s.GetUri()}, {r.GetScheme(), s.GetScheme()}, {r.GetMethod(), s.GetMethod()}, {r.GetAuthority(), s.GetAuthority()},
	} {
		if stringMatchConflict(p[0], p[1]) {
			return true
		}
	}
	for _, p := range []struct {
		root, sub map[string]*networking.StringMatch
	}{
		{r.GetHeaders(), s.GetHeaders()}, {r.GetWithoutHeaders(), s.GetWithoutHeaders()}, {r.GetQueryParams(), s.GetQueryParams()},
	} {
		for k, v := range p.sub {
			if stringMatchConflict(p.root[k], v) {
				return true
			}
		}
	}
	switch {
	case r.GetIgnoreUriCase() != s.GetIgnoreUriCase():
		return true
	case r.GetPort() > 0 && s.GetPort() > 0 && r.GetPort() != s.GetPort():
		return true
	case r.GetSourceNamespace() != "" && s.GetSourceNamespace() != r.GetSourceNamespace():
		return true
	}
	for k, v := range s.GetSourceLabels() {
		if rv, ok := r.GetSourceLabels()[k]; ok && rv != v {
			return true
		}
	}
	return gatewaysConflict(r.GetGateways(), s.GetGateways())
}

// gatewaysConflict: when both list gateways, the root must list every one
// of the delegate's.
func gatewaysConflict(root, sub []string) bool {
	if len(root) == 0 || len(sub) == 0 {
		return false
	}
	for _, g := range sub {
		if !containsString(root, g) {
			return true
		}
	}
	return false
}

// stringMatchConflict reports whether leaf is not known to be narrower
// than root: either unset is fine; a regex on either side conflicts with
// anything set on the other; under an exact root only the same exact
// value fits; under a prefix root an exact or prefix leaf must start with
// it.
func stringMatchConflict(root, leaf *networking.StringMatch) bool {
	if root == nil || leaf == nil {
		return false
	}
	if root.GetRegex() != "" && (leaf.GetRegex() != "" || leaf.GetPrefix() != "" || leaf.GetExact() != "") {
		return true
	}
	if leaf.GetRegex() != "" && (root.GetPrefix() != "" || root.GetExact() != "") {
		return true
	}
	if exact := root.GetExact(); exact != "" {
		return leaf.GetPrefix() != "" || leaf.GetExact() != exact
	}
	if prefix := root.GetPrefix(); prefix != "" {
		switch {
		case leaf.GetPrefix() != "":
			return !strings.HasPrefix(leaf.GetPrefix(), prefix)
		case leaf.GetExact() != "":
			return !strings.HasPrefix(leaf.GetExact(), prefix)
		}
	}
	return true
}
