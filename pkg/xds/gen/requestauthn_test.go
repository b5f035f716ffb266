package gen

import (
	"testing"
)

// TestRequestAuthenticationFailsClosed: until JWTs are validated, a
// workload a RequestAuthentication selects refuses every request that
// carries a token where the policy's rules look for one (a forged token
// must never get through), and serves requests without one as Istio
// does. On sidecars and gateways alike.
func TestRequestAuthenticationFailsClosed(t *testing.T) {
	type req struct {
		path    string
		headers map[string]string
	}
	bearer := map[string]string{"authorization": "Bearer eyJhbGciOi.forged.sig"}
	tests := map[string]struct {
		spec string
		want map[string]req // "allow ..." or "deny ..." -> request
	}{
		"default locations: the Authorization bearer header and access_token": {
			spec: `jwtRules: [{issuer: "https://issuer.example", jwksUri: "https://issuer.example/jwks"}]`,
			want: map[string]req{
				"allow without a token":               {path: "/"},
				"deny a bearer token":                 {path: "/", headers: bearer},
				"deny a bearer token in any case":     {path: "/", headers: map[string]string{"authorization": "bEARER x"}},
				"allow basic credentials":             {path: "/", headers: map[string]string{"authorization": "Basic dXNlcjpwYXNz"}},
				"deny access_token":                   {path: "/api?access_token=x"},
				"deny access_token after another":     {path: "/api?a=1&access_token=x"},
				"deny access_token percent-encoded":   {path: "/api?access%5Ftoken=x"},
				"deny access_token in upper case":     {path: "/api?ACCESS_TOKEN=x"},
				"allow a parameter that only ends so": {path: "/api?my_access_token=x"},
				"allow the name in the path":          {path: "/access_token=x"},
			},
		},
		"custom locations replace the defaults": {
			spec: `jwtRules:
- issuer: "https://issuer.example"
  fromHeaders: [{name: x-jwt-assertion}, {name: x-auth, prefix: "Token "}]
  fromParams: [my_token]
  fromCookies: [session]`,
			want: map[string]req{
				"allow a bearer token, which the rule does not read": {path: "/", headers: bearer},
				"deny x-jwt-assertion":                               {path: "/", headers: map[string]string{"x-jwt-assertion": "x"}},
				"deny x-auth with its prefix":                        {path: "/", headers: map[string]string{"x-auth": "Token x"}},
				"allow x-auth without its prefix":                    {path: "/", headers: map[string]string{"x-auth": "x"}},
				"deny my_token":                                      {path: "/?my_token=x"},
				"deny the session cookie":                            {path: "/", headers: map[string]string{"cookie": "a=b; session=x"}},
				"allow another cookie":                               {path: "/", headers: map[string]string{"cookie": "a=b; xsession=x"}},
			},
		},
		"a policy without rules looks for no token": {
			spec: `{}`,
			want: map[string]req{"allow a bearer token": {path: "/", headers: bearer}},
		},
	}
	ev := rbacEval{t}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			policy := "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: istio-system}\nspec:\n" + indent(tc.spec) + "\n"
			sidecarChain := chainRBAC(t, ratingsConfig(t, policy), "inbound|9080||")
			cc, _ := classFromYAML(t, ingressGateway(t), gatewayAuthzWorld(t)+policy)
			gwChain := gatewayChain(t, cc, "0.0.0.0_80", "#0")
			for what, r := range tc.want {
				allow := what[:5] == "allow"
				sc := request{principal: productpage, ip: "10.1.0.7", method: "GET", path: r.path, host: "ratings", port: 9080, headers: r.headers}
				if got := ev.allowed(sidecarChain, sc); got != allow {
					t.Errorf("sidecar: %s: allowed %v", what, got)
				}
				gw := gwGet(allowedClient, "", r.path)
				gw.headers = r.headers
				if got := gwChain.allowed(ev, gw); got != allow {
					t.Errorf("gateway: %s: allowed %v", what, got)
				}
			}
		})
	}
}

// TestRequestAuthenticationSelection: only the workloads a policy selects
// fail closed; TCP chains are unaffected, as in Istio.
func TestRequestAuthenticationSelection(t *testing.T) {
	tokenReq := request{principal: productpage, ip: "10.1.0.7", method: "GET", path: "/", host: "ratings", port: 9080,
		headers: map[string]string{"authorization": "Bearer x"}}
	ev := rbacEval{t}
	for name, tc := range map[string]struct {
		meta, selector string
		denied         bool
	}{
		"a root namespace policy without selector applies to every workload": {meta: "{name: a, namespace: istio-system}", denied: true},
		"a namespace policy applies to its namespace's workloads":            {meta: "{name: a, namespace: default}", denied: true},
		"another namespace's policy does not":                                {meta: "{name: a, namespace: other}"},
		"a selector that matches applies":                                    {meta: "{name: a, namespace: default}", selector: "selector: {matchLabels: {app: ratings}}", denied: true},
		"a selector that does not match does not":                            {meta: "{name: a, namespace: default}", selector: "selector: {matchLabels: {app: reviews}}"},
	} {
		t.Run(name, func(t *testing.T) {
			policy := "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: " + tc.meta + "\nspec:\n  " + tc.selector + "\n  jwtRules: [{issuer: x}]\n"
			pc := ratingsConfig(t, policy)
			if got := !ev.allowed(chainRBAC(t, pc, "inbound|9080||"), tokenReq); got != tc.denied {
				t.Errorf("HTTP request with a token denied %v, want %v", got, tc.denied)
			}
			if rules := chainRBAC(t, pc, "inbound|5432||"); len(rules) != 0 {
				t.Errorf("TCP chain has RBAC %v", rules)
			}
		})
	}
}

func indent(s string) string {
	out := "  "
	for _, c := range s {
		out += string(c)
		if c == '\n' {
			out += "  "
		}
	}
	return out
}
