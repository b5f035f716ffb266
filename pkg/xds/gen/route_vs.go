package gen

import (
	"sort"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

// vsFields are the VirtualService fields generation acts on.
var vsFields = newFieldSet(
	"hosts", "gateways", "exportTo", "http.name", "http.delegate",
	"http.match.name", "http.match.uri", "http.match.headers", "http.match.withoutHeaders", "http.match.queryParams",
	"http.match.method", "http.match.authority", "http.match.scheme", "http.match.port", "http.match.gateways",
	"http.match.ignoreUriCase", "http.match.sourceLabels", "http.match.sourceNamespace",
	"http.route.destination", "http.route.weight", "http.route.headers",
	"http.redirect.uri", "http.redirect.authority", "http.redirect.port", "http.redirect.scheme", "http.redirect.redirectCode",
	"http.directResponse",
	"http.rewrite.uri", "http.rewrite.authority", "http.rewrite.uriRegexRewrite",
	"http.timeout", "http.retries.attempts", "http.retries.perTryTimeout", "http.retries.retryOn",
	"http.retries.retryIgnorePreviousHosts", "http.retries.backoff",
	"http.fault.delay.fixedDelay", "http.fault.delay.percentage", "http.fault.delay.percent",
	"http.fault.abort.httpStatus", "http.fault.abort.grpcStatus", "http.fault.abort.percentage",
	"http.mirror", "http.mirrors", "http.mirrorPercentage", "http.mirrorPercent",
	"http.corsPolicy.allowOrigins", "http.corsPolicy.allowOrigin", "http.corsPolicy.allowMethods",
	"http.corsPolicy.allowHeaders", "http.corsPolicy.exposeHeaders", "http.corsPolicy.maxAge",
	"http.corsPolicy.allowCredentials",
	"http.headers",
	// tcp and tls routes (listener_vs_tcp.go).
	"tcp.match.port", "tcp.match.destinationSubnets", "tcp.match.gateways",
	"tcp.match.sourceLabels", "tcp.match.sourceNamespace",
	"tcp.route.destination", "tcp.route.weight",
	"tls.match.sniHosts", "tls.match.port", "tls.match.destinationSubnets", "tls.match.gateways",
	"tls.match.sourceLabels", "tls.match.sourceNamespace",
	"tls.route.destination", "tls.route.weight",
)

// httpRoutes translates one http route into a route per match that can
// hold for this port, gateway and proxy (httpMatchHolds); none when no
// match can.
func (g *Generator) httpRoutes(sc *Scope, r httpRoute, host string, port int32, gateway string, tls bool) []*routev3.Route {
	hr := r.hr
	tmpl := &routev3.Route{Name: hr.GetName()}
	if tmpl.Name == "" {
		tmpl.Name = r.name
	}
	if !g.routeBody(sc, r.ns, hr, host, port, tls, tmpl) {
		return nil
	}
	if a := tmpl.GetRoute(); a != nil && r.gatewayAPI {
		// As istiod for routes of gateway semantics: a backend without
		// a cluster (not found, not permitted: gatewayapi's unresolved)
		// answers 500, as the Gateway API requires, not Envoy's 503.
		a.ClusterNotFoundResponseCode = routev3.RouteAction_INTERNAL_SERVER_ERROR
	}
	matches := hr.GetMatch()
	if len(matches) == 0 {
		matches = []*networking.HTTPMatchRequest{nil}
	}
	var out []*routev3.Route
	for _, m := range matches {
		if !sc.httpMatchHolds(m, r.ns, port, gateway) {
			continue
		}
		rt := proto.Clone(tmpl).(*routev3.Route)
		rt.Match = routeMatch(m)
		out = append(out, rt)
	}
	return out
}

// httpMatchHolds applies what of an http match is known when generating:
// the port; then, as Istio's sourceMatchHTTP does, the match's gateways
// when it lists some, else its sourceLabels (a subset of the proxy's pod
// labels) and sourceNamespace (the proxy's namespace). A nil match holds.
func httpMatchHolds(m *networking.HTTPMatchRequest, ns string, port int32, gateway string, p *model.Proxy) bool {
	if m == nil {
		return true
	}
	if m.GetPort() != 0 && int32(m.GetPort()) != port {
		return false
	}
	if gws := m.GetGateways(); len(gws) > 0 {
		return matchesGateway(gws, ns, gateway)
	}
	return sourceHolds(m.GetSourceLabels(), m.GetSourceNamespace(), p)
}

// httpMatchHolds is httpMatchHolds for the class's proxies, recording
// the namespace question a sourceNamespace asks (Scope.inNamespace).
func (sc *Scope) httpMatchHolds(m *networking.HTTPMatchRequest, ns string, port int32, gateway string) bool {
	sc.readSource(m)
	return httpMatchHolds(m, ns, port, gateway, sc.Proxy)
}

// readSource records that a match's sourceNamespace, if it has one, is
// compared with the class's namespace.
func (sc *Scope) readSource(m interface{ GetSourceNamespace() string }) {
	if ns := m.GetSourceNamespace(); ns != "" {
		sc.inNamespace(ns)
	}
}

// sourceHolds reports whether a match's sourceLabels and sourceNamespace
// select proxy p. Proxies of one class agree on it: the class carries the
// namespace and, through ClassKey, which sourceLabels selectors match.
// The namespace comparison is a read of the class's scope: callers that
// build a class record it (Scope.readSource).
func sourceHolds(labels map[string]string, ns string, p *model.Proxy) bool {
	return (ns == "" || ns == p.Namespace) && labelsMatch(labels, p.Metadata.Labels)
}

// matchesGateway reports whether one of gws, written in namespace ns,
// names gateway ("mesh" or namespace/name).
func matchesGateway(gws []string, ns, gateway string) bool {
	for _, g := range gws {
		if resolveGatewayName(g, ns) == gateway {
			return true
		}
	}
	return false
}

// routeBody fills r's action, headers and per-filter configuration from
// hr; it returns false when hr has nowhere to send requests. tls says
// the route serves a gateway server with TLS settings (istiod's IsTLS).
func (g *Generator) routeBody(sc *Scope, ns string, hr *networking.HTTPRoute, host string, port int32, tls bool, r *routev3.Route) bool {
	switch {
	case hr.GetRedirect() != nil:
		r.Action = &routev3.Route_Redirect{Redirect: redirect(hr.GetRedirect(), port, tls)}
	case hr.GetDirectResponse() != nil:
		r.Action = &routev3.Route_DirectResponse{DirectResponse: directResponse(hr.GetDirectResponse())}
	default:
		a := g.routeAction(sc, ns, hr, host, port)
		if a == nil {
			return false
		}
		r.Action = &routev3.Route_Route{Route: a}
	}
	if h := hr.GetHeaders(); h != nil {
		r.RequestHeadersToAdd, r.RequestHeadersToRemove = headerOps(h.GetRequest())
		r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = headerOps(h.GetResponse())
	}
	if ra := r.GetRoute(); ra != nil && len(hr.GetRoute()) == 1 {
		// One destination: its header operations apply to the route.
		if h := hr.GetRoute()[0].GetHeaders(); h != nil {
			add, rm := headerOps(h.GetRequest())
			r.RequestHeadersToAdd, r.RequestHeadersToRemove = append(r.RequestHeadersToAdd, add...), append(r.RequestHeadersToRemove, rm...)
			add, rm = headerOps(h.GetResponse())
			r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = append(r.ResponseHeadersToAdd, add...), append(r.ResponseHeadersToRemove, rm...)
		}
	}
	r.TypedPerFilterConfig = perFilterConfig(hr, !sc.Proxy.IsGRPC())
	return true
}

func (g *Generator) routeAction(sc *Scope, ns string, hr *networking.HTTPRoute, host string, port int32) *routev3.RouteAction {
	var wcs []*routev3.WeightedCluster_ClusterWeight
	var first *networking.TrafficPolicy
	for _, d := range hr.GetRoute() {
		dst := d.GetDestination()
		if dst == nil {
			continue
		}
		dhost, dport := destination(sc, ns, dst, host, port)
		w := d.GetWeight()
		if len(hr.GetRoute()) == 1 && w == 0 {
			w = 100
		}
		if w <= 0 {
			continue
		}
		if first == nil {
			first = sc.clusterPolicy(dhost, dst.GetSubset(), dport)
		}
		cw := &routev3.WeightedCluster_ClusterWeight{Name: ClusterName(dport, dst.GetSubset(), dhost), Weight: wrapperspb.UInt32(uint32(w))}
		if h := d.GetHeaders(); h != nil && len(hr.GetRoute()) > 1 {
			cw.RequestHeadersToAdd, cw.RequestHeadersToRemove = headerOps(h.GetRequest())
			cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove = headerOps(h.GetResponse())
		}
		wcs = append(wcs, cw)
	}
	var a *routev3.RouteAction
	switch len(wcs) {
	case 0:
		return nil
	case 1:
		a = &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: wcs[0].Name}}
	default:
		a = &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: wcs}}}
	}
	a.Timeout = durationpb.New(0)
	if t := hr.GetTimeout(); t != nil {
		a.Timeout = durationpb.New(t.AsDuration())
		if sc.Proxy.IsGRPC() {
			// grpc-go takes the deadline from max_stream_duration.
			a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(t.AsDuration())}
		}
	}
	a.HashPolicy = hashPolicy(first)
	rp := hr.GetRetries()
	if rp == nil {
		rp = meshRetry(sc.w)
	}
	a.RetryPolicy = retryPolicy(rp, len(hr.GetRoute()) == 1 && a.HashPolicy != nil)
	g.rewrite(a, hr)
	a.RequestMirrorPolicies = mirrors(sc, ns, hr, host, port)
	return a
}

