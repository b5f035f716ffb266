package gen

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"google.golang.org/protobuf/types/known/emptypb"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	security "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// RequestAuthentication: JWT validation as istiod builds it.
//
// The JWT rules of every RequestAuthentication that applies to a workload
// (Istio's selection: the root namespace's and the workload's namespace's
// policies, by selector, or by targetRefs for Gateway API gateways),
// sorted by issuer, become one envoy.filters.http.jwt_authn filter on its
// HTTP chains (sidecar inbound, gateways), before the RBAC filters, as
// istiod places it (after ext_authz CUSTOM, before AUDIT/DENY/ALLOW; it
// emits no istio_authn filter any more: AuthorizationPolicy reads the
// payload jwt_authn writes to its dynamic metadata, authz_jwt.go):
//
//   - one provider per rule, named origins-<index>: issuer, audiences,
//     forward (forwardOriginalToken), forward_payload_header
//     (outputPayloadToHeader), claim_to_headers (outputClaimToHeaders),
//     from_headers/from_params/from_cookies (none: Envoy's defaults, the
//     Authorization Bearer header and access_token), payload_in_metadata
//     "payload", space-delimited claims scope and permission plus the
//     rule's spaceDelimitedClaims, clear_route_cache on gateways only;
//   - the key set inline (local_jwks), as istiod does by default
//     (PILOT_JWT_ENABLE_REMOTE_JWKS=false): the rule's jwks, else the key
//     set the control plane fetched from its jwksUri (or by OpenID
//     discovery from its issuer: pkg/jwks, a model input, World.JWKS),
//     else, when none could be fetched or none was yet, a key set whose
//     private key was discarded (istiod's PublicOnlyJwks): every token
//     is refused, requests without one go through. The rule's timeout
//     bounds the control plane's fetch;
//   - one requirement for every path (prefix /): a token, where present,
//     must be valid: one provider is {origins-0 OR allow_missing}; more
//     are {any single provider OR all of {provider OR allow_missing}},
//     so that providers sharing a location still pass; CORS preflights
//     bypass it.
//
// A request without a token passes (only an AuthorizationPolicy can
// require one); a request with an invalid one is refused (401).
//
// Proxyless gRPC servers have no jwt_authn (grpc-go implements RBAC,
// fault and router only, and would refuse the listener): there, what
// Istio would validate fails closed instead. An RBAC DENY filter,
// before every other RBAC filter as jwt_authn is, refuses (403) every
// request that carries a token in one of the locations of the rules:
//
//   - no fromHeaders/fromParams/fromCookies: Envoy's defaults, an
//     Authorization header starting "Bearer " (any case) and the
//     access_token query parameter;
//   - fromHeaders: the header (starting with its prefix, any case, when
//     one is given); fromParams: the query parameter (its name in any
//     case, letters percent-encoded or not); fromCookies: the cookie.
//
// There valid tokens are refused too, and the policy is logged as not
// supported for the workload (once per policy version).

// JWTFilter is the JWT filter's name, Istio's.
const JWTFilter = "envoy.filters.http.jwt_authn"

// jwtPayloadKey is where jwt_authn writes a validated token's payload in
// its dynamic metadata (Istio's filters.EnvoyJwtFilterPayload).
const jwtPayloadKey = "payload"

// PublicOnlyJwks is istiod's fail-closed key set (model.PublicOnlyJwks):
// an RSA public key whose private key was generated and discarded, so no
// token can validate against it.
const PublicOnlyJwks = `{
  "keys": [
    {
      "kty": "RSA",
      "e": "AQAB",
      "n": "0xObjM0UvS_oaazjpEYlAbwctEJ4L8pH3OuTb7qth7gUwqet-EzQB4dgFdvSdMgrLnSncQGRjpEYz3F3viIbH-3EN3TxSlPNviHxeOdyiBVfumN8dMxbLvVJUpfNOnvmMxJcl-8NNjAwcOjk4otSALaYgYYyOPyvKtgVdrQr-FoubWX4yrjxW-MJ2-7OBeepUUNOsVwGV23YX03sVkkyvY3otRflkBcY3_HKpBxJl9wk2GyOShN4_PNUF9-vwfnvOXMbCDX-w4PTef4geeb_GiT40YCKHTKMSPVanGRn5GExIWmki-mmqh94-mPTJyBR74ShspL3BxPZitDL574T1w"
    }
  ]
}`

