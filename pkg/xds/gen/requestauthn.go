package gen

import (
	"fmt"
	"regexp"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	security "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// RequestAuthentication fails closed until discovery validates JWTs.
//
// Istio's RequestAuthentication makes the selected workloads reject (401)
// a request whose token, in any of the rules' token locations, does not
// validate, and lets through a request that carries no token (only an
// AuthorizationPolicy can require one). Discovery does not build
// jwt_authn yet. Ignoring the policy would fail open: a forged token
// would reach a workload that trusts its mesh to have checked it. So, on
// every HTTP chain of a workload that a RequestAuthentication selects
// (Istio's selection: the root namespace's and the workload's namespace's
// policies, by selector, or by targetRefs for Gateway API gateways), an
// RBAC DENY filter, before every other RBAC filter as jwt_authn is,
// refuses (403) every request that carries a token in one of the
// locations of the policies' rules:
//
//   - no fromHeaders/fromParams/fromCookies: Envoy's defaults, an
//     Authorization header starting "Bearer " (any case) and the
//     access_token query parameter;
//   - fromHeaders: the header (starting with its prefix, any case, when
//     one is given); fromParams: the query parameter (its name in any
//     case, letters percent-encoded or not); fromCookies: the cookie.
//
// Requests without a token are treated as Istio treats them (allowed
// here; AuthorizationPolicy requestPrincipals and request.auth.* already
// fail closed, authz.go). Valid tokens are refused too: that is the cost
// of never letting an invalid one through. TCP chains are unaffected, as
// in Istio. The policy is reported as unsupported (webhook warning,
// status condition, metric, log: UnreadKindNote).

// RequestAuthnFilter is the name of the fail-closed filter.
const RequestAuthnFilter = "envoy.filters.http.rbac.requestauthn-failclosed"

// requestAuthentications are the RequestAuthentications that apply to p's
// workload, in the World's order (namespace, name).
func requestAuthentications(w *model.World, p *model.Proxy) []*securityv1.RequestAuthentication {
	var out []*securityv1.RequestAuthentication
	for _, c := range w.Configs(model.KindRequestAuthentication) {
		if c.Key.Namespace != RootNamespace(w) && c.Key.Namespace != p.Namespace {
			continue
		}
		ra, ok := c.Object.(*securityv1.RequestAuthentication)
		if !ok {
			continue
		}
		sel := &security.AuthorizationPolicy{Selector: ra.Spec.GetSelector(), TargetRef: ra.Spec.GetTargetRef(), TargetRefs: ra.Spec.GetTargetRefs()}
		if attaches(c.Key.Namespace, sel, p) {
			out = append(out, ra)
		}
	}
	return out
}

// withRequestAuthn puts the fail-closed filter of the RequestAuthentications
// that apply to p before az's HTTP RBAC filters.
func (g *Generator) withRequestAuthn(w *model.World, p *model.Proxy, az inboundAuthz) inboundAuthz {
	ras := requestAuthentications(w, p)
	if len(ras) == 0 {
		return az
	}
	az.http = append([]*hcmv3.HttpFilter{requestAuthnFilter(ras)}, az.http...)
	return az
}

// requestAuthnFilter denies every request that carries a token where one
// of ras's rules would look for it.
func requestAuthnFilter(ras []*securityv1.RequestAuthentication) *hcmv3.HttpFilter {
	seen := map[string]bool{}
	var ids []*rbacv3.Principal
	add := func(h *routev3.HeaderMatcher) {
		key := h.String()
		if !seen[key] {
			seen[key] = true
			ids = append(ids, &rbacv3.Principal{Identifier: &rbacv3.Principal_Header{Header: h}})
		}
	}
	for _, ra := range ras {
		for _, r := range ra.Spec.GetJwtRules() {
			for _, h := range tokenLocations(r) {
				add(h)
			}
		}
	}
	if len(ids) == 0 {
		// A policy without rules looks for no token: deny nothing.
		ids = []*rbacv3.Principal{{Identifier: &rbacv3.Principal_NotId{NotId: &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}}}}
	}
	policy := &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}},
		Principals:  []*rbacv3.Principal{anyOfIDs(ids)},
	}
	return &hcmv3.HttpFilter{Name: RequestAuthnFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{
		TypedConfig: mustAny(&httprbacv3.RBAC{Rules: &rbacv3.RBAC{
			Action:   rbacv3.RBAC_DENY,
			Policies: map[string]*rbacv3.Policy{"requestauthn-token-not-validated": policy},
		}}),
	}}
}

// tokenLocations are the header matchers that match a request carrying a
// token where rule r looks for one.
func tokenLocations(r *security.JWTRule) []*routev3.HeaderMatcher {
	var out []*routev3.HeaderMatcher
	if len(r.GetFromHeaders())+len(r.GetFromParams())+len(r.GetFromCookies()) == 0 {
		return []*routev3.HeaderMatcher{
			headerPrefix("authorization", "Bearer "),
			queryParam("access_token"),
		}
	}
	for _, h := range r.GetFromHeaders() {
		out = append(out, headerPrefix(h.GetName(), h.GetPrefix()))
	}
	for _, q := range r.GetFromParams() {
		out = append(out, queryParam(q))
	}
	for _, c := range r.GetFromCookies() {
		out = append(out, &routev3.HeaderMatcher{Name: "cookie", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
			StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
				Regex: `(.*;)?\s*` + regexp.QuoteMeta(c) + `=.*`,
			}}},
		}})
	}
	return out
}

// headerPrefix matches header name when present (its value starting with
// prefix, in any case, when prefix is set).
func headerPrefix(name, prefix string) *routev3.HeaderMatcher {
	name = strings.ToLower(name)
	if prefix == "" {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	}
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}, IgnoreCase: true},
	}}
}

// queryParam matches a :path whose query string has parameter name, its
// letters in any case and any character possibly percent-encoded, so that
// no spelling a backend would decode to name gets past.
func queryParam(name string) *routev3.HeaderMatcher {
	var b strings.Builder
	for _, c := range []byte(name) {
		fmt.Fprintf(&b, "(?:%s|%%%02[2]X|%%%02[2]x)", regexp.QuoteMeta(string(c)), c)
	}
	return &routev3.HeaderMatcher{Name: ":path", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
			Regex: `(?i)[^?]*\?(?:.*&)?` + b.String() + `(?:=.*|&.*)?`,
		}}},
	}}
}

// UnreadKindNote says what discovery does with an Istio kind whose
// semantics it does not implement (ReadsKind false), for the reports of
// unsupported config; "" when the kind simply has no effect.
func UnreadKindNote(kind model.Kind) string {
	switch kind {
	case model.KindRequestAuthentication:
		return "JWTs are not validated yet; to fail closed, every HTTP request that carries a token where the policy's rules look for one is denied (403) on the workloads it selects, valid tokens included; requests without a token are let through, as Istio does"
	case model.KindEnvoyFilter, model.KindWasmPlugin, model.KindTrafficExtension:
		return "its patches and extensions are not applied to any proxy"
	case model.KindWorkloadGroup:
		return "no WorkloadEntry is registered for proxies of the group; WorkloadEntries written by hand are served"
	case model.KindProxyConfig:
		return "its settings (concurrency, image, environment variables) are not applied to proxies"
	}
	return ""
}