// destination resolves a Destination without a port as Istio's
// GetDestinationCluster does: the service's only port, else the route's
// port (a sidecar's listener port; a gateway server's port, which need not
// be one of the service's).
func destination(sc *Scope, ns string, dst *networking.Destination, host string, port int32) (string, int32) {
	dhost := ResolveHost(dst.GetHost(), ns, sc.w.DomainSuffix)
	dport := int32(dst.GetPort().GetNumber())
	if dport == 0 {
		dport = port
		if s := sc.w.ServiceByHost(dhost); s != nil && len(s.Ports) == 1 {
			dport = s.Ports[0].Port
		}
	}
	return dhost, dport
}

func (g *Generator) rewrite(a *routev3.RouteAction, hr *networking.HTTPRoute) {
	rw := hr.GetRewrite()
	if rw == nil {
		return
	}
	if rw.GetUri() != "" {
		a.PrefixRewrite = rw.GetUri()
	}
	if rr := rw.GetUriRegexRewrite(); rr != nil {
		a.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: rr.GetMatch()}, Substitution: rr.GetRewrite()}
	}
	if rw.GetAuthority() != "" {
		a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.GetAuthority()}
	}
}

func mirrors(sc *Scope, ns string, hr *networking.HTTPRoute, host string, port int32) []*routev3.RouteAction_RequestMirrorPolicy {
	var out []*routev3.RouteAction_RequestMirrorPolicy
	add := func(dst *networking.Destination, pct *networking.Percent) {
		dhost, dport := destination(sc, ns, dst, host, port)
		mp := &routev3.RouteAction_RequestMirrorPolicy{Cluster: ClusterName(dport, dst.GetSubset(), dhost)}
		if pct != nil {
			mp.RuntimeFraction = &corev3.RuntimeFractionalPercent{DefaultValue: fraction(pct.GetValue())}
		}
		out = append(out, mp)
	}
	if m := hr.GetMirror(); m != nil {
		pct := hr.GetMirrorPercentage()
		if pct == nil && hr.GetMirrorPercent() != nil {
			pct = &networking.Percent{Value: float64(hr.GetMirrorPercent().GetValue())}
		}
		add(m, pct)
	}
	for _, m := range hr.GetMirrors() {
		if m.GetDestination() != nil {
			add(m.GetDestination(), m.GetPercentage())
		}
	}
	return out
}

