package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
)

// jwtFacts are what a jwt_authn filter decides about a request: one fact
// per provider with everything that changes which tokens it accepts,
// where it looks for them and what it does with a valid one (the key set
// by digest), and one for the requirement of each rule. No matrix request
// carries a token, so the facts, not a verdict, are compared.
func jwtFacts(j *jwtv3.JwtAuthentication) []string {
	var out []string
	names := make([]string, 0, len(j.GetProviders()))
	for n := range j.GetProviders() {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := j.GetProviders()[n]
		var loc []string
		for _, h := range p.GetFromHeaders() {
			loc = append(loc, "header:"+h.GetName()+"+"+fmt.Sprintf("%q", h.GetValuePrefix()))
		}
		for _, q := range p.GetFromParams() {
			loc = append(loc, "param:"+q)
		}
		for _, c := range p.GetFromCookies() {
			loc = append(loc, "cookie:"+c)
		}
		var claims []string
		for _, c := range p.GetClaimToHeaders() {
			claims = append(claims, c.GetClaimName()+">"+c.GetHeaderName())
		}
		jwks := "remote:" + p.GetRemoteJwks().GetHttpUri().GetUri()
		if l := p.GetLocalJwks(); l != nil {
			sum := sha256.Sum256([]byte(l.GetInlineString()))
			jwks = "inline:" + hex.EncodeToString(sum[:6])
		}
		out = append(out, fmt.Sprintf("jwt provider %s issuer=%s audiences=[%s] jwks=%s locations=[%s] forward=%v payload_header=%q claim_headers=[%s] metadata=%q space_delimited=[%s] clear_route_cache=%v",
			n, p.GetIssuer(), strings.Join(p.GetAudiences(), " "), jwks, strings.Join(loc, " "), p.GetForward(), p.GetForwardPayloadHeader(),
			strings.Join(claims, " "), p.GetPayloadInMetadata(), strings.Join(p.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims(), " "), p.GetClearRouteCache()))
	}
	for _, r := range j.GetRules() {
		m := r.GetMatch()
		out = append(out, fmt.Sprintf("jwt rule prefix=%q path=%q requires %s", m.GetPrefix(), m.GetPath(), jwtRequirement(r.GetRequires())))
	}
	out = append(out, fmt.Sprintf("jwt bypass_cors_preflight=%v", j.GetBypassCorsPreflight()))
	return out
}

// jwtRequirement writes a requirement tree, lists in order.
func jwtRequirement(q *jwtv3.JwtRequirement) string {
	list := func(op string, rs []*jwtv3.JwtRequirement) string {
		parts := make([]string, 0, len(rs))
		for _, r := range rs {
			parts = append(parts, jwtRequirement(r))
		}
		return op + "(" + strings.Join(parts, ", ") + ")"
	}
	switch x := q.GetRequiresType().(type) {
	case *jwtv3.JwtRequirement_ProviderName:
		return x.ProviderName
	case *jwtv3.JwtRequirement_ProviderAndAudiences:
		return x.ProviderAndAudiences.GetProviderName() + "[" + strings.Join(x.ProviderAndAudiences.GetAudiences(), " ") + "]"
	case *jwtv3.JwtRequirement_RequiresAny:
		return list("any", x.RequiresAny.GetRequirements())
	case *jwtv3.JwtRequirement_RequiresAll:
		return list("all", x.RequiresAll.GetRequirements())
	case *jwtv3.JwtRequirement_AllowMissing:
		return "allow_missing"
	case *jwtv3.JwtRequirement_AllowMissingOrFailed:
		return "allow_missing_or_failed"
	case nil:
		return "none"
	}
	return fmt.Sprintf("%T", q.GetRequiresType())
}
