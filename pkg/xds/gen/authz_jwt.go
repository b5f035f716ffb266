package gen

import (
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// AuthorizationPolicy on validated JWTs, as Istio translates it (its
// authz model's requestPrincipalGenerator, requestAudiencesGenerator,
// requestPresenterGenerator, requestClaimGenerator): every one is a
// principal matching the dynamic metadata that jwt_authn writes for a
// validated token (filter envoy.filters.http.jwt_authn, key "payload",
// authn_jwt.go), so it holds only for a token a RequestAuthentication
// validated:
//
//	requestPrincipals, request.auth.principal   iss AND sub of the payload;
//	                                            "ISS/SUB" split at the last
//	                                            "/", with Istio's * forms
//	request.auth.audiences                      aud (a string or one of a list)
//	request.auth.presenter                      azp (likewise)
//	request.auth.claims[A][B]...                payload.A.B (likewise)
//
// notRequestPrincipals and notValues negate them. They are HTTP only: on
// a TCP chain the rule is left out (ALLOW) or enforced without them
// (DENY), as in Istio. Proxyless gRPC servers validate no JWT (and
// grpc-go's RBAC matches no metadata): there they are unsupported and
// fail closed (authz.go).

// jwtClaim matches claim path (under the payload) with v.
func jwtClaim(path []string, v *matcherv3.ValueMatcher) *rbacv3.Principal {
	segs := make([]*matcherv3.MetadataMatcher_PathSegment, 0, len(path)+1)
	for _, k := range append([]string{jwtPayloadKey}, path...) {
		segs = append(segs, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: k}})
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Metadata{Metadata: &matcherv3.MetadataMatcher{
		Filter: JWTFilter, Path: segs, Value: v,
	}}}
}

func stringValue(m *matcherv3.StringMatcher) *matcherv3.ValueMatcher {
	return &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: m}}
}

// jwtListClaim matches a claim that is one of vals, or a list holding
// one of them (Istio's MetadataListValueMatcherForJWTClaims with
// StringOrMatcher).
func jwtListClaim(path []string, vals []string) *rbacv3.Principal {
	ms := make([]*matcherv3.ValueMatcher, 0, len(vals))
	for _, v := range vals {
		ms = append(ms, stringValue(wildcard(v, "")))
	}
	v := ms[0]
	if len(ms) > 1 {
		v = &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{ValueMatchers: ms}}}
	}
	return jwtClaim(path, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{
		ValueMatchers: []*matcherv3.ValueMatcher{
			{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{
				MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: v},
			}}},
			v,
		},
	}}})
}

var jwtMatchAny = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}}

// requestPrincipalID matches one request principal value, ISS/SUB.
func requestPrincipalID(value string) *rbacv3.Principal {
	idx := strings.LastIndex(value, "/")
	found := idx >= 0
	iss, sub := value, ""
	if found {
		iss, sub = value[:idx], value[idx+1:]
	}
	ex := func(s string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
	}
	var mi, ms *matcherv3.StringMatcher
	switch {
	case value == "*":
		mi, ms = jwtMatchAny, jwtMatchAny
	case strings.HasPrefix(value, "*"):
		if found {
			mi = jwtMatchAny
			if iss != "*" {
				mi = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(iss, "*")}}
			}
			ms = ex(sub)
		} else {
			mi = jwtMatchAny
			ms = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(value, "*")}}
		}
	case strings.HasSuffix(value, "*"):
		if found {
			mi = ex(iss)
			ms = jwtMatchAny
			if sub != "*" {
				ms = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(sub, "*")}}
			}
		} else {
			mi = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(value, "*")}}
			ms = jwtMatchAny
		}
	default:
		mi, ms = ex(iss), ex(sub)
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: []*rbacv3.Principal{
		jwtClaim([]string{"iss"}, stringValue(mi)), jwtClaim([]string{"sub"}, stringValue(ms)),
	}}}}
}

// requestPrincipals matches any of vals (field names them for the log);
// nil for none, or where no JWT can be checked (the rule is marked).
func (b *ruleBuilder) requestPrincipals(field string, vals []string) []*rbacv3.Principal {
	if len(vals) == 0 {
		return nil
	}
	if b.noJWT {
		b.unsupportedPart(field + " (proxyless gRPC validates no JWT)")
		return nil
	}
	if b.tcp {
		b.skip() // HTTP only, as in Istio: not a gap
		return nil
	}
	return mapIDs(vals, requestPrincipalID)
}

// jwtCondition translates a request.auth.* when key; ok is false for
// other keys. A malformed claims key fails closed like an unknown key.
func (b *ruleBuilder) jwtCondition(key string, vals []string) (ids []*rbacv3.Principal, ok bool) {
	var path []string
	switch {
	case key == "request.auth.principal":
		if x := b.requestPrincipals("when request.auth.principal", vals); x != nil {
			// One principal: the OR of the values (Istio's extended
			// generator), so that notValues negate the OR.
			return []*rbacv3.Principal{anyOfIDs(x)}, true
		}
		return nil, true
	case key == "request.auth.audiences":
		path = []string{"aud"}
	case key == "request.auth.presenter":
		path = []string{"azp"}
	case strings.HasPrefix(key, "request.auth.claims"):
		claims, good := claimPath(strings.TrimPrefix(key, "request.auth.claims"))
		if !good {
			return nil, false
		}
		path = claims
	default:
		return nil, false
	}
	if b.noJWT {
		name, _, _ := strings.Cut(key, "[")
		if strings.HasPrefix(key, "request.auth.claims") {
			name = "request.auth.claims[]"
		}
		b.unsupportedPart("when " + name + " (proxyless gRPC validates no JWT)")
		return nil, true
	}
	if b.tcp {
		b.skip()
		return nil, true
	}
	return []*rbacv3.Principal{jwtListClaim(path, vals)}, true
}

// claimPath reads [A][B]... (or one [A.B] name) as Istio's
// extractNameInNestedBrackets does.
func claimPath(s string) ([]string, bool) {
	var out []string
	for begin := 0; begin < len(s); {
		end := -1
		if s[begin] == '[' {
			for i := begin + 1; i < len(s); i++ {
				if s[i] == '[' {
					break
				}
				if s[i] == ']' {
					end = i
					break
				}
			}
		}
		if end == -1 {
			if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") || len(s) < 2 {
				return nil, false
			}
			return []string{s[1 : len(s)-1]}, true
		}
		out = append(out, s[begin+1:end])
		begin = end + 1
	}
	return out, len(out) > 0
}
