package gatewayapi

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

// translateGRPCRoute converts a GRPCRoute bound to a Gateway: its method
// and header matches become path and header matches (as istiod's
// createGRPCURIMatch), its filters the HTTPRoute's equivalents.
func (t *translator) translateGRPCRoute(r *gw.GRPCRoute) {
	t.translateRoute(r.Spec.ParentRefs, func(mesh bool) (*routeInfo, []string, []string) {
		ri := &routeInfo{
			ref:        Ref{Kind: KindGRPCRoute, Namespace: r.Namespace, Name: r.Name},
			generation: r.Generation, parents: r.Spec.ParentRefs, hostnames: r.Spec.Hostnames, resolvedOK: true,
		}
		var unsupported, denied []string
		for n, rr := range r.Spec.Rules {
			s := &ruleState{ri: ri, field: fmt.Sprintf("spec.rules[%d]", n), mesh: mesh}
			base := &networking.HTTPRoute{Name: r.Namespace + "." + r.Name + "." + strconv.Itoa(n)}
			if rr.Name != nil {
				base.Name = string(*rr.Name)
			}
			deny := ""
			for i, f := range rr.Filters {
				switch f.Type {
				case gw.GRPCRouteFilterRequestHeaderModifier:
					headers(base).Request = headerOps(f.RequestHeaderModifier)
				case gw.GRPCRouteFilterResponseHeaderModifier:
					headers(base).Response = headerOps(f.ResponseHeaderModifier)
				case gw.GRPCRouteFilterRequestMirror:
					if m := t.mirror(s, r.Namespace, f.RequestMirror); m != nil {
						base.Mirrors = append(base.Mirrors, m)
					}
				default:
					deny = fmt.Sprintf("%s.filters[%d]: filter %s is not supported by discovery yet; the rule answers 500", s.field, i, f.Type)
				}
			}
			if rr.SessionPersistence != nil {
				unsupported = append(unsupported, s.field+".sessionPersistence: not supported by discovery yet")
			}
			if deny != "" {
				unsupported, denied = append(unsupported, deny), append(denied, deny)
				base = &networking.HTTPRoute{Name: base.Name, DirectResponse: &networking.HTTPDirectResponse{Status: 500}}
			} else {
				var u, d []string
				base.Route, u, d = t.grpcDestinations(s, r.Namespace, rr.BackendRefs)
				unsupported, denied = append(unsupported, u...), append(denied, d...)
				if len(base.Route) == 0 {
					base.Route, base.Mirrors, base.DirectResponse = nil, nil, &networking.HTTPDirectResponse{Status: 500}
				}
			}
			if len(rr.Matches) == 0 {
				ri.rules = append(ri.rules, &rule{route: base})
			}
			for _, m := range rr.Matches {
				hr := cloneRoute(base)
				hr.Match = []*networking.HTTPMatchRequest{grpcMatch(m)}
				ri.rules = append(ri.rules, &rule{route: hr})
			}
		}
		if len(denied) > 0 {
			ri.partial = "rules answer 500 where discovery cannot apply a filter: " + strings.Join(denied, "; ")
		}
		return ri, unsupported, denied
	})
}

// grpcMatch converts a method match to a path match: Exact service and
// method /S/M exactly, service only the prefix /S/, method only the
// regex /[^/]+/M; RegularExpression the regex /S/M with .+ for what is
// not given.
func grpcMatch(m gw.GRPCRouteMatch) *networking.HTTPMatchRequest {
	out := &networking.HTTPMatchRequest{}
	if mm := m.Method; mm != nil {
		svc, method := ptrOr(mm.Service, ""), ptrOr(mm.Method, "")
		if ptrOr(mm.Type, gw.GRPCMethodMatchExact) == gw.GRPCMethodMatchRegularExpression {
			if svc == "" {
				svc = ".+"
			}
			if method == "" {
				method = ".+"
			}
			out.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/" + svc + "/" + method}}
		} else {
			switch {
			case svc != "" && method != "":
				out.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "/" + svc + "/" + method}}
			case svc != "":
				out.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/" + svc + "/"}}
			case method != "":
				out.Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/[^/]+/" + regexp.QuoteMeta(method)}}
			}
		}
	}
	for _, h := range m.Headers {
		if out.Headers == nil {
			out.Headers = map[string]*networking.StringMatch{}
		}
		name := strings.ToLower(string(h.Name))
		if _, dup := out.Headers[name]; !dup {
			out.Headers[name] = stringMatch(ptrOr(h.Type, gw.GRPCHeaderMatchExact) == gw.GRPCHeaderMatchRegularExpression, h.Value)
		}
	}
	return out
}
