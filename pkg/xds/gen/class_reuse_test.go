package gen

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestReuseEqualsFromScratch applies a sequence of changes that reach a
// host's routes only through other objects (the services and
// DestinationRules its VirtualService routes to, a delegate) and checks
// after each that the class regenerated from its previous configuration is
// exactly the class generated from nothing.
func TestReuseEqualsFromScratch(t *testing.T) {
	steps := []struct{ name, yaml string }{
		{"services", `
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec: {clusterIP: 10.96.0.1, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: ns}
spec: {clusterIP: 10.96.0.2, ports: [{name: http, port: 8080}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a]
  http:
  - match: [{uri: {prefix: /b}}]
    route: [{destination: {host: b}}]
  - route: [{destination: {host: a}}]
`},
		// b's only port changes: a's route to b must follow.
		{"destination port", `
apiVersion: v1
kind: Service
metadata: {name: b, namespace: ns}
spec: {clusterIP: 10.96.0.2, ports: [{name: http, port: 9090}]}
`},
		// b's DestinationRule sets consistent hashing: a's route to b
		// carries the hash policy.
		{"destination rule", `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: b, namespace: ns}
spec:
  host: b
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
`},
		{"edit", `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a]
  http:
  - match: [{uri: {prefix: /c}}]
    route: [{destination: {host: b}}]
  - route: [{destination: {host: a}}]
`},
	}
	store := model.NewStore(model.StoreOptions{})
	g := New(quietLog())
	p := sidecar(t, "ns")
	var prev *ClassConfig
	for _, st := range steps {
		evs, err := worldtest.Decode([]byte(st.yaml))
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if _, err := store.Apply(evs...); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		w := store.World()
		next, err := g.Class(w, p, prev)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		fresh, err := New(quietLog()).Class(w, p, nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, typ := range TypeURLs {
			if got, want := next.Sets[typ], fresh.Sets[typ]; got.Version != want.Version {
				t.Errorf("%s: %s regenerated from the previous class differs from a fresh one in %v",
					st.name, ShortType(typ), changed(got, want))
			}
		}
		if prev != nil && st.name != "services" && len(next.Changed[RouteType]) == 0 {
			t.Errorf("%s: no route changed", st.name)
		}
		prev = next
	}
}
