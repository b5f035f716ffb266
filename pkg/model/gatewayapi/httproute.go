package gatewayapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

// rule is one Istio HTTPRoute made from one match of a Gateway API rule.
type rule struct {
	route *networking.HTTPRoute
	// prefix is set for a PathPrefix match other than "/": emitted as an
	// Exact match on it and a Prefix match on prefix + "/" (segment
	// semantics without istiod's gateway route mode).
	prefix string
	// rewritePrefix and redirectPrefix are a ReplacePrefixMatch to apply
	// to each of the two.
	rewritePrefix, redirectPrefix *string
}

// ruleState collects what converting one route found.
type ruleState struct {
	ri    *routeInfo
	field string
	// mesh: the rules are for Service parents, whose backendRefs are
	// not held to ReferenceGrants (istiod's enforceRefGrant is !mesh).
	mesh bool
}

func (s *ruleState) unresolved(reason, msg string) {
	if s.ri.resolvedOK {
		s.ri.resolvedOK, s.ri.resolvedReason, s.ri.resMsg = false, reason, msg
	}
}

func (t *translator) translateHTTPRoute(r *gw.HTTPRoute) {
	t.translateRoute(r.Spec.ParentRefs, func(mesh bool) (*routeInfo, []string, []string) {
		ri := &routeInfo{
			ref:        Ref{Kind: KindHTTPRoute, Namespace: r.Namespace, Name: r.Name},
			generation: r.Generation, parents: r.Spec.ParentRefs, hostnames: r.Spec.Hostnames, resolvedOK: true,
		}
		var unsupported, denied []string
		for n, rr := range r.Spec.Rules {
			s := &ruleState{ri: ri, field: fmt.Sprintf("spec.rules[%d]", n), mesh: mesh}
			rules, u, d := t.httpRule(s, r.Namespace, r.Name, n, rr)
			ri.rules = append(ri.rules, rules...)
			unsupported, denied = append(unsupported, u...), append(denied, d...)
		}
		if len(denied) > 0 {
			ri.partial = "rules answer 500 where discovery cannot apply a filter: " + strings.Join(denied, "; ")
		}
		return ri, unsupported, denied
	})
}

// httpRule converts one HTTPRoute rule: one Istio route per match (istiod
// splits them the same way, so that each sorts on its own).
func (t *translator) httpRule(s *ruleState, ns, name string, n int, r gw.HTTPRouteRule) (out []*rule, unsupported, denied []string) {
	base := &networking.HTTPRoute{Name: ns + "." + name + "." + strconv.Itoa(n)}
	if r.Name != nil {
		base.Name = string(*r.Name)
	}
	var rewritePrefix, redirectPrefix *string
	for i, f := range r.Filters {
		field := fmt.Sprintf("%s.filters[%d]", s.field, i)
		switch f.Type {
		case gw.HTTPRouteFilterRequestHeaderModifier:
			headers(base).Request = headerOps(f.RequestHeaderModifier)
		case gw.HTTPRouteFilterResponseHeaderModifier:
			headers(base).Response = headerOps(f.ResponseHeaderModifier)
		case gw.HTTPRouteFilterRequestRedirect:
			base.Redirect, redirectPrefix = redirect(f.RequestRedirect)
		case gw.HTTPRouteFilterURLRewrite:
			base.Rewrite, rewritePrefix = rewrite(f.URLRewrite)
		case gw.HTTPRouteFilterRequestMirror:
			if m := t.mirror(s, ns, f.RequestMirror); m != nil {
				base.Mirrors = append(base.Mirrors, m)
			}
		default:
			// Unknown to discovery: ExtensionRef, ExternalAuth, CORS. The
			// spec: a filter that cannot be applied must not be skipped;
			// the requests it would have handled get an error. For
			// ExternalAuth skipping would also let unauthenticated
			// requests through.
			d := fmt.Sprintf("%s: filter %s is not supported by discovery yet; the rule answers 500", field, f.Type)
			denied = append(denied, d)
			unsupported = append(unsupported, d)
			base = &networking.HTTPRoute{Name: base.Name, DirectResponse: &networking.HTTPDirectResponse{Status: 500}}
			return expandMatches(base, r.Matches, nil, nil), unsupported, denied
		}
	}
	if r.SessionPersistence != nil {
		unsupported = append(unsupported, s.field+".sessionPersistence: not supported by discovery yet")
	}
	retries(base, r.Retry)
	timeouts(base, r.Timeouts)
	if base.Redirect == nil {
		var u, d []string
		base.Route, u, d = t.httpDestinations(s, ns, r.BackendRefs)
		unsupported, denied = append(unsupported, u...), append(denied, d...)
		if len(base.Route) == 0 {
			// The spec: no backend (or only weight 0, or only invalid ones)
			// answers 500.
			base.Route, base.DirectResponse = nil, &networking.HTTPDirectResponse{Status: 500}
			base.Mirrors, base.Rewrite, base.Retries, base.Timeout = nil, nil, nil, nil
		}
	}
	return expandMatches(base, r.Matches, rewritePrefix, redirectPrefix), unsupported, denied
}

