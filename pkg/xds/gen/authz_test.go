package gen

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// ratingsWorld is the ratings workload of testdata/authz (HTTP 9080, TCP
// 5432) with policies appended.
const ratingsWorld = `apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: default}
spec:
  clusterIP: 10.96.0.30
  selector: {app: ratings}
  ports:
  - {name: http, port: 9080, targetPort: 9080}
  - {name: tcp-db, port: 5432, targetPort: 5432}
`

func ratingsConfig(t *testing.T, policies string) *ProxyConfig {
	t.Helper()
	evs, err := worldtest.Decode([]byte(ratingsWorld + "---\n" + policies))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.1.0.30~ratings-v1-a.default~default.svc.cluster.local",
		map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "ratings"}})
	if err != nil {
		t.Fatal(err)
	}
	return generate(t, store.World(), p)
}

const (
	productpage = "spiffe://cluster.local/ns/default/sa/productpage"
	monitor     = "spiffe://cluster.local/ns/monitoring/sa/prometheus"
)

func get(path string) request {
	return request{principal: productpage, ip: "10.1.0.7", method: "GET", path: path, host: "ratings", port: 9080}
}

func TestAuthorizationPolicySemantics(t *testing.T) {
	tests := map[string]struct {
		policies string
		http     map[string]request // name -> request expected allowed when the name starts with "allow"
		tcp      map[string]request
	}{
		"no policy allows everything": {
			http: map[string]request{"allow any": get("/"), "allow plaintext": {ip: "10.9.9.9", method: "POST", path: "/x", port: 9080}},
			tcp:  map[string]request{"allow any": {ip: "10.9.9.9", port: 5432}},
		},
		"an ALLOW policy without rules denies everything": {
			policies: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: nothing, namespace: default}\nspec: {}\n",
			http:     map[string]request{"deny any": get("/")},
			tcp:      map[string]request{"deny any": {principal: productpage, port: 5432}},
		},
		"an empty rule allows everything": {
			policies: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: all, namespace: istio-system}\nspec: {rules: [{}]}\n",
			http:     map[string]request{"allow any": get("/"), "allow plaintext": {ip: "10.9.9.9", port: 9080}},
			tcp:      map[string]request{"allow any": {port: 5432}},
		},
		"DENY wins over ALLOW and AUDIT changes nothing": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: all, namespace: default}
spec: {rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: default}
spec: {action: AUDIT, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: istio-system}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
`,
			http: map[string]request{"allow other paths": get("/ratings/1"), "deny admin": get("/admin/x"), "deny admin with query": get("/admin?x=1")},
			tcp:  map[string]request{"deny tcp (an HTTP-only DENY rule denies all TCP)": {principal: productpage, port: 5432}},
		},
		"sources and operations match as Istio's": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: viewer, namespace: default}
spec:
  selector: {matchLabels: {app: ratings}}
  rules:
  - from: [{source: {principals: ["cluster.local/ns/default/sa/product*"], notIpBlocks: [10.1.9.0/24]}}]
    to: [{operation: {methods: [GET], paths: ["/ratings/*", "*.json"], notPaths: ["/ratings/secret"]}}]
  - from: [{source: {namespaces: [monitoring]}}]
    to: [{operation: {ports: ["5432", "9080"], hosts: ["RATINGS"]}}]
    when: [{key: "request.headers[X-Scrape]", values: ["yes"]}]
  - from: [{source: {namespaces: [monitoring]}}]
    to: [{operation: {ports: ["5432"]}}]
    when: [{key: "request.auth.claims[iss]", values: [x]}]
`,
			http: map[string]request{
				"allow a path under the prefix":       get("/ratings/1"),
				"allow a suffix":                      get("/data.json"),
				"deny notPaths":                       get("/ratings/secret"),
				"deny another method":                 {principal: productpage, ip: "10.1.0.7", method: "POST", path: "/ratings/1", port: 9080},
				"deny a notIpBlocks source":           {principal: productpage, ip: "10.1.9.3", method: "GET", path: "/ratings/1", port: 9080},
				"deny plaintext":                      {ip: "10.1.0.7", method: "GET", path: "/ratings/1", port: 9080},
				"deny another service account":        {principal: "spiffe://cluster.local/ns/default/sa/reviews", method: "GET", path: "/ratings/1", port: 9080},
				"allow the namespace with the header": {principal: monitor, method: "GET", path: "/metrics", host: "ratings", port: 9080, headers: map[string]string{"x-scrape": "yes"}},
				"deny the namespace without it":       {principal: monitor, method: "GET", path: "/metrics", host: "ratings", port: 9080},
			},
			tcp: map[string]request{
				// Both monitoring rules carry what TCP cannot check (a
				// header, a JWT claim): ALLOW rules then match nothing.
				"deny the namespace on TCP": {principal: monitor, port: 5432},
			},
		},
		"a CUSTOM policy denies what it would ask its authorizer about (istiod's rule for a provider it cannot find)": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: default}