// RequestAuthnFilter is the name of the fail-closed filter of proxyless
// gRPC servers.
const RequestAuthnFilter = "envoy.filters.http.rbac.requestauthn-failclosed"

// requestAuthnFields are the RequestAuthentication fields generation acts
// on: all but presence, which istiod (at the version discovery follows)
// does not read either, and targetRef(s) naming other than a Gateway API
// gateway (reported, as for AuthorizationPolicy).
var requestAuthnFields = newFieldSet(
	"selector", "jwtRules.issuer", "jwtRules.audiences", "jwtRules.jwksUri", "jwtRules.jwks",
	"jwtRules.fromHeaders", "jwtRules.fromParams", "jwtRules.fromCookies",
	"jwtRules.outputPayloadToHeader", "jwtRules.forwardOriginalToken", "jwtRules.outputClaimToHeaders",
	"jwtRules.timeout", "jwtRules.spaceDelimitedClaims",
)

// withRequestAuthn puts the JWT filter of the RequestAuthentications that
// apply to p before az's HTTP RBAC filters (for a proxyless gRPC server,
// the fail-closed filter).
func (g *Generator) withRequestAuthn(w *view, p *model.Proxy, az inboundAuthz) inboundAuthz {
	cs := g.requestAuthnConfigs(w, p)
	if len(cs) == 0 {
		return az
	}
	var ras []*securityv1.RequestAuthentication
	for _, c := range cs {
		ras = append(ras, c.Object.(*securityv1.RequestAuthentication))
	}
	var f *hcmv3.HttpFilter
	if p.IsGRPC() {
		for i, c := range cs {
			g.warnOnce(c, ras[i].ResourceVersion, "grpc:"+p.Namespace,
				"RequestAuthentication is not supported on proxyless gRPC servers (no jwt_authn); to fail closed, every request carrying a token is denied (403)",
				"namespace", p.Namespace)
		}
		f = requestAuthnFilter(ras)
	} else {
		f = jwtFilter(w, ras, p.Type != model.ProxySidecar)
	}
	if f == nil {
		return az
	}
	az.http = append([]*hcmv3.HttpFilter{f}, az.http...)
	return az
}

// requestAuthnConfigs are the RequestAuthentications that apply to p, in
// the World's order, with their unsupported fields reported.
func (g *Generator) requestAuthnConfigs(w *view, p *model.Proxy) []*model.Config {
	u := w.unrecorded()
	for _, c := range u.ConfigsIn(model.KindRequestAuthentication, rootNamespace(u), p.Namespace) {
		if ra, ok := c.Object.(*securityv1.RequestAuthentication); ok {
			g.warn(c, ra.ResourceVersion, &ra.Spec, requestAuthnFields)
		}
	}
	return w.ConfigsWhere(model.KindRequestAuthentication, func(u *view, c *model.Config) bool { return policyAttaches(u, c, p) })
}

