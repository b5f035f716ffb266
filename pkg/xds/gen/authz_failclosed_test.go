package gen

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// Until JWTs are validated (RequestAuthentication), nothing on a request
// can prove requestPrincipals or a request.auth.* condition. Such a part
// of a rule fails closed, as Istio treats a part it cannot translate:
//
//	ALLOW  the rule can never be proven true: it is left out (allows less)
//	DENY   the rule is enforced without that part (matches more, so it
//	       denies a superset of what it would)
//
// Other rules of the policy are unaffected. Both hold on sidecars and on
// gateways.
func TestAuthorizationPolicyFailsClosed(t *testing.T) {
	tests := map[string]struct {
		policy string
		want   map[string]string // request path and peer "PATH@PEER" -> allow or deny
	}{
		"an ALLOW rule with requestPrincipals is left out, the policy's other rules stay": {
			policy: `spec:
  rules:
  - from: [{source: {requestPrincipals: ["https://issuer.example/*"]}}]
  - from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]`,
			want: map[string]string{"/@" + allowedClient: "allow", "/@" + otherClient: "deny"},
		},
		"an ALLOW rule with notRequestPrincipals is left out": {
			policy: `spec:
  rules:
  - from: [{source: {notRequestPrincipals: ["*"]}}]
    to: [{operation: {paths: ["/public*"]}}]`,
			want: map[string]string{"/public@" + otherClient: "deny", "/@" + otherClient: "deny"},
		},
		"an ALLOW rule with a request.auth.claims condition is left out": {
			policy: `spec:
  rules:
  - to: [{operation: {paths: ["/public*"]}}]
    when: [{key: "request.auth.claims[iss]", values: ["https://issuer.example"]}]
  - to: [{operation: {paths: ["/health"]}}]`,
			want: map[string]string{"/public/x@" + otherClient: "deny", "/health@" + otherClient: "allow"},
		},
		"a DENY rule with notRequestPrincipals denies without it: every caller": {
			policy: `spec:
  action: DENY
  rules:
  - from: [{source: {notRequestPrincipals: ["*"]}}]
    to: [{operation: {paths: ["/api*"]}}]`,
			want: map[string]string{"/api/v1@" + allowedClient: "deny", "/@" + allowedClient: "allow"},
		},
		"a DENY rule with request.auth.* conditions denies without them": {
			policy: `spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/admin*"]}}]
    when:
    - {key: "request.auth.claims[groups]", notValues: [admins]}
    - {key: request.auth.principal, values: ["https://issuer.example/alice"]}
    - {key: request.auth.audiences, values: [bookinfo]}
    - {key: request.auth.presenter, notValues: [app]}`,
			want: map[string]string{"/admin@" + allowedClient: "deny", "/productpage@" + allowedClient: "allow"},
		},
		"a DENY rule with requestPrincipals in one source denies through the other sources too": {
			policy: `spec:
  action: DENY
  rules:
  - from: [{source: {requestPrincipals: ["https://issuer.example/mallory"]}}, {source: {ipBlocks: [198.51.100.0/24]}}]`,
			want: map[string]string{"/@" + otherClient: "deny", "/@" + badPeer: "deny"},
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

// TestAuthorizationPolicyRequestAuthReported: what fails closed is reported
// as an unsupported field or value (the webhook's warnings, the status
// condition), counted, and logged once with its effect.
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
	want := []string{
		"rules[].from[].source.notRequestPrincipals",
		"rules[].from[].source.requestPrincipals",
		"rules[].when[].key=request.auth.audiences",
		"rules[].when[].key=request.auth.claims[]",
		"rules[].when[].key=request.auth.presenter",
		"rules[].when[].key=request.auth.principal",
	}
	got := UnsupportedFields(model.KindAuthorizationPolicy, &ap.Object.(*securityv1.AuthorizationPolicy).Spec)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("UnsupportedFields = %q, want %q", got, want)
	}

	var logs bytes.Buffer
	g := New(slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := g.Class(w, ingressGateway(t), nil); err != nil {
		t.Fatal(err)
	}
	counts := g.UnsupportedCounts()
	for _, f := range []string{
		"rules.from.source.requestPrincipals", "rules.from.source.notRequestPrincipals",
		"rules.when.key=request.auth.claims", "rules.when.key=request.auth.principal",
		"rules.when.key=request.auth.audiences", "rules.when.key=request.auth.presenter",
	} {
		if counts["AuthorizationPolicy "+f] != 1 {
			t.Errorf("count of %s = %v, want 1 (counts %v)", f, counts["AuthorizationPolicy "+f], counts)
		}
	}
	if n := strings.Count(logs.String(), "AuthorizationPolicy rule uses what discovery cannot check yet; it fails closed"); n != 1 {
		t.Errorf("%d fail-closed log lines for the rule, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "requestPrincipals") || !strings.Contains(logs.String(), "request.auth.claims[]") {
		t.Errorf("the log should name what fails closed:\n%s", logs.String())
	}
}