spec: {action: CUSTOM, provider: {name: opa}, rules: [{to: [{operation: {paths: ["/admin"]}}]}]}
`,
			http: map[string]request{"deny what the authorizer would judge": get("/admin"), "allow the rest": get("/")},
		},
		"dry-run policies are evaluated as shadow rules only, as istiod builds them": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-all, namespace: default, annotations: {istio.io/dry-run: "true"}}
spec: {action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-nothing, namespace: istio-system, annotations: {istio.io/dry-run: "True"}}
spec: {}
`,
			http: map[string]request{"allow any": get("/"), "allow plaintext": {ip: "10.9.9.9", method: "POST", path: "/x", port: 9080}},
			tcp:  map[string]request{"allow any": {ip: "10.9.9.9", port: 5432}},
		},
		"a dry-run ALLOW next to an enforced one adds nothing to what is allowed": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: admin, namespace: default}
spec: {rules: [{to: [{operation: {paths: ["/admin"]}}]}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: everything, namespace: default, annotations: {istio.io/dry-run: "true"}}
spec: {rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: unparsable, namespace: default, annotations: {istio.io/dry-run: "yes"}}
spec: {action: DENY, rules: [{to: [{operation: {paths: ["/admin"]}}]}], selector: {matchLabels: {app: ratings}}}
`,
			http: map[string]request{"deny the rest": get("/"), "deny admin (an unparsable dry-run annotation enforces)": get("/admin")},
			tcp:  map[string]request{"deny tcp": {principal: productpage, port: 5432}},
		},
		"policies of other workloads, other namespaces and targetRefs do not apply": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: reviews, namespace: default}
spec: {selector: {matchLabels: {app: reviews}}, action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: other, namespace: other}
spec: {action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: waypoint, namespace: default}
spec: {targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: w}], action: DENY, rules: [{}]}
`,
			http: map[string]request{"allow any": get("/")},
			tcp:  map[string]request{"allow any": {port: 5432}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pc := ratingsConfig(t, tc.policies)
			ev := rbacEval{t}
			for chain, reqs := range map[string]map[string]request{"inbound|9080||": tc.http, "inbound|5432||": tc.tcp} {
				rules := chainRBAC(t, pc, chain)
				for what, rq := range reqs {
					if got, want := ev.allowed(rules, rq), strings.HasPrefix(what, "allow"); got != want {
						t.Errorf("%s: %s: allowed %v, want %v", chain, what, got, want)
					}
				}
			}
		})
	}
}

func TestAuthorizationPolicyUnsupportedFields(t *testing.T) {
	ap := &security.AuthorizationPolicy{
		Selector:  &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}},
		TargetRef: &typev1beta1.PolicyTargetReference{Name: "w"},
		Action:    security.AuthorizationPolicy_CUSTOM,
		Rules: []*security.Rule{{
			From: []*security.Rule_From{{Source: &security.Source{Principals: []string{"x"}, RequestPrincipals: []string{"*"}}}},
			To:   []*security.Rule_To{{Operation: &security.Operation{Paths: []string{"/"}}}},
			When: []*security.Condition{{Key: "source.ip", Values: []string{"10.0.0.1"}}},
		}},
		ActionDetail: &security.AuthorizationPolicy_Provider{Provider: &security.AuthorizationPolicy_ExtensionProvider{Name: "opa"}},
	}
	want := "targetRef" // CUSTOM and its provider are served (authz_custom.go)
	if got := strings.Join(UnsupportedFields(model.KindAuthorizationPolicy, ap), ","); got != want {
		t.Errorf("unsupported %q, want %q", got, want)
	}
	pa := &security.PeerAuthentication{
		Mtls:          &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT},
		PortLevelMtls: map[uint32]*security.PeerAuthentication_MutualTLS{80: {Mode: security.PeerAuthentication_MutualTLS_DISABLE}},
	}
	if got := UnsupportedFields(model.KindPeerAuthentication, pa); len(got) != 0 {
		t.Errorf("PeerAuthentication: unsupported %v, want none", got)
	}
}

func TestAuthorizationPolicyDryRunShadowRules(t *testing.T) {
	pc := ratingsConfig(t, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-all, namespace: default, annotations: {istio.io/dry-run: "true"}}
spec: {action: DENY, rules: [{}]}
`)
	m, err := pc.Get(ListenerType, VirtualInbound).Any.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, fc := range m.(*listenerv3.Listener).GetFilterChains() {
		for _, f := range fc.GetFilters() {
			msg, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			var rules, shadow *rbacv3.RBAC
			var prefix string
			switch c := msg.(type) {
			case *netrbacv3.RBAC:
				rules, shadow, prefix = c.GetRules(), c.GetShadowRules(), c.GetShadowRulesStatPrefix()
			case *hcmv3.HttpConnectionManager:
				for _, hf := range c.GetHttpFilters() {
					hm, err := hf.GetTypedConfig().UnmarshalNew()
					if err != nil {
						t.Fatal(err)
					}
					if r, ok := hm.(*httprbacv3.RBAC); ok {
						rules, shadow, prefix = r.GetRules(), r.GetShadowRules(), r.GetShadowRulesStatPrefix()
					}
				}
			default:
				continue
			}
			if shadow == nil {
				continue
			}
			found++
			if rules != nil || shadow.GetAction() != rbacv3.RBAC_DENY || len(shadow.GetPolicies()) != 1 || prefix != "istio_dry_run_deny_" {
				t.Errorf("%s: rules %v, shadow %v, prefix %q; want shadow DENY rules only, prefix istio_dry_run_deny_", fc.GetName(), rules, shadow, prefix)
			}
		}
	}
	if found == 0 {
		t.Fatal("no chain carries the dry-run policy's shadow rules")
	}
}