// expandMatches makes one rule per match of base (one catch-all rule
// when there are none).
func expandMatches(base *networking.HTTPRoute, ms []gw.HTTPRouteMatch, rewritePrefix, redirectPrefix *string) []*rule {
	if len(ms) == 0 {
		return []*rule{{route: base}}
	}
	out := make([]*rule, 0, len(ms))
	for _, m := range ms {
		hr := cloneRoute(base)
		im, prefix := httpMatch(m)
		hr.Match = []*networking.HTTPMatchRequest{im}
		out = append(out, &rule{route: hr, prefix: prefix, rewritePrefix: rewritePrefix, redirectPrefix: redirectPrefix})
	}
	return out
}

// httpMatch converts one match; prefix is the PathPrefix value when it is
// not "/" (trailing "/" dropped: "When specified, a trailing / is
// ignored").
func httpMatch(m gw.HTTPRouteMatch) (*networking.HTTPMatchRequest, string) {
	out := &networking.HTTPMatchRequest{}
	typ, value := gw.PathMatchPathPrefix, "/"
	if m.Path != nil {
		typ, value = ptrOr(m.Path.Type, gw.PathMatchPathPrefix), ptrOr(m.Path.Value, "/")
	}
	prefix := ""
	switch typ {
	case gw.PathMatchExact:
		out.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: value}}
	case gw.PathMatchRegularExpression:
		out.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: value}}
	default:
		if value != "/" {
			value = strings.TrimSuffix(value, "/")
			prefix = value
		}
		out.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: value}}
	}
	for _, h := range m.Headers {
		if out.Headers == nil {
			out.Headers = map[string]*networking.StringMatch{}
		}
		name := strings.ToLower(string(h.Name))
		if _, dup := out.Headers[name]; dup {
			continue // "the first entry with an equivalent name MUST be considered"
		}
		out.Headers[name] = stringMatch(ptrOr(h.Type, gw.HeaderMatchExact) == gw.HeaderMatchRegularExpression, h.Value)
	}
	for _, q := range m.QueryParams {
		if out.QueryParams == nil {
			out.QueryParams = map[string]*networking.StringMatch{}
		}
		if _, dup := out.QueryParams[string(q.Name)]; dup {
			continue
		}
		out.QueryParams[string(q.Name)] = stringMatch(ptrOr(q.Type, gw.QueryParamMatchExact) == gw.QueryParamMatchRegularExpression, q.Value)
	}
	if m.Method != nil {
		out.Method = &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: string(*m.Method)}}
	}
	return out, prefix
}

func stringMatch(regex bool, v string) *networking.StringMatch {
	if regex {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: v}}
	}
	return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: v}}
}

func headers(r *networking.HTTPRoute) *networking.Headers {
	if r.Headers == nil {
		r.Headers = &networking.Headers{}
	}
	return r.Headers
}

