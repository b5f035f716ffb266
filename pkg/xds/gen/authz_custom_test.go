package gen

import (
	"sort"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthztcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// customMesh is a MeshConfig with an HTTP and a gRPC ext_authz provider
// (and one whose service does not exist); authzService is the
// authorizer's Service.
const (
	customMesh = `extensionProviders:
- name: http-authz
  envoyExtAuthzHttp: {service: ext-authz.authz.svc.cluster.local, port: 8000, failOpen: true}
- name: grpc-authz
  envoyExtAuthzGrpc: {service: authz/ext-authz.authz.svc.cluster.local, port: 9000}
- name: gone
  envoyExtAuthzGrpc: {service: nothing.authz.svc.cluster.local, port: 9000}
`
	authzService = `apiVersion: v1
kind: Service
metadata: {name: ext-authz, namespace: authz}
spec:
  clusterIP: 10.96.9.2
  ports: [{name: http, port: 8000}, {name: grpc, port: 9000}]
---
`
)

// customOutcome is what a chain does with a request: denied by RBAC
// (403), or let through after asking the ext_authz clusters named.
type customOutcome struct {
	denied bool
	asked  []string
}

// customEval runs a chain's RBAC and ext_authz filters in order with
// Envoy's semantics: an RBAC filter enforces its rules and, for its shadow
// rules, writes the first matching policy's name (Envoy's policies are
// ordered by name) as PREFIXshadow_effective_policy_id in its dynamic
// metadata; an ext_authz filter runs only where filter_enabled_metadata
// matches that metadata.
type customEval struct {
	e    rbacEval
	meta map[string]string
	out  customOutcome
}

func (c *customEval) rbac(rules, shadow *rbacv3.RBAC, prefix string, rq request) {
	if rules != nil && !c.e.allowed([]*rbacv3.RBAC{rules}, rq) {
		c.out.denied = true
	}
	if shadow == nil {
		return
	}
	names := make([]string, 0, len(shadow.GetPolicies()))
	for n := range shadow.GetPolicies() {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := shadow.GetPolicies()[n]
		ids, perms := false, false
		for _, id := range p.GetPrincipals() {
			ids = ids || c.e.id(id, rq)
		}
		for _, pm := range p.GetPermissions() {
			perms = perms || c.e.perm(pm, rq)
		}
		if ids && perms {
			c.meta[prefix+"shadow_effective_policy_id"] = n
			return
		}
	}
}

func (c *customEval) enabled(m *matcherv3.MetadataMatcher) bool {
	if m == nil {
		return true
	}
	if len(m.GetPath()) != 1 {
		c.e.t.Fatalf("filter_enabled_metadata path %v", m.GetPath())
	}
	v, ok := c.meta[m.GetPath()[0].GetKey()]
	return ok && strings.HasPrefix(v, m.GetValue().GetStringMatch().GetPrefix())
}

func (c *customEval) filter(t *testing.T, cfg proto.Message, rq request) {
	t.Helper()
	switch f := cfg.(type) {
	case *httprbacv3.RBAC:
		c.rbac(f.GetRules(), f.GetShadowRules(), f.GetShadowRulesStatPrefix(), rq)
	case *netrbacv3.RBAC:
		c.rbac(f.GetRules(), f.GetShadowRules(), f.GetShadowRulesStatPrefix(), rq)
	case *extauthzhttpv3.ExtAuthz:
		if c.enabled(f.GetFilterEnabledMetadata()) {
			cl := f.GetHttpService().GetServerUri().GetCluster()
			if cl == "" {
				cl = f.GetGrpcService().GetEnvoyGrpc().GetClusterName()
			}
			c.out.asked = append(c.out.asked, cl)
		}
	case *extauthztcpv3.ExtAuthz:
		if c.enabled(f.GetFilterEnabledMetadata()) {
			c.out.asked = append(c.out.asked, f.GetGrpcService().GetEnvoyGrpc().GetClusterName())
		}
	}
}

// run evaluates rq on the chain fc, HTTP (through its connection
// manager's filters) or TCP, up to the first denial.
func (c *customEval) run(t *testing.T, fc *listenerv3.FilterChain, rq request) customOutcome {
	t.Helper()
	c.meta, c.out = map[string]string{}, customOutcome{}
	for _, f := range fc.GetFilters() {
		msg, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := msg.(*hcmv3.HttpConnectionManager); ok {
			rq = throughHCM(m, rq)
			for _, hf := range m.GetHttpFilters() {
				hm, err := hf.GetTypedConfig().UnmarshalNew()
				if err != nil {
					t.Fatal(err)
				}
				if c.filter(t, hm, rq); c.out.denied {
					return c.out
				}
			}
			continue
		}
		if c.filter(t, msg, rq); c.out.denied {
			return c.out
		}
	}
	return c.out
}

// customWorld is the ratings sidecar's World (or docs') with the
// authorizer's Service, the MeshConfig mesh ("": the default) and the
// policies.
func customWorld(t *testing.T, mesh, policies string, docs ...string) *model.World {
	t.Helper()
	base := ratingsWorld + "---\n"
	if len(docs) > 0 {
		base = strings.Join(docs, "")
	}
	evs, err := worldtest.Decode([]byte(authzService + base + policies))
	if err != nil {
		t.Fatal(err)
	}
	if mesh != "" {
		ev, err := worldtest.MeshConfig(mesh)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	return store.World()
}

func ratingsProxy(t *testing.T, grpc bool) *model.Proxy {
	t.Helper()
	md := map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "ratings"}}
	if grpc {
		md["GENERATOR"] = "grpc"
	}
	p, err := model.ParseProxy("sidecar~10.1.0.30~ratings-v1-a.default~default.svc.cluster.local", md)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// inboundFilterChain is the virtualInbound chain named name.
func inboundFilterChain(t *testing.T, pc *ProxyConfig, name string) *listenerv3.FilterChain {
	t.Helper()
	m, err := pc.Get(ListenerType, VirtualInbound).Any.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	for _, fc := range m.(*listenerv3.Listener).GetFilterChains() {
		if fc.GetName() == name {
			return fc
		}
	}
	t.Fatalf("virtualInbound has no chain %s", name)
	return nil
}

func customPolicy(name, meta, spec string) string {
	return "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: " + name + ", namespace: default" + meta + "}\nspec: " + spec + "\n---\n"
}

const (
	httpAuthzCluster = "outbound|8000||ext-authz.authz.svc.cluster.local"
	grpcAuthzCluster = "outbound|9000||ext-authz.authz.svc.cluster.local"
)

func TestAuthorizationPolicyCustomSidecar(t *testing.T) {
	adminHTTP := customPolicy("ext", "", "{action: CUSTOM, provider: {name: http-authz}, rules: [{to: [{operation: {paths: [\"/admin*\"]}}]}]}")
	adminGRPC := customPolicy("ext", "", "{action: CUSTOM, provider: {name: grpc-authz}, rules: [{to: [{operation: {paths: [\"/admin*\"]}}]}, {to: [{operation: {ports: [\"5432\"]}}]}]}")
	tcpReq := request{principal: productpage, ip: "10.1.0.7", port: 5432}
	tests := map[string]struct {
		policies string
		http     map[string]customOutcome // request path -> outcome
		tcp      *customOutcome
	}{
		"an HTTP provider is asked about what the rules match, nothing else; on TCP, which it cannot check, what the rules match (HTTP conditions dropped, as for DENY) is denied": {
			policies: adminHTTP,
			http:     map[string]customOutcome{"/admin/x": {asked: []string{httpAuthzCluster}}, "/ratings/1": {}},
			tcp:      &customOutcome{denied: true},
		},
		"a gRPC provider is asked on HTTP and TCP chains": {
			policies: adminGRPC,
			http:     map[string]customOutcome{"/admin": {asked: []string{grpcAuthzCluster}}, "/": {}},
			tcp:      &customOutcome{asked: []string{grpcAuthzCluster}},
		},
		"CUSTOM runs before DENY and ALLOW: a request the authorizer allows can still be denied by them": {
			policies: adminHTTP + customPolicy("no-admin-x", "", "{action: DENY, rules: [{to: [{operation: {paths: [\"/admin/x\"]}}]}]}"),
			http:     map[string]customOutcome{"/admin/x": {asked: []string{httpAuthzCluster}, denied: true}, "/admin/y": {asked: []string{httpAuthzCluster}}},
		},
		"a provider the MeshConfig does not define denies what the rules match": {
			policies: customPolicy("ext", "", "{action: CUSTOM, provider: {name: opa}, rules: [{to: [{operation: {paths: [\"/admin*\"]}}]}]}"),
			http:     map[string]customOutcome{"/admin": {denied: true}, "/": {}},
		},
		"a provider whose service is not found denies, on TCP too": {
			policies: customPolicy("ext", "", "{action: CUSTOM, provider: {name: gone}, rules: [{}]}"),
			http:     map[string]customOutcome{"/": {denied: true}},
			tcp:      &customOutcome{denied: true},
		},
		"two providers for one workload deny both policies' rules (istiod's default)": {
			policies: adminHTTP + customPolicy("ext2", "", "{action: CUSTOM, provider: {name: grpc-authz}, rules: [{to: [{operation: {paths: [\"/api*\"]}}]}]}"),
			http:     map[string]customOutcome{"/admin": {denied: true}, "/api/1": {denied: true}, "/": {}},
		},
		"a dry-run CUSTOM policy is shadow only: never asked, never denied": {
			policies: customPolicy("ext", ", annotations: {istio.io/dry-run: \"true\"}", "{action: CUSTOM, provider: {name: http-authz}, rules: [{}]}"),
			http:     map[string]customOutcome{"/admin": {}, "/": {}},
			tcp:      &customOutcome{},
		},
		"a dry-run CUSTOM policy of a missing provider denies nothing": {
			policies: customPolicy("ext", ", annotations: {istio.io/dry-run: \"true\"}", "{action: CUSTOM, provider: {name: opa}, rules: [{}]}"),
			http:     map[string]customOutcome{"/": {}},
			tcp:      &customOutcome{},
		},
		"a CUSTOM policy without rules never asks": {
			policies: customPolicy("ext", "", "{action: CUSTOM, provider: {name: grpc-authz}}"),
			http:     map[string]customOutcome{"/": {}},
			tcp:      &customOutcome{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pc := generate(t, customWorld(t, customMesh, tc.policies), ratingsProxy(t, false))
			ev := &customEval{e: rbacEval{t}}
			httpChain := inboundFilterChain(t, pc, "inbound|9080||")
			for path, want := range tc.http {
				if got := ev.run(t, httpChain, get(path)); !equalOutcome(got, want) {
					t.Errorf("GET %s: %+v, want %+v", path, got, want)
				}
			}
			if tc.tcp != nil {
				if got := ev.run(t, inboundFilterChain(t, pc, "inbound|5432||"), tcpReq); !equalOutcome(got, *tc.tcp) {
					t.Errorf("TCP: %+v, want %+v", got, *tc.tcp)
				}
			}
		})
	}
}

func equalOutcome(a, b customOutcome) bool {
	return a.denied == b.denied && strings.Join(a.asked, ",") == strings.Join(b.asked, ",")
}

// The filters' names, place and settings are istiod's: the shadow RBAC
// filter (istio_ext_authz_) then ext_authz, before jwt_authn.
func TestAuthorizationPolicyCustomFilterPlace(t *testing.T) {
	policies := customPolicy("ext", "", "{action: CUSTOM, provider: {name: http-authz}, rules: [{to: [{operation: {paths: [\"/admin\"]}}]}]}") +
		customPolicy("ext-dry", ", annotations: {istio.io/dry-run: \"true\"}", "{action: CUSTOM, provider: {name: http-authz}, rules: [{}]}") +
		customPolicy("all", "", "{rules: [{}]}") +
		requestAuthn("jwt", "{jwtRules: [{issuer: "+testIssuer+", jwks: '{\"keys\":[]}'}]}")
	pc := generate(t, customWorld(t, customMesh, policies), ratingsProxy(t, false))
	fc := inboundFilterChain(t, pc, "inbound|9080||")
	var hcm hcmv3.HttpConnectionManager
	for _, f := range fc.GetFilters() {
		if f.GetTypedConfig().MessageIs(&hcm) {
			if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
				t.Fatal(err)
			}
		}
	}
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	// Metadata exchange first, as in istiod, so that RBAC sees the peer.
	got := strings.Join(names, ",")
	want := "istio.metadata_exchange," + RBACCustomFilter + "," + RBACCustomFilter + "," + ExtAuthzFilter + "," + JWTFilter + "," + RBACAllowFilter + ","
	if !strings.HasPrefix(got, want) {
		t.Fatalf("filters %s, want them to start %s", got, want)
	}
	fs := hcm.GetHttpFilters()[1:]
	var dry, shadow httprbacv3.RBAC
	if err := fs[0].GetTypedConfig().UnmarshalTo(&dry); err != nil {
		t.Fatal(err)
	}
	if dry.GetRules() != nil || dry.GetShadowRulesStatPrefix() != "istio_dry_run_custom_" || dry.GetShadowRules().GetPolicies()["istio-ext-authz-http-authz-ns[default]-policy[ext-dry]-rule[0]"] == nil {
		t.Errorf("dry-run filter %v", &dry)
	}
	if err := fs[1].GetTypedConfig().UnmarshalTo(&shadow); err != nil {
		t.Fatal(err)
	}
	if shadow.GetRules() != nil || shadow.GetShadowRulesStatPrefix() != "istio_ext_authz_" || len(shadow.GetShadowRules().GetPolicies()) != 1 ||
		shadow.GetShadowRules().GetPolicies()["istio-ext-authz-http-authz-ns[default]-policy[ext]-rule[0]"] == nil {
		t.Errorf("shadow filter %v", &shadow)
	}
	var ext extauthzhttpv3.ExtAuthz
	if err := fs[2].GetTypedConfig().UnmarshalTo(&ext); err != nil {
		t.Fatal(err)
	}
	if !ext.GetFailureModeAllow() || ext.GetFilterEnabledMetadata().GetValue().GetStringMatch().GetPrefix() != "istio-ext-authz-http-authz" {
		t.Errorf("ext_authz %v", &ext)
	}
}

