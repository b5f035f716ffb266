package gen

import (
	"fmt"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestReuseRebuildsWhatAChangeTouches: reuse is derived from what each
// unit read (Reads.stands), so a change rebuilds the units that read it
// and reuses the others as they were, which the tests comparing reuse
// with generation from scratch cannot see. Each step names the units
// whose routes and whose clusters must be rebuilt, and the ports whose
// outbound listener must be; everything else must be the previous
// configuration's, the same objects.
func TestReuseRebuildsWhatAChangeTouches(t *testing.T) {
	const base = `
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec: {clusterIP: 10.96.0.1, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: ns}
spec: {clusterIP: 10.96.0.2, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: ns}
spec: {clusterIP: 10.96.0.3, ports: [{name: http, port: 8080}]}
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
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: c, namespace: ns}
spec: {host: c, subsets: [{name: v1, labels: {version: v1}}]}
`
	type want struct {
		routes, clusters []string // units rebuilt
		ports            []int32  // outbound listeners rebuilt
	}
	steps := []struct {
		name string
		yaml string
		evs  []model.Event
		want want
	}{
		{name: "an edit of a's VirtualService rebuilds a's routes alone", yaml: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a]
  http:
  - match: [{uri: {prefix: /c}}]
    route: [{destination: {host: b}}]
  - route: [{destination: {host: a}}]
`, want: want{routes: []string{"a"}}},
		{name: "c's endpoints rebuild c's clusters and endpoints alone",
			evs:  []model.Event{worldtest.Slice("ns", "c", "10.1.0.1")},
			want: want{clusters: []string{"c"}}},
		{name: "b's DestinationRule rebuilds b's clusters and the routes that send to b", yaml: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: b, namespace: ns}
spec: {host: b, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}}
`, want: want{routes: []string{"a", "b"}, clusters: []string{"b"}}},
		{name: "b's new port rebuilds b, the routes that send to b, and both ports' listeners", yaml: `
apiVersion: v1
kind: Service
metadata: {name: b, namespace: ns}
spec: {clusterIP: 10.96.0.2, ports: [{name: http, port: 9090}]}
`, want: want{routes: []string{"a", "b"}, clusters: []string{"b"}, ports: []int32{80, 9090}}},
		{name: "a VirtualService of another namespace exported nowhere rebuilds nothing", yaml: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: x, namespace: other}
spec:
  hosts: [c.ns.svc.cluster.local]
  exportTo: ["."]
  http:
  - route: [{destination: {host: c.ns.svc.cluster.local}}]
`},
		{name: "a VirtualService for c rebuilds c's routes alone", yaml: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: c, namespace: ns}
spec:
  hosts: [c]
  http:
  - route: [{destination: {host: c, subset: v1}}]
`, want: want{routes: []string{"c"}}},
	}
	store := model.NewStore(model.StoreOptions{})
	apply := func(name, yaml string, evs []model.Event) {
		t.Helper()
		if yaml != "" {
			decoded, err := worldtest.Decode([]byte(yaml))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			evs = append(evs, decoded...)
		}
		if _, err := store.Apply(evs...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	apply("base", base, nil)
	g := newForTest(quietLog())
	p := sidecar(t, "ns")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		apply(st.name, st.yaml, st.evs)
		next, err := g.Class(store.World(), p, prev)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, name := range []string{"a", "b", "c"} {
			nn := model.NamespacedName{Namespace: "ns", Name: name}
			old, cur := prev.unitOf(nn), next.unitOf(nn)
			if old == nil || cur == nil {
				t.Fatalf("%s: no unit for %s", st.name, name)
			}
			if rebuilt, wantRebuilt := old.reads != cur.reads, contains(st.want.routes, name); rebuilt != wantRebuilt {
				t.Errorf("%s: %s's routes rebuilt = %v, want %v", st.name, name, rebuilt, wantRebuilt)
			}
			if rebuilt, wantRebuilt := old.clusterReads != cur.clusterReads, contains(st.want.clusters, name); rebuilt != wantRebuilt {
				t.Errorf("%s: %s's clusters rebuilt = %v, want %v", st.name, name, rebuilt, wantRebuilt)
			}
		}
		for port, cur := range next.ports {
			if rebuilt, wantRebuilt := prev.ports[port] != cur, contains(st.want.ports, port); rebuilt != wantRebuilt {
				t.Errorf("%s: port %d's listener rebuilt = %v, want %v", st.name, port, rebuilt, wantRebuilt)
			}
		}
		sameAsFresh(t, st.name, next, store.World(), p)
		prev = next
	}
}

func contains[T comparable](l []T, v T) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

// TestEndpointUpdatesKeepReuseCurrent: a class updated by endpoint
// pushes alone (UpdateEndpoints) judges the next generation's changes
// from the World of its last update when nothing it reuses read what
// changed, so endpoint churn does not pile up changes for the next full
// generation to judge (or outgrow the World's change log); an updated
// unit's clusters then stand.
func TestEndpointUpdatesKeepReuseCurrent(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(20, 2, 3)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	cfg, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := model.NamespacedName{Namespace: "ns-1", Name: "svc-1"}
	other := model.NamespacedName{Namespace: "ns-1", Name: "svc-3"}
	for i := range 3 * atLag {
		nn := svc
		if i%3 == 0 {
			nn = other
		}
		if _, err := store.Apply(worldtest.Slice(nn.Namespace, nn.Name, fmt.Sprintf("10.9.%d.%d", i/200, 1+i%200))); err != nil {
			t.Fatal(err)
		}
		cfg, _ = g.UpdateEndpoints(cfg, store.World(), []model.NamespacedName{nn})
		if lag := store.World().Version - cfg.at.Version; lag >= atLag {
			t.Fatalf("after endpoint update %d the class judges changes from %d Worlds back", i, lag)
		}
	}
	updated := cfg.unitOf(svc)
	if updated == nil || updated.stale {
		t.Fatalf("the class has no current unit for %s", svc)
	}
	vs, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-2, namespace: ns-0}
spec:
  hosts: [svc-2.ns-0.svc.cluster.local]
  http:
  - route: [{destination: {host: svc-2.ns-0.svc.cluster.local}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(vs...); err != nil {
		t.Fatal(err)
	}
	next, err := g.Class(store.World(), p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if next.unitOf(svc) != updated {
		t.Error("the unit whose endpoints were updated was rebuilt by an unrelated VirtualService edit")
	}
	sameAsFresh(t, "after the edit", next, store.World(), p)
}

// sameAsFresh fails t unless got is what a generator with nothing to
// reuse makes of w for p.
func sameAsFresh(t *testing.T, what string, got *ClassConfig, w *model.World, p *model.Proxy) {
	t.Helper()
	sameAsFreshWith(t, DefaultOptions(quietLog()), what, got, w, p)
}

// sameAsFreshWith is sameAsFresh for a generator made with o.
func sameAsFreshWith(t *testing.T, o Options, what string, got *ClassConfig, w *model.World, p *model.Proxy) {
	t.Helper()
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, typ := range TypeURLs {
		if g, want := got.Sets[typ], fresh.Sets[typ]; g.Version != want.Version {
			t.Errorf("%s: %s differs from a fresh generation in %v", what, ShortType(typ), changed(g, want))
		}
	}
}