// jwtFilter is istiod's jwt_authn filter for the rules of ras
// (convertToEnvoyJwtConfig); nil when they have none. clearRouteCache is
// set on gateways, where routes may match claims, as istiod sets it.
func jwtFilter(w *view, ras []*securityv1.RequestAuthentication, clearRouteCache bool) *hcmv3.HttpFilter {
	var rules []*security.JWTRule
	for _, ra := range ras {
		rules = append(rules, ra.Spec.GetJwtRules()...)
	}
	if len(rules) == 0 {
		return nil
	}
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].GetIssuer() < rules[j].GetIssuer() })
	providers := map[string]*jwtv3.JwtProvider{}
	var inner, outer []*jwtv3.JwtRequirement
	for i, r := range rules {
		name := fmt.Sprintf("origins-%d", i)
		providers[name] = jwtProvider(w, r, clearRouteCache)
		inner = append(inner, jwtAny(jwtProviderReq(name), &jwtv3.JwtRequirement{
			RequiresType: &jwtv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}},
		}))
		outer = append(outer, jwtProviderReq(name))
	}
	req := inner[0]
	if len(inner) > 1 {
		req = jwtAny(append(outer, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAll{
			RequiresAll: &jwtv3.JwtRequirementAndList{Requirements: inner},
		}})...)
	}
	cfg := &jwtv3.JwtAuthentication{
		Rules: []*jwtv3.RequirementRule{{
			Match:           &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			RequirementType: &jwtv3.RequirementRule_Requires{Requires: req},
		}},
		Providers:           providers,
		BypassCorsPreflight: true,
	}
	return &hcmv3.HttpFilter{Name: JWTFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(cfg)}}
}

func jwtProviderReq(name string) *jwtv3.JwtRequirement {
	return &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}}
}

func jwtAny(rs ...*jwtv3.JwtRequirement) *jwtv3.JwtRequirement {
	return &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{
		RequiresAny: &jwtv3.JwtRequirementOrList{Requirements: rs},
	}}
}

// jwtProvider is one rule's provider.
func jwtProvider(w *view, r *security.JWTRule, clearRouteCache bool) *jwtv3.JwtProvider {
	p := &jwtv3.JwtProvider{
		Issuer:               r.GetIssuer(),
		Audiences:            r.GetAudiences(),
		Forward:              r.GetForwardOriginalToken(),
		ForwardPayloadHeader: r.GetOutputPayloadToHeader(),
		PayloadInMetadata:    jwtPayloadKey,
		NormalizePayloadInMetadata: &jwtv3.JwtProvider_NormalizePayload{
			SpaceDelimitedClaims: spaceDelimitedClaims(r.GetSpaceDelimitedClaims()),
		},
		ClearRouteCache: clearRouteCache,
		FromParams:      r.GetFromParams(),
		FromCookies:     r.GetFromCookies(),
		JwksSourceSpecifier: &jwtv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{
			Specifier: &corev3.DataSource_InlineString{InlineString: ruleJWKS(w, r)},
		}},
	}
	for _, c := range r.GetOutputClaimToHeaders() {
		p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtv3.JwtClaimToHeader{HeaderName: c.GetHeader(), ClaimName: c.GetClaim()})
	}
	for _, h := range r.GetFromHeaders() {
		p.FromHeaders = append(p.FromHeaders, &jwtv3.JwtHeader{Name: h.GetName(), ValuePrefix: h.GetPrefix()})
	}
	return p
}

// spaceDelimitedClaims are scope and permission plus the rule's, sorted
// and without repeats when the rule names any (istiod's
// buildSpaceDelimitedClaims).
func spaceDelimitedClaims(extra []string) []string {
	if extra == nil {
		return []string{"permission", "scope"}
	}
	seen := map[string]bool{"permission": true, "scope": true}
	out := []string{"permission", "scope"}
	for _, c := range extra {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// RuleJWKS is the key set inlined for rule r: its jwks, else the one
// fetched for its issuer and jwksUri, else PublicOnlyJwks (fail closed).
func RuleJWKS(w *model.World, r *security.JWTRule) string { return ruleJWKS(newView(w, nil), r) }

func ruleJWKS(w *view, r *security.JWTRule) string {
	if r.GetJwks() != "" {
		return r.GetJwks()
	}
	if j := w.JWKS(r.GetIssuer(), r.GetJwksUri()); j != nil && !j.Failed && j.Keys != "" {
		return j.Keys
	}
	return PublicOnlyJwks
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
	case model.KindTrafficExtension:
		return "its extensions are not applied to any proxy"
	}
	return ""
}
