package gen

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

const testIssuer = "https://issuer.example"

// ratingsWith is ratingsConfig with further events (fetched key sets).
func ratingsWith(t *testing.T, policies string, extra ...model.Event) *ProxyConfig {
	t.Helper()
	evs, err := worldtest.Decode([]byte(ratingsWorld + "---\n" + policies))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(append(evs, extra...)...); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.1.0.30~ratings-v1-a.default~default.svc.cluster.local",
		map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "ratings"}})
	if err != nil {
		t.Fatal(err)
	}
	return generate(t, store.World(), p)
}

// sidecarChain is the virtualInbound chain named name.
func sidecarChain(t *testing.T, pc *ProxyConfig, name string) policedChain {
	t.Helper()
	m, err := pc.Get(ListenerType, VirtualInbound).Any.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range listenerChains(t, m.(*listenerv3.Listener)) {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("virtualInbound has no chain %s", name)
	return policedChain{}
}

// jwtChains are the ratings sidecar's HTTP chain and the ingress
// gateway's HTTP chain with the same policies (root namespace, no
// selector: they apply to both).
func jwtChains(t *testing.T, policies string, extra ...model.Event) map[string]policedChain {
	t.Helper()
	out := map[string]policedChain{"sidecar": sidecarChain(t, ratingsWith(t, policies, extra...), "inbound|9080||")}
	evs, err := worldtest.Decode([]byte(gatewayAuthzWorld(t) + policies))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(append(evs, extra...)...); err != nil {
		t.Fatal(err)
	}
	cc, err := newForTest(quietLog()).Class(store.World(), ingressGateway(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	out["gateway"] = gatewayChain(t, cc, "0.0.0.0_80", "#0")
	return out
}

func requestAuthn(name, spec string) string {
	return "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: " + name + ", namespace: istio-system}\nspec:\n" + indent(spec) + "\n---\n"
}

func authzPolicy(name, spec string) string {
	return "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: " + name + ", namespace: istio-system}\nspec:\n" + indent(spec) + "\n---\n"
}

// jwtReq is a request to the chain under test with headers and a path.
type jwtReq struct {
	path    string
	headers map[string]string
}

func (r jwtReq) on(chain string) request {
	if r.path == "" {
		r.path = "/"
	}
	if chain == "gateway" {
		q := gwGet(allowedClient, "", r.path)
		q.headers = r.headers
		return q
	}
	return request{principal: productpage, ip: "10.1.0.7", method: "GET", path: r.path, host: "ratings", port: 9080, headers: r.headers}
}

func bearer(tok string) jwtReq {
	return jwtReq{headers: map[string]string{"authorization": "Bearer " + tok}}
}

// checkStatuses evaluates every request on every chain.
func checkStatuses(t *testing.T, chains map[string]policedChain, want map[string]struct {
	r      jwtReq
	status int
},
) {
	t.Helper()
	ev := rbacEval{t}
	for chain, c := range chains {
		for what, w := range want {
			if got := c.status(ev, w.r.on(chain)); got != w.status {
				t.Errorf("%s: %s: status %d, want %d", chain, what, got, w.status)
			}
		}
	}
}

type statusCase = map[string]struct {
	r      jwtReq
	status int
}

// TestRequestAuthenticationValidatesTokens: a workload a
// RequestAuthentication selects admits a request without a token or with
// a valid one and refuses (401) a forged, expired, foreign or mistargeted
// one, on sidecars and gateways, where the rule looks for tokens.
func TestRequestAuthenticationValidatesTokens(t *testing.T) {
	iss, forger := testSigners(t)
	valid := iss.token(map[string]any{"iss": testIssuer, "sub": "alice", "aud": "bookinfo"})
	forged := forger.token(map[string]any{"iss": testIssuer, "sub": "alice", "aud": "bookinfo"})
	expired := iss.token(map[string]any{"iss": testIssuer, "sub": "alice", "aud": "bookinfo", "exp": 1000})
	foreign := iss.token(map[string]any{"iss": "https://other.example", "sub": "alice", "aud": "bookinfo"})
	otherAud := iss.token(map[string]any{"iss": testIssuer, "sub": "alice", "aud": "reviews"})
	for name, tc := range map[string]struct {
		spec string
		want statusCase
	}{
		"default locations: the Authorization bearer header and access_token": {
			spec: "jwtRules:\n- issuer: " + testIssuer + "\n  audiences: [bookinfo]\n  jwks: '" + iss.jwks() + "'",
			want: statusCase{
				"no token passes":                     {jwtReq{}, 200},
				"a valid token passes":                {bearer(valid), 200},
				"a forged token is refused":           {bearer(forged), 401},
				"an expired token is refused":         {bearer(expired), 401},
				"another issuer's token is refused":   {bearer(foreign), 401},
				"another audience's token is refused": {bearer(otherAud), 401},
				"a valid access_token passes":         {jwtReq{path: "/api?access_token=" + valid}, 200},
				"a forged access_token is refused":    {jwtReq{path: "/api?access_token=" + forged}, 401},
				"basic credentials are not a token":   {jwtReq{headers: map[string]string{"authorization": "Basic dXNlcjpwYXNz"}}, 200},
			},
		},
		"custom locations replace the defaults": {
			spec: "jwtRules:\n- issuer: " + testIssuer + "\n  jwks: '" + iss.jwks() + "'\n" +
				"  fromHeaders: [{name: x-jwt-assertion}, {name: x-auth, prefix: \"Token \"}]\n  fromParams: [my_token]\n  fromCookies: [session]",
			want: statusCase{
				"a forged bearer token is not read": {bearer(forged), 200},
				"x-jwt-assertion valid":             {jwtReq{headers: map[string]string{"x-jwt-assertion": valid}}, 200},
				"x-jwt-assertion forged":            {jwtReq{headers: map[string]string{"x-jwt-assertion": forged}}, 401},
				"x-auth forged with its prefix":     {jwtReq{headers: map[string]string{"x-auth": "Token " + forged}}, 401},
				"x-auth valid with its prefix":      {jwtReq{headers: map[string]string{"x-auth": "Token " + valid}}, 200},
				"my_token forged":                   {jwtReq{path: "/?my_token=" + forged}, 401},
				"the session cookie forged":         {jwtReq{headers: map[string]string{"cookie": "a=b; session=" + forged}}, 401},
				"the session cookie valid":          {jwtReq{headers: map[string]string{"cookie": "a=b; session=" + valid}}, 200},
				"another cookie is not read":        {jwtReq{headers: map[string]string{"cookie": "xsession=" + forged}}, 200},
			},
		},
		"two issuers: each one's valid token passes, a forged one is refused": {
			spec: "jwtRules:\n- issuer: " + testIssuer + "\n  jwks: '" + iss.jwks() + "'\n- issuer: https://other.example\n  jwks: '" + iss.jwks() + "'",
			want: statusCase{
				"no token":            {jwtReq{}, 200},
				"the first issuer's":  {bearer(valid), 200},
				"the second issuer's": {bearer(foreign), 200},
				"forged":              {bearer(forged), 401},
			},
		},
		"a policy without rules validates nothing": {
			spec: "{}",
			want: statusCase{"a forged token passes": {bearer(forged), 200}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			checkStatuses(t, jwtChains(t, requestAuthn("jwt", tc.spec)), tc.want)
		})
	}
}

// TestAuthorizationPolicyOnJWT: requestPrincipals, notRequestPrincipals
// and request.auth.* hold for what a validated token says, and only for
// that: a forged token never gets there (401), a missing one matches no
// principal.
func TestAuthorizationPolicyOnJWT(t *testing.T) {
	iss, forger := testSigners(t)
	ra := requestAuthn("jwt", "jwtRules:\n- issuer: "+testIssuer+"\n  jwks: '"+iss.jwks()+"'")
	tok := func(claims map[string]any) jwtReq {
		claims["iss"] = testIssuer
		return bearer(iss.token(claims))
	}
	alice := tok(map[string]any{
		"sub": "alice", "aud": []any{"bookinfo", "x"}, "azp": "web", "groups": []any{"admins", "dev"},
		"scope": "read write", "org": map[string]any{"team": "blue"},
	})
	bob := tok(map[string]any{"sub": "bob", "aud": "reviews", "groups": "users", "scope": "write"})
	forgedAlice := bearer(forger.token(map[string]any{"iss": testIssuer, "sub": "alice", "groups": []any{"admins"}}))
	for name, tc := range map[string]struct {
		policy string
		want   statusCase
	}{
		"ALLOW requestPrincipals": {
			policy: "rules:\n- from: [{source: {requestPrincipals: [\"" + testIssuer + "/alice\"]}}]",
			want: statusCase{
				"alice":        {alice, 200},
				"bob":          {bob, 403},
				"no token":     {jwtReq{}, 403},
				"forged alice": {forgedAlice, 401},
			},
		},
		"ALLOW requestPrincipals with wildcards": {
			policy: "rules:\n- from: [{source: {requestPrincipals: [\"*\"]}}]",
			want:   statusCase{"alice": {alice, 200}, "bob": {bob, 200}, "no token": {jwtReq{}, 403}},
		},
		"ALLOW requestPrincipals issuer/*": {
			policy: "rules:\n- from: [{source: {requestPrincipals: [\"" + testIssuer + "/*\"]}}]",
			want:   statusCase{"alice": {alice, 200}, "no token": {jwtReq{}, 403}},
		},
		"DENY notRequestPrincipals * requires a token": {
			policy: "action: DENY\nrules:\n- from: [{source: {notRequestPrincipals: [\"*\"]}}]",
			want:   statusCase{"alice": {alice, 200}, "no token": {jwtReq{}, 403}, "forged": {forgedAlice, 401}},
		},
		"ALLOW on claims, audiences, presenter and principal": {
			policy: `rules:
- when:
  - {key: "request.auth.claims[groups]", values: [admins]}
  - {key: request.auth.audiences, values: [bookinfo]}
  - {key: request.auth.presenter, values: [web]}
  - {key: request.auth.principal, values: ["` + testIssuer + `/alice"]}
  - {key: "request.auth.claims[scope]", values: [read]}
  - {key: "request.auth.claims[org][team]", values: [blue]}`,
			want: statusCase{"alice": {alice, 200}, "bob": {bob, 403}, "no token": {jwtReq{}, 403}},
		},
		"DENY on a claim's notValues": {
			policy: "action: DENY\nrules:\n- when: [{key: \"request.auth.claims[groups]\", notValues: [admins]}]",
			want:   statusCase{"alice": {alice, 200}, "bob": {bob, 403}, "no token": {jwtReq{}, 403}},
		},
		"a string claim matches like a list's element": {
			policy: "rules:\n- when: [{key: \"request.auth.claims[groups]\", values: [users, nobody]}]",
			want:   statusCase{"alice": {alice, 403}, "bob": {bob, 200}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			checkStatuses(t, jwtChains(t, ra+authzPolicy("p", tc.policy)), tc.want)
		})
	}
}

// TestRequestAuthenticationFetchedJWKS: a rule with a jwksUri inlines the
// key set the control plane fetched (a World input); until one is
// fetched, or when fetching failed, a key set nobody can sign for (every
// token refused, requests without one pass).
func TestRequestAuthenticationFetchedJWKS(t *testing.T) {
	iss, _ := testSigners(t)
	const uri = "https://issuer.example/jwks"
	ra := requestAuthn("jwt", "jwtRules:\n- issuer: "+testIssuer+"\n  jwksUri: "+uri)
	valid := bearer(iss.token(map[string]any{"iss": testIssuer, "sub": "alice"}))
	fetched := model.Event{Key: model.JWKSKey(testIssuer, uri), Object: &model.JWKS{Issuer: testIssuer, URI: uri, Keys: iss.jwks()}}
	failed := model.Event{Key: model.JWKSKey(testIssuer, uri), Object: &model.JWKS{Issuer: testIssuer, URI: uri, Failed: true, Error: "status 503"}}
	checkStatuses(t, jwtChains(t, ra, fetched), statusCase{"valid": {valid, 200}, "none": {jwtReq{}, 200}})
	checkStatuses(t, jwtChains(t, ra), statusCase{"valid, not fetched yet": {valid, 401}, "none": {jwtReq{}, 200}})
	checkStatuses(t, jwtChains(t, ra, failed), statusCase{"valid, fetch failed": {valid, 401}, "none": {jwtReq{}, 200}})
	c := jwtChains(t, ra)["sidecar"]
	for _, p := range c.jwt.GetProviders() {
		if got := p.GetLocalJwks().GetInlineString(); got != PublicOnlyJwks {
			t.Errorf("unfetched key set inlined as %q, want PublicOnlyJwks", got)
		}
	}
}

// TestRequestAuthenticationSelection: only the workloads a policy selects
// validate tokens; TCP chains are unaffected, as in Istio.
func TestRequestAuthenticationSelection(t *testing.T) {
	_, forger := testSigners(t)
	tokenReq := request{
		principal: productpage, ip: "10.1.0.7", method: "GET", path: "/", host: "ratings", port: 9080,
		headers: map[string]string{"authorization": "Bearer " + forger.token(map[string]any{"iss": "x"})},
	}
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
			if got := sidecarChain(t, pc, "inbound|9080||").status(ev, tokenReq) == 401; got != tc.denied {
				t.Errorf("HTTP request with a forged token refused %v, want %v", got, tc.denied)
			}
			if rules := chainRBAC(t, pc, "inbound|5432||"); len(rules) != 0 {
				t.Errorf("TCP chain has RBAC %v", rules)
			}
		})
	}
}