// On a gateway the filters are istiod's envoy.filters.http.rbac and
// envoy.filters.http.ext_authz, first in the connection manager.
func TestGatewayAuthorizationPolicyCustom(t *testing.T) {
	policy := "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ext, namespace: istio-system}\n" +
		"spec: {action: CUSTOM, provider: {name: grpc-authz}, rules: [{to: [{operation: {paths: [\"/admin*\"]}}]}]}\n"
	cc, err := newForTest(quietLog()).Class(customWorld(t, customMesh, policy, gatewayAuthzWorld(t)), ingressGateway(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := &customEval{e: rbacEval{t}}
	l := listener(t, cc, "0.0.0.0_80")
	fc := l.GetFilterChains()[0]
	if got := ev.run(t, fc, gwGet(allowedClient, "", "/admin/x")); !equalOutcome(got, customOutcome{asked: []string{grpcAuthzCluster}}) {
		t.Errorf("GET /admin/x: %+v", got)
	}
	if got := ev.run(t, fc, gwGet(allowedClient, "", "/productpage")); !equalOutcome(got, customOutcome{}) {
		t.Errorf("GET /productpage: %+v", got)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := fc.GetFilters()[len(fc.GetFilters())-1].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "envoy.filters.http.rbac,envoy.filters.http.ext_authz") {
		t.Errorf("gateway filters %s", got)
	}
	tcp := gatewayChainFilters(t, cc, "0.0.0.0_9000")
	if got := ev.run(t, tcp, request{ip: allowedClient, port: 9000}); !equalOutcome(got, customOutcome{asked: []string{grpcAuthzCluster}}) {
		t.Errorf("TCP: %+v (an HTTP-only rule, kept without its paths as for DENY, asks about every connection)", got)
	}
}

func gatewayChainFilters(t *testing.T, cc *ClassConfig, name string) *listenerv3.FilterChain {
	t.Helper()
	l := listener(t, cc, name)
	if l == nil || len(l.GetFilterChains()) == 0 {
		t.Fatalf("no listener %s", name)
	}
	return l.GetFilterChains()[0]
}

// Proxyless gRPC servers have no ext_authz: CUSTOM keeps denying what it
// matches, even with a usable provider.
func TestAuthorizationPolicyCustomProxylessGRPC(t *testing.T) {
	w := customWorld(t, customMesh, customPolicy("ext", "", "{action: CUSTOM, provider: {name: grpc-authz}, rules: [{to: [{operation: {paths: [\"/admin*\"]}}]}]}"))
	pc := generate(t, w, ratingsProxy(t, true))
	found := false
	for _, name := range pc.Names(ListenerType) {
		r := pc.Get(ListenerType, name)
		l, err := r.Any.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		lis, ok := l.(*listenerv3.Listener)
		if !ok || !strings.Contains(name, "9080") || len(lis.GetFilterChains()) == 0 {
			continue
		}
		found = true
		ev := &customEval{e: rbacEval{t}}
		if got := ev.run(t, lis.GetFilterChains()[0], get("/admin")); !got.denied || len(got.asked) > 0 {
			t.Errorf("%s: /admin %+v, want denied", name, got)
		}
		if got := ev.run(t, lis.GetFilterChains()[0], get("/")); got.denied {
			t.Errorf("%s: / denied", name)
		}
	}
	if !found {
		t.Fatal("no gRPC server listener for port 9080")
	}
}

// A change of the MeshConfig's providers changes what the proxy is sent
// (a MeshConfig change is a full push), and the Services a provider names
// are known to the push filter.
func TestAuthorizationPolicyCustomFollowsMesh(t *testing.T) {
	policy := customPolicy("ext", "", "{action: CUSTOM, provider: {name: http-authz}, rules: [{}]}")
	ev := &customEval{e: rbacEval{t}}
	before := ev.run(t, inboundFilterChain(t, generate(t, customWorld(t, "", policy), ratingsProxy(t, false)), "inbound|9080||"), get("/"))
	w := customWorld(t, customMesh, policy)
	pc := generate(t, w, ratingsProxy(t, false))
	after := ev.run(t, inboundFilterChain(t, pc, "inbound|9080||"), get("/"))
	if !before.denied || after.denied || len(after.asked) != 1 {
		t.Errorf("without the provider %+v (want denied), with it %+v (want asked)", before, after)
	}
	if !pc.Touches(model.Key{Kind: model.KindService, Namespace: "authz", Name: "ext-authz"}, w) {
		t.Error("a change of the provider's Service does not touch the proxy")
	}
	if pc.Touches(model.Key{Kind: model.KindService, Namespace: "elsewhere", Name: "unrelated"}, w) {
		t.Error("a change of a Service nothing reads touches the proxy")
	}
}