// redirect is Envoy's form of an HTTPRedirect on a route of port, as
// istiod's ApplyRedirect: derivePort FROM_REQUEST_PORT becomes that port
// (Envoy cannot derive it; with a host_redirect it would drop the port),
// FROM_PROTOCOL_DEFAULT no port, and :80 for http or :443 for https is
// left out; the scheme defaults to https on a TLS server. prefixRewrite
// (set by Gateway API's ReplacePrefixMatch) wins over uri.
func redirect(rd *networking.HTTPRedirect, port int32, tls bool) *routev3.RedirectAction {
	ra := &routev3.RedirectAction{HostRedirect: rd.GetAuthority()}
	if rd.GetRedirectPort() != nil {
		switch {
		case rd.GetPort() != 0:
			ra.PortRedirect = rd.GetPort()
		case rd.GetDerivePort() == networking.HTTPRedirect_FROM_REQUEST_PORT:
			ra.PortRedirect = uint32(port)
		}
		scheme := rd.GetScheme()
		if scheme == "" {
			scheme = "http"
			if tls {
				scheme = "https"
			}
		}
		if (ra.PortRedirect == 80 && scheme == "http") || (ra.PortRedirect == 443 && scheme == "https") {
			ra.PortRedirect = 0
		}
	}
	switch {
	case rd.GetPrefixRewrite() != "":
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: rd.GetPrefixRewrite()}
	case rd.GetUri() != "":
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: rd.GetUri()}
	}
	if rd.GetScheme() != "" {
		ra.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: rd.GetScheme()}
	}
	switch rd.GetRedirectCode() {
	case 302:
		ra.ResponseCode = routev3.RedirectAction_FOUND
	case 303:
		ra.ResponseCode = routev3.RedirectAction_SEE_OTHER
	case 307:
		ra.ResponseCode = routev3.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		ra.ResponseCode = routev3.RedirectAction_PERMANENT_REDIRECT
	}
	return ra
}