// TestRequestAuthenticationFilterPlace: jwt_authn comes before the RBAC
// filters, as istiod places it, with clear_route_cache on gateways only.
func TestRequestAuthenticationFilterPlace(t *testing.T) {
	iss, _ := testSigners(t)
	policies := requestAuthn("jwt", "jwtRules:\n- issuer: "+testIssuer+"\n  jwks: '"+iss.jwks()+"'") +
		authzPolicy("p", "action: DENY\nrules:\n- from: [{source: {notRequestPrincipals: [\"*\"]}}]")
	for chain, c := range jwtChains(t, policies) {
		var names []string
		for _, f := range c.hcm.GetHttpFilters() {
			names = append(names, f.GetName())
		}
		got := strings.Join(names, ",")
		if !strings.Contains(got, JWTFilter+",envoy.filters.http.rbac") {
			t.Errorf("%s: filters %s: want jwt_authn right before RBAC", chain, got)
		}
		for _, p := range c.jwt.GetProviders() {
			if p.GetClearRouteCache() != (chain == "gateway") {
				t.Errorf("%s: clear_route_cache %v", chain, p.GetClearRouteCache())
			}
		}
	}
}

// TestRequestAuthenticationProxylessGRPC: a proxyless gRPC server has no
// jwt_authn: every request carrying a token where the rules look for one
// is refused (fail closed), requests without one pass; requestPrincipals
// fail closed too.
func TestRequestAuthenticationProxylessGRPC(t *testing.T) {
	iss, _ := testSigners(t)
	valid := iss.token(map[string]any{"iss": testIssuer, "sub": "alice"})
	world := `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: ns1}
spec:
  clusterIP: 10.96.3.5
  selector: {app: echo}
  ports: [{name: grpc, port: 7070, targetPort: 7070}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo-0, namespace: ns1, labels: {app: echo}}
status: {podIP: 10.1.3.5}
---
` + requestAuthn("jwt", "jwtRules:\n- issuer: "+testIssuer+"\n  jwks: '"+iss.jwks()+"'") +
		authzPolicy("p", "rules:\n- from: [{source: {requestPrincipals: [\"*\"]}}]\n- to: [{operation: {paths: [\"/health\"]}}]")
	evs, err := worldtest.Decode([]byte(world))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.1.3.5~echo-0.ns1~ns1.svc.cluster.local", map[string]any{"GENERATOR": "grpc", "NAMESPACE": "ns1", "LABELS": map[string]any{"app": "echo"}})
	if err != nil {
		t.Fatal(err)
	}
	pc := generate(t, store.World(), p)
	name := GRPCServerListenerName("0.0.0.0", 7070)
	r := pc.Get(ListenerType, name)
	if r == nil {
		t.Fatalf("no listener %s", name)
	}
	m, _ := r.Any.UnmarshalNew()
	chains := listenerChains(t, m.(*listenerv3.Listener))
	if len(chains) != 1 {
		t.Fatalf("%d chains", len(chains))
	}
	c := chains[0]
	for _, f := range c.hcm.GetHttpFilters() {
		if f.GetName() == JWTFilter {
			t.Fatal("a proxyless gRPC server got jwt_authn")
		}
	}
	if c.hcm.GetHttpFilters()[0].GetName() != RequestAuthnFilter {
		t.Errorf("first filter %s, want the fail-closed %s", c.hcm.GetHttpFilters()[0].GetName(), RequestAuthnFilter)
	}
	ev := rbacEval{t}
	rq := request{principal: productpage, ip: "10.1.0.7", method: "POST", path: "/health", host: "echo", port: 7070}
	if got := c.status(ev, rq); got != 200 {
		t.Errorf("no token to /health: %d, want 200", got)
	}
	rq.headers = map[string]string{"authorization": "Bearer " + valid}
	if got := c.status(ev, rq); got != 403 {
		t.Errorf("a valid token to /health: %d, want 403 (fails closed)", got)
	}
	rq.path, rq.headers = "/echo.Echo/Call", map[string]string{"authorization": "Bearer " + valid}
	if got := c.status(ev, rq); got != 403 {
		t.Errorf("requestPrincipals on gRPC: %d, want 403 (the rule is left out)", got)
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
