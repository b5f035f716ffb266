package gen

import (
	"fmt"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// BenchmarkProxyWithAuthorizationPolicies generates one sidecar's own
// configuration (inbound clusters, virtualInbound with RBAC and mTLS
// chains) in a World of 1,000 AuthorizationPolicies over 50 namespaces,
// of which 20 select the workload, plus a STRICT mesh PeerAuthentication.
func BenchmarkProxyWithAuthorizationPolicies(b *testing.B) {
	var docs string
	for i := 0; i < 1000; i++ {
		ns := fmt.Sprintf("ns-%d", i%50)
		if i%50 == 0 {
			ns = "default"
		}
		docs += fmt.Sprintf(`---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: p-%d, namespace: %s}
spec:
  selector: {matchLabels: {app: ratings}}
  rules:
  - from: [{source: {principals: ["cluster.local/ns/%s/sa/client-%d"], notIpBlocks: [10.9.0.0/16]}}]
    to: [{operation: {methods: [GET], paths: ["/api/%d/*"], ports: ["9080"]}}]
    when: [{key: "request.headers[x-tenant]", values: ["t%d"]}]
`, i, ns, ns, i, i, i)
	}
	docs += "---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: STRICT}}\n"
	evs, err := worldtest.Decode([]byte(ratingsWorld + docs))
	if err != nil {
		b.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		b.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.1.0.30~ratings-v1-a.default~default.svc.cluster.local",
		map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "ratings"}})
	if err != nil {
		b.Fatal(err)
	}
	g := newForTest(quietLog())
	w := store.World()
	cc, err := g.Class(w, p, nil)
	if err != nil {
		b.Fatal(err)
	}
	if n := len(chainRBAC(b, g.Proxy(w, p, cc), "inbound|9080||")); n != 1 {
		b.Fatalf("%d RBAC filters, want 1 (ALLOW)", n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g.Proxy(w, p, cc)
	}
}
