package gen

import (
	"slices"
	"strings"
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
	g := newForTest(quietLog())
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
		fresh, err := newForTest(quietLog()).Class(w, p, nil)
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
		if prev != nil {
			checkChanged(t, st.name, prev, next)
		}
		prev = next
	}
}

// checkChanged fails unless next.Changed lists, for every type, exactly
// the names added, changed or removed since prev, in order (publish
// takes them from setFrom when it can).
func checkChanged(t *testing.T, step string, prev, next *ClassConfig) {
	t.Helper()
	for _, typ := range TypeURLs {
		want := diffNames(prev.Sets[typ], next.Sets[typ])
		if got := next.Changed[typ]; !slices.Equal(got, want) {
			t.Errorf("%s: Changed[%s] = %v, want %v", step, ShortType(typ), got, want)
		}
	}
}

// TestEndpointUpdateThenClassEqualsFromScratch: endpoints updated in place
// (UpdateEndpoints) and then a full regeneration give what generation from
// nothing gives.
func TestEndpointUpdateThenClassEqualsFromScratch(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(20, 2, 3)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(worldtest.Slice("ns-1", "svc-1", "10.9.9.9")); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	upd, names := g.UpdateEndpoints(prev, w, []model.NamespacedName{{Namespace: "ns-1", Name: "svc-1"}})
	if len(names) == 0 {
		t.Fatal("UpdateEndpoints changed nothing")
	}
	fresh, err := newForTest(quietLog()).Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if upd.Sets[EndpointType].Version != fresh.Sets[EndpointType].Version {
		t.Errorf("updated endpoints differ from fresh ones in %v", changed(upd.Sets[EndpointType], fresh.Sets[EndpointType]))
	}
	full, err := g.Class(w, p, upd)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range TypeURLs {
		if got, want := full.Sets[typ], fresh.Sets[typ]; got.Version != want.Version {
			t.Errorf("%s after UpdateEndpoints and Class differs from a fresh one in %v", ShortType(typ), changed(got, want))
		}
	}
}

// TestClassesShareClustersAndEndpoints: sidecar classes of two namespaces
// hold the same cluster and endpoint resources, not copies; a namespace
// whose DestinationRule differs gets its own.
func TestClassesShareClustersAndEndpoints(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(10, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	evs, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: local, namespace: ns-1}
spec:
  host: svc-0.ns-0.svc.cluster.local
  exportTo: [.]
  trafficPolicy: {loadBalancer: {simple: RANDOM}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	a, err := g.Class(store.World(), sidecar(t, "ns-0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Class(store.World(), sidecar(t, "ns-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{ClusterType, EndpointType} {
		for _, n := range a.Sets[typ].Names {
			ra, rb := a.Sets[typ].Get(n), b.Sets[typ].Get(n)
			if rb == nil || !strings.HasPrefix(n, "outbound|") {
				continue // the three fixed clusters are per class
			}
			local := typ == ClusterType && n == "outbound|80||svc-0.ns-0.svc.cluster.local"
			switch {
			case local && ra == rb:
				t.Errorf("%s %s: ns-1's own DestinationRule applies there, yet both classes hold one resource", ShortType(typ), n)
			case !strings.Contains(n, "svc-0.ns-0") && ra.Hash == rb.Hash && ra != rb:
				t.Errorf("%s %s: equal in both classes but held twice", ShortType(typ), n)
			}
		}
	}
}
