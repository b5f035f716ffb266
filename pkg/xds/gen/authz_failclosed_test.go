package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// requestPrincipals and request.auth.* hold only for a token jwt_authn
// validated (authz_jwt.go); a request without one, as here (no
// RequestAuthentication), matches none of them, and their negations
// (notRequestPrincipals, notValues) hold for it, as in Istio. Both on
// sidecars and on gateways.
func TestAuthorizationPolicyWithoutToken(t *testing.T) {
	tests := map[string]struct {
		policy string
		want   map[string]string // request path and peer "PATH@PEER" -> allow or deny
	}{
		"an ALLOW rule with requestPrincipals matches no request without a token, the policy's other rules stay": {
			policy: `spec:
  rules:
  - from: [{source: {requestPrincipals: ["https://issuer.example/*"]}}]
  - from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]`,
			want: map[string]string{"/@" + allowedClient: "allow", "/@" + otherClient: "deny"},
		},
		"an ALLOW rule with notRequestPrincipals matches a request without a token": {
			policy: `spec:
  rules:
  - from: [{source: {notRequestPrincipals: ["*"]}}]
    to: [{operation: {paths: ["/public*"]}}]`,
			want: map[string]string{"/public@" + otherClient: "allow", "/@" + otherClient: "deny"},
		},
		"an ALLOW rule with a request.auth.claims condition matches no request without a token": {
			policy: `spec:
  rules:
  - to: [{operation: {paths: ["/public*"]}}]
    when: [{key: "request.auth.claims[iss]", values: ["https://issuer.example"]}]
  - to: [{operation: {paths: ["/health"]}}]`,
			want: map[string]string{"/public/x@" + otherClient: "deny", "/health@" + otherClient: "allow"},
		},
		"a DENY rule with notRequestPrincipals denies every caller without a token": {
			policy: `spec:
  action: DENY
  rules:
  - from: [{source: {notRequestPrincipals: ["*"]}}]
    to: [{operation: {paths: ["/api*"]}}]`,
			want: map[string]string{"/api/v1@" + allowedClient: "deny", "/@" + allowedClient: "allow"},
		},
		"a DENY rule with request.auth.* conditions: without a token the principal does not hold": {
			policy: `spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/admin*"]}}]
    when:
    - {key: "request.auth.claims[groups]", notValues: [admins]}
    - {key: request.auth.principal, values: ["https://issuer.example/alice"]}
    - {key: request.auth.audiences, values: [bookinfo]}
    - {key: request.auth.presenter, notValues: [app]}`,
			want: map[string]string{"/admin@" + allowedClient: "allow", "/productpage@" + allowedClient: "allow"},
		},
		"a DENY rule with claims notValues only denies a request without a token": {
			policy: `spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/admin*"]}}]
    when: [{key: "request.auth.claims[groups]", notValues: [admins]}]`,
			want: map[string]string{"/admin@" + allowedClient: "deny", "/productpage@" + allowedClient: "allow"},
		},
		"a DENY rule with requestPrincipals in one source denies through its other sources": {
			policy: `spec:
  action: DENY
  rules:
  - from: [{source: {requestPrincipals: ["https://issuer.example/mallory"]}}, {source: {ipBlocks: [198.51.100.0/24]}}]`,
			want: map[string]string{"/@" + otherClient: "allow", "/@" + badPeer: "deny"},
		},
	}
	ev := rbacEval{t}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// Root namespace, no selector: the policy applies to the
			// ratings sidecar and to the gateway alike.
			policy := "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: istio-system}\n" + tc.policy + "\n"
			sidecarChain := chainRBAC(t, ratingsConfig(t, policy), "inbound|9080||")
			cc, _ := classFromYAML(t, ingressGateway(t), gatewayAuthzWorld(t)+policy)
			gwChain := gatewayChain(t, cc, "0.0.0.0_80", "#0")
			for k, want := range tc.want {
				path, peer, _ := strings.Cut(k, "@")
				sc := request{principal: productpage, ip: peer, method: "GET", path: path, host: "ratings", port: 9080}
				if got := ev.allowed(sidecarChain, sc); got != (want == "allow") {
					t.Errorf("sidecar: %s from %s: allowed %v, want %s", path, peer, got, want)
				}
				if got := gwChain.allowed(ev, gwGet(peer, "", path)); got != (want == "allow") {
					t.Errorf("gateway: %s from %s: allowed %v, want %s", path, peer, got, want)
				}
			}
		})
	}
}

// TestAuthorizationPolicyRequestAuthReported: requestPrincipals and
// request.auth.* are translated for Envoy, so they are no longer reported
// as unsupported; on a proxyless gRPC server, which validates no JWT,
// they fail closed and that is logged once per rule with its effect.
func TestAuthorizationPolicyRequestAuthReported(t *testing.T) {
	const policy = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: jwt, namespace: istio-system, resourceVersion: "7"}
spec:
  action: DENY
  rules:
  - from: [{source: {requestPrincipals: ["a/b"], notRequestPrincipals: ["c/d"]}}]
    when:
    - {key: "request.auth.claims[groups]", values: [x]}
    - {key: "request.auth.claims[iss]", values: [x]}
    - {key: request.auth.principal, values: [x]}
    - {key: request.auth.audiences, values: [x]}
    - {key: request.auth.presenter, notValues: [x]}
    - {key: "request.headers[x-a]", values: [x]}
    - {key: source.ip, values: [10.0.0.1]}
`
	evs, err := worldtest.Decode([]byte(gatewayAuthzWorld(t) + policy))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	ap := w.Config(model.KindAuthorizationPolicy, "istio-system", "jwt")
	if ap == nil {
		t.Fatal("policy not in the World")
	}
	if got := UnsupportedFields(model.KindAuthorizationPolicy, &ap.Object.(*securityv1.AuthorizationPolicy).Spec); len(got) != 0 {
		t.Errorf("UnsupportedFields = %q, want none", got)
	}

	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := g.Class(w, ingressGateway(t), nil); err != nil {
		t.Fatal(err)
	}
	if len(g.UnsupportedCounts()) != 0 {
		t.Errorf("counts %v, want none", g.UnsupportedCounts())
	}
	const failClosed = "AuthorizationPolicy rule uses what discovery cannot check yet; it fails closed"
	if strings.Contains(logs.String(), failClosed) {
		t.Errorf("a gateway validates JWTs; nothing fails closed:\n%s", logs.String())
	}
	g.authorization(newView(w, nil), grpcProxy(t, "istio-system"))
	if n := strings.Count(logs.String(), failClosed); n != 1 {
		t.Errorf("%d fail-closed log lines for the rule on proxyless gRPC, want 1:\n%s", n, logs.String())
	}
	for _, what := range []string{"source.requestPrincipals", "request.auth.claims[]", "request.auth.audiences"} {
		if !strings.Contains(logs.String(), what) {
			t.Errorf("the log should name %s:\n%s", what, logs.String())
		}
	}
}
