package gen

import (
	"strings"

	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	networking "istio.io/api/networking/v1"
)

// VirtualService header matches on JWT claims, Istio's JWT claim routing:
// a header name @request.auth.claims.A.B or @request.auth.claims[A][B]
// (any case of the prefix) is no header but the claim A.B of the token
// jwt_authn validated, matched in the route's dynamic_metadata as istiod
// translates it (the claim a string, or a list holding a match;
// withoutHeaders inverts it). It holds only where jwt_authn ran and
// cleared the route cache: on gateways (authn_jwt.go), as in Istio;
// on a sidecar's outbound routes no token is validated and it never
// holds. A presence match (`{}`) matches any value of the claim (istiod
// writes no value matcher there, which Envoy refuses).

// routingClaim is the claim path a header name names, ok false when it
// names a header (Istio's jwt.ToRoutingClaim).
func routingClaim(name string) ([]string, bool) {
	const prefix = "@request.auth.claims"
	if !strings.HasPrefix(strings.ToLower(name), prefix) {
		return nil, false
	}
	rest := name[len(prefix):]
	switch {
	case strings.HasPrefix(rest, ".") && len(rest) > 1:
		return strings.Split(rest[1:], "."), true
	case strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]") && len(rest) > 2:
		return strings.Split(rest[1:len(rest)-1], "]["), true
	}
	return nil, false
}

// claimRouteMatch matches the claim path with sm.
func claimRouteMatch(claims []string, sm *networking.StringMatch, invert bool) *matcherv3.MetadataMatcher {
	v := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}}
	if m := stringMatcher(sm); m != nil {
		v = stringValue(m)
	}
	segs := make([]*matcherv3.MetadataMatcher_PathSegment, 0, len(claims)+1)
	for _, k := range append([]string{jwtPayloadKey}, claims...) {
		segs = append(segs, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: k}})
	}
	return &matcherv3.MetadataMatcher{
		Filter: JWTFilter, Path: segs, Invert: invert,
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{
			ValueMatchers: []*matcherv3.ValueMatcher{
				{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: v}}}},
				v,
			},
		}}},
	}
}
