package gen

import (
	"testing"

	networking "istio.io/api/networking/v1"
)

// TestVirtualServiceClaimMatches: a header match on @request.auth.claims
// becomes a dynamic metadata match on the validated token's claim, a
// string or a list element, nested by . or [], inverted for
// withoutHeaders; other headers stay header matches.
func TestVirtualServiceClaimMatches(t *testing.T) {
	rm := routeMatch(&networking.HTTPMatchRequest{
		Headers: map[string]*networking.StringMatch{
			"@request.auth.claims.groups":     {MatchType: &networking.StringMatch_Exact{Exact: "admins"}},
			"@Request.Auth.Claims[org][team]": {MatchType: &networking.StringMatch_Prefix{Prefix: "blue"}},
			"x-a":                             {MatchType: &networking.StringMatch_Exact{Exact: "b"}},
		},
		WithoutHeaders: map[string]*networking.StringMatch{
			"@request.auth.claims.banned": {},
		},
	})
	if len(rm.GetHeaders()) != 1 || rm.GetHeaders()[0].GetName() != "x-a" {
		t.Fatalf("headers %v, want x-a only", rm.GetHeaders())
	}
	if len(rm.GetDynamicMetadata()) != 3 {
		t.Fatalf("%d metadata matchers, want 3", len(rm.GetDynamicMetadata()))
	}
	ev := rbacEval{t}
	matches := func(payload map[string]any) bool {
		for _, m := range rm.GetDynamicMetadata() {
			if !ev.metadata(m, request{jwt: payload}) {
				return false
			}
		}
		return true
	}
	for name, tc := range map[string]struct {
		payload map[string]any
		want    bool
	}{
		"the claims as a list and a nested string": {map[string]any{"groups": []any{"dev", "admins"}, "org": map[string]any{"team": "blue-2"}}, true},
		"the claim as a string":                    {map[string]any{"groups": "admins", "org": map[string]any{"team": "blue"}}, true},
		"another group":                            {map[string]any{"groups": "dev", "org": map[string]any{"team": "blue"}}, false},
		"a claim withoutHeaders names is present":  {map[string]any{"groups": "admins", "org": map[string]any{"team": "blue"}, "banned": "yes"}, false},
		"no token": {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := matches(tc.payload); got != tc.want {
				t.Errorf("matches %v, want %v", got, tc.want)
			}
		})
	}
	if _, ok := routingClaim("@request.auth.claims"); ok {
		t.Error("@request.auth.claims alone names no claim")
	}
}
