package gen

import (
	"fmt"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// gatewayBenchWorld is testdata/gateway-authz's gateway (HTTP, HTTPS,
// TCP, PASSTHROUGH and AUTO_PASSTHROUGH servers) next to 1,000 services
// in 50 namespaces, with 1,000 AuthorizationPolicies of which 20 apply to
// the gateway (root namespace or its own, selecting its labels).
func gatewayBenchWorld(b *testing.B) *model.Store {
	b.Helper()
	docs := gatewayAuthzWorld(b)
	for i := 0; i < 1000; i++ {
		ns, sel := fmt.Sprintf("ns-%d", i%50), "app: ratings"
		switch i % 50 {
		case 0:
			ns, sel = "istio-system", "app: istio-ingressgateway"
		case 1:
			ns, sel = "ingress", "istio: ingressgateway"
		}
		docs += fmt.Sprintf(`---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: p-%d, namespace: %s}
spec:
  selector: {matchLabels: {%s}}
  rules:
  - from: [{source: {remoteIpBlocks: [203.0.%d.0/24], notIpBlocks: [10.9.0.0/16]}}]
    to: [{operation: {methods: [GET], paths: ["/api/%d/*"]}}]
    when: [{key: "request.headers[x-tenant]", values: ["t%d"]}]
`, i, ns, sel, i%256, i, i)
	}
	evs, err := worldtest.Decode([]byte(docs))
	if err != nil {
		b.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(append(worldtest.Mesh(1000, 50, 10), evs...)...); err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkGatewayClassAfterPolicyEdit regenerates an ingress gateway's
// class after an edit of one AuthorizationPolicy that applies to it: the
// services' clusters and endpoints are reused; listeners, routes and
// RBAC are rebuilt.
func BenchmarkGatewayClassAfterPolicyEdit(b *testing.B) {
	store := gatewayBenchWorld(b)
	g := newForTest(quietLog())
	p := ingressGateway(b)
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	edit, err := worldtest.Decode([]byte(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: p-0, namespace: istio-system}
spec:
  selector: {matchLabels: {app: istio-ingressgateway}}
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := store.Apply(edit...); err != nil {
			b.Fatal(err)
		}
		if prev, err = g.Class(store.World(), p, prev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGatewayClassFromScratch generates the same gateway class with
// nothing to reuse.
func BenchmarkGatewayClassFromScratch(b *testing.B) {
	store := gatewayBenchWorld(b)
	g := newForTest(quietLog())
	p := ingressGateway(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.Class(store.World(), p, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGatewayAuthorization translates the 20 policies that apply to
// the gateway of gatewayBenchWorld (of 1,000), the per-class cost of
// enforcing them.
func BenchmarkGatewayAuthorization(b *testing.B) {
	store := gatewayBenchWorld(b)
	g := newForTest(quietLog())
	sc := scopeOf(store.World(), ingressGateway(b))
	if az := g.gatewayAuthorization(sc); len(az.http) != 1 || len(az.tcp) != 1 {
		b.Fatalf("%d HTTP and %d TCP RBAC filters, want 1 and 1 (ALLOW)", len(az.http), len(az.tcp))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g.gatewayAuthorization(sc)
	}
}
