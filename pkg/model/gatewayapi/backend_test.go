package gatewayapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnresolvedBackendKeepsShare: as istiod, a backendRef that does not
// resolve keeps its weight, sent where no cluster is (Envoy answers 503
// for that share) instead of moving its share to the backends that do;
// a denied reference never names the Service it was denied; a rule whose
// backends all have weight 0 still answers 500.
func TestUnresolvedBackendKeepsShare(t *testing.T) {
	in := filepath.Join(t.TempDir(), "input.yaml")
	if err := os.WriteFile(in, []byte(`
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /split}}]
    backendRefs:
    - {name: web, port: 80, weight: 3}
    - {name: api, namespace: other, port: 8000, weight: 1}
    - {name: nowhere, port: 80, weight: 1}
  - matches: [{path: {type: PathPrefix, value: /zero}}]
    backendRefs: [{name: web, port: 80, weight: 0}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: other}
spec: {ports: [{port: 8000}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := Translate(readInput(t, in))
	if len(out.VirtualServices) != 1 {
		t.Fatalf("got %d VirtualServices, want 1", len(out.VirtualServices))
	}
	var split, zero int
	for _, hr := range out.VirtualServices[0].Spec.GetHttp() {
		u := hr.GetMatch()[0].GetUri()
		switch strings.TrimSuffix(u.GetExact()+u.GetPrefix(), "/") {
		case "/split":
			split++
			type dest struct {
				host   string
				port   uint32
				weight int32
			}
			var got []dest
			for _, d := range hr.GetRoute() {
				got = append(got, dest{d.GetDestination().GetHost(), d.GetDestination().GetPort().GetNumber(), d.GetWeight()})
			}
			want := []dest{
				{"web.default.svc.cluster.local", 80, 3},
				{unresolvedHost, 8000, 1},
				{"nowhere.default.svc.cluster.local", 80, 1},
			}
			if len(got) != len(want) {
				t.Fatalf("/split routes to %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("/split destination %d = %v, want %v", i, got[i], want[i])
				}
			}
			if hr.GetDirectResponse() != nil {
				t.Errorf("/split answers directly: %v", hr.GetDirectResponse())
			}
		case "/zero":
			zero++
			if hr.GetDirectResponse().GetStatus() != 500 || len(hr.GetRoute()) != 0 {
				t.Errorf("/zero: direct response %v, routes %v; want 500 and no route", hr.GetDirectResponse(), hr.GetRoute())
			}
		}
	}
	if split == 0 || zero == 0 {
		t.Fatalf("rules not found: /split %d, /zero %d", split, zero)
	}
}