// headerOps converts a header modifier; of headers named twice the first
// counts ("Subsequent entries with an equivalent header name MUST be
// ignored").
func headerOps(f *gw.HTTPHeaderFilter) *networking.Headers_HeaderOperations {
	if f == nil {
		return nil
	}
	toMap := func(hs []gw.HTTPHeader) map[string]string {
		if len(hs) == 0 {
			return nil
		}
		m := map[string]string{}
		for _, h := range hs {
			k := strings.ToLower(string(h.Name))
			if _, ok := m[k]; !ok {
				m[k] = h.Value
			}
		}
		return m
	}
	return &networking.Headers_HeaderOperations{Set: toMap(f.Set), Add: toMap(f.Add), Remove: f.Remove}
}

// redirect converts RequestRedirect as istiod's createRedirectFilter; a
// ReplacePrefixMatch is returned to be applied per expanded match.
func redirect(f *gw.HTTPRequestRedirectFilter) (*networking.HTTPRedirect, *string) {
	if f == nil {
		return nil, nil
	}
	out := &networking.HTTPRedirect{RedirectCode: uint32(ptrOr(f.StatusCode, 302))}
	if f.Hostname != nil {
		out.Authority = string(*f.Hostname)
	}
	if f.Scheme != nil {
		out.Scheme = *f.Scheme
	}
	switch {
	case f.Port != nil:
		out.RedirectPort = &networking.HTTPRedirect_Port{Port: uint32(*f.Port)}
	case f.Scheme != nil:
		out.RedirectPort = &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_PROTOCOL_DEFAULT}
	default:
		out.RedirectPort = &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_REQUEST_PORT}
	}
	var prefix *string
	if f.Path != nil {
		switch f.Path.Type {
		case gw.FullPathHTTPPathModifier:
			out.Uri = ptrOr(f.Path.ReplaceFullPath, "/")
		case gw.PrefixMatchHTTPPathModifier:
			prefix = f.Path.ReplacePrefixMatch
		}
	}
	return out, prefix
}

// rewrite converts URLRewrite as istiod's createRewriteFilter.
func rewrite(f *gw.HTTPURLRewriteFilter) (*networking.HTTPRewrite, *string) {
	if f == nil {
		return nil, nil
	}
	out := &networking.HTTPRewrite{}
	var prefix *string
	if f.Path != nil {
		switch f.Path.Type {
		case gw.FullPathHTTPPathModifier:
			out.UriRegexRewrite = &networking.RegexRewrite{Match: "/.*", Rewrite: ptrOr(f.Path.ReplaceFullPath, "/")}
		case gw.PrefixMatchHTTPPathModifier:
			prefix = f.Path.ReplacePrefixMatch
		}
	}
	if f.Hostname != nil {
		out.Authority = string(*f.Hostname)
	}
	return out, prefix
}

// retries converts retry as istiod does.
func retries(r *networking.HTTPRoute, rt *gw.HTTPRouteRetry) {
	if rt == nil {
		return
	}
	on := []string{"connect-failure", "refused-stream", "unavailable", "cancelled"}
	for _, c := range rt.Codes {
		on = append(on, strconv.Itoa(int(c)))
	}
	r.Retries = &networking.HTTPRetry{Attempts: int32(ptrOr(rt.Attempts, 2)), RetryOn: strings.Join(on, ",")}
	if r.Retries.Attempts == 0 {
		r.Retries.RetryOn = ""
	}
	if rt.Backoff != nil {
		if d, err := time.ParseDuration(string(*rt.Backoff)); err == nil {
			r.Retries.Backoff = durationpb.New(d)
		}
	}
}

// timeouts converts timeouts as istiod does: backendRequest is the per
// try timeout when retrying, else the route's.
func timeouts(r *networking.HTTPRoute, to *gw.HTTPRouteTimeouts) {
	if to == nil {
		return
	}
	if to.Request != nil {
		if d, err := time.ParseDuration(string(*to.Request)); err == nil && d != 0 {
			r.Timeout = durationpb.New(d)
		}
	}
	if to.BackendRequest != nil {
		if d, err := time.ParseDuration(string(*to.BackendRequest)); err == nil && d != 0 {
			if r.Retries != nil {
				r.Retries.PerTryTimeout = durationpb.New(d)
			} else {
				r.Timeout = durationpb.New(d)
			}
		}
	}
}