func directResponse(dr *networking.HTTPDirectResponse) *routev3.DirectResponseAction {
	out := &routev3.DirectResponseAction{Status: dr.GetStatus()}
	switch {
	case dr.GetBody().GetString_() != "":
		out.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: dr.GetBody().GetString_()}}
	case len(dr.GetBody().GetBytes()) > 0:
		out.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: dr.GetBody().GetBytes()}}
	}
	return out
}

// headerOps turns set/add/remove into Envoy's header options, names
// sorted for stable output.
func headerOps(h *networking.Headers_HeaderOperations) ([]*corev3.HeaderValueOption, []string) {
	if h == nil {
		return nil, nil
	}
	var out []*corev3.HeaderValueOption
	for _, op := range []struct {
		kv     map[string]string
		action corev3.HeaderValueOption_HeaderAppendAction
	}{
		{h.GetSet(), corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		{h.GetAdd(), corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
	} {
		keys := make([]string, 0, len(op.kv))
		for k := range op.kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: op.kv[k]}, AppendAction: op.action})
		}
	}
	return out, h.GetRemove()
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
	if m.GetIgnoreUriCase() {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	for _, hs := range []struct {
		m      map[string]*networking.StringMatch
		invert bool
	}{{m.GetHeaders(), false}, {m.GetWithoutHeaders(), true}} {
		for _, k := range sortedKeys(hs.m) {
			if claims, ok := routingClaim(k); ok { // a JWT claim (route_vs_jwt.go)
				rm.DynamicMetadata = append(rm.DynamicMetadata, claimRouteMatch(claims, hs.m[k], hs.invert))
				continue
			}
			rm.Headers = append(rm.Headers, headerMatch(k, hs.m[k], hs.invert))
		}
	}
	for name, sm := range map[string]*networking.StringMatch{":method": m.GetMethod(), ":authority": m.GetAuthority(), ":scheme": m.GetScheme()} {
		if sm.GetMatchType() != nil {
			rm.Headers = append(rm.Headers, headerMatch(name, sm, false))
		}
	}
	sort.SliceStable(rm.Headers, func(i, j int) bool { return rm.Headers[i].Name < rm.Headers[j].Name })
	for _, k := range sortedKeys(m.GetQueryParams()) {
		qm := &routev3.QueryParameterMatcher{Name: k}
		if sm := stringMatcher(m.GetQueryParams()[k]); sm != nil {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: sm}
		} else {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	return rm
}

func sortedKeys(m map[string]*networking.StringMatch) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func stringMatcher(sm *networking.StringMatch) *matcherv3.StringMatcher {
	switch v := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v.Exact}}
	case *networking.StringMatch_Prefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v.Prefix}}
	case *networking.StringMatch_Regex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v.Regex}}}
	}
	return nil
}

// headerMatch matches a header's value, or its presence when sm sets no
// value (Istio's `{}`) or is the regex "*" (as Istio translates it);
// invert matches the opposite (withoutHeaders).
func headerMatch(name string, sm *networking.StringMatch, invert bool) *routev3.HeaderMatcher {
	hm := &routev3.HeaderMatcher{Name: name, InvertMatch: invert}
	if m := stringMatcher(sm); m != nil && sm.GetRegex() != "*" {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: m}
	} else {
		hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
	}
	return hm
}
