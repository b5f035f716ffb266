package gen

import (
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func sidecar(t testing.TB, ns string) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy("sidecar~10.9.0.1~client."+ns+"~"+ns+".svc.cluster.local", nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func vsEvent(ns, name, host, rv string, weights ...int32) model.Event {
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	vs.Spec.Hosts = []string{host}
	hr := &networking.HTTPRoute{}
	for i, w := range weights {
		hr.Route = append(hr.Route, &networking.HTTPRouteDestination{
			Destination: &networking.Destination{Host: host, Subset: []string{"a", "b"}[i%2]}, Weight: w,
		})
	}
	vs.Spec.Http = []*networking.HTTPRoute{hr}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: name}, Object: vs}
}

// applyYAML applies the Kubernetes-style YAML documents to store and
// returns the World they make.
func applyYAML(t testing.TB, store *model.Store, yaml string) *model.World {
	t.Helper()
	evs, err := worldtest.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	return store.World()
}

// newTestGenerator is a Generator with o; splitAfter makes it split its
// port listeners after generation (Generator.splitAfter).
func newTestGenerator(t testing.TB, o Options, splitAfter bool) *Generator {
	t.Helper()
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	g.splitAfter = splitAfter
	return g
}

// applyStep applies yaml, if any, and deletes the Service ns/removed, if
// named, and returns the World they make.
func applyStep(t testing.TB, store *model.Store, yaml, ns, removed string) *model.World {
	t.Helper()
	if yaml != "" {
		applyYAML(t, store, yaml)
	}
	if removed != "" {
		if _, err := store.Apply(model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindService, Namespace: ns, Name: removed}}); err != nil {
			t.Fatal(err)
		}
	}
	return store.World()
}

// meshAccessLogs is a mesh-wide Telemetry that turns on Envoy's access
// logs: it changes every connection manager.
const meshAccessLogs = `
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging:
  - providers: [{name: envoy}]
`

// changed lists the names whose resource differs between two sets.
func changed(a, b *Set) []string {
	var out []string
	for _, n := range b.Names {
		if r := a.Get(n); r == nil || r.Hash != b.Get(n).Hash {
			out = append(out, n)
		}
	}
	for _, n := range a.Names {
		if b.Get(n) == nil {
			out = append(out, "-"+n)
		}
	}
	return out
}

func TestIncrementalGeneration(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(50, 5, 3)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	before, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a VirtualService edit changes only that host's route", func(t *testing.T) {
		if _, err := store.Apply(vsEvent("ns-3", "svc-3", "svc-3", "1", 90, 10)); err != nil {
			t.Fatal(err)
		}
		after, err := g.Class(store.World(), p, before)
		if err != nil {
			t.Fatal(err)
		}
		for _, typeURL := range []string{ClusterType, EndpointType, ListenerType} {
			if c := changed(before.Sets[typeURL], after.Sets[typeURL]); len(c) != 0 {
				t.Errorf("%s changed: %v", ShortType(typeURL), c)
			}
		}
		got := changed(before.Sets[RouteType], after.Sets[RouteType])
		// The VirtualService has no port match: it routes both HTTP ports.
		want := "svc-3.ns-3.svc.cluster.local:7070,svc-3.ns-3.svc.cluster.local:80"
		if strings.Join(got, ",") != want {
			t.Errorf("routes changed: %v, want only %s", got, want)
		}
		before = after
	})

	t.Run("an endpoint change regenerates only that service's endpoints", func(t *testing.T) {
		u, err := store.Apply(worldtest.Slice("ns-2", "svc-7", "10.200.0.1"))
		if err != nil || u == nil {
			t.Fatalf("apply: %v %v", u, err)
		}
		after, names := g.UpdateEndpoints(before, store.World(), []model.NamespacedName{{Namespace: "ns-2", Name: "svc-7"}})
		want := "outbound|7070||svc-7.ns-2.svc.cluster.local,outbound|80||svc-7.ns-2.svc.cluster.local"
		if strings.Join(names, ",") != want {
			t.Errorf("changed EDS %v, want %s", names, want)
		}
		if c := changed(before.Sets[EndpointType], after.Sets[EndpointType]); strings.Join(c, ",") != want {
			t.Errorf("EDS set changed %v, want %s", c, want)
		}
		for _, typeURL := range []string{ClusterType, ListenerType, RouteType} {
			if after.Sets[typeURL] != before.Sets[typeURL] {
				t.Errorf("%s set was rebuilt by an endpoint change", ShortType(typeURL))
			}
		}
		full, err := g.Class(store.World(), p, after)
		if err != nil {
			t.Fatal(err)
		}
		if c := changed(after.Sets[EndpointType], full.Sets[EndpointType]); len(c) != 0 {
			t.Errorf("incremental EDS differs from a full generation: %v", c)
		}
	})
}

func TestInvalidResourceIsNeverPublished(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(3, 1, 1)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	good, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A regex Envoy's validation rejects (empty) in a header match makes
	// the route invalid: what is published for that host is the
	// fail-closed stand-in (contain.go), never the invalid route, and the
	// other hosts keep theirs.
	ev := vsEvent("ns-0", "bad", "svc-0", "1", 100)
	vs := ev.Object.(*networkingv1.VirtualService)
	vs.Spec.Http[0].Match = []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: ""}}}}
	if _, err := store.Apply(ev); err != nil {
		t.Fatal(err)
	}
	got, err := g.Class(store.World(), p, good)
	if err != nil {
		t.Fatal(err)
	}
	victim := RouteName("svc-0.ns-0.svc.cluster.local", 80)
	// The VirtualService names no port: it routes both of svc-0's.
	if c, want := changed(good.Sets[RouteType], got.Sets[RouteType]), RouteName("svc-0.ns-0.svc.cluster.local", 7070)+","+victim; strings.Join(c, ",") != want {
		t.Errorf("routes changed: %v, want only %s", c, want)
	}
	var rc routev3.RouteConfiguration
	if err := got.Sets[RouteType].Get(victim).Any.UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			if r.GetMatch().GetSafeRegex() != nil || r.GetDirectResponse().GetStatus() != refusedStatus {
				t.Errorf("published route %v, want only the fail-closed stand-in", r)
			}
		}
	}
}

func sidecarEvent(ns string, hosts ...string) model.Event {
	sc := &networkingv1.Sidecar{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default", ResourceVersion: "1"}}
	sc.Spec.Egress = []*networking.IstioEgressListener{{Hosts: hosts}}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindSidecar, Namespace: ns, Name: "default"}, Object: sc}
}

func TestSidecarEgressScope(t *testing.T) {
	tests := map[string]struct {
		sidecars []model.Event
		proxyNS  string
		want     string // visible services
	}{
		"without a Sidecar every exported service is visible": {
			proxyNS: "ns-0", want: "ns-0/svc-0,ns-0/svc-2,ns-1/svc-1,ns-1/svc-3",
		},
		"the namespace's Sidecar limits to its own namespace and one named host": {
			sidecars: []model.Event{sidecarEvent("ns-0", "./*", "ns-1/svc-1.ns-1.svc.cluster.local")},
			proxyNS:  "ns-0", want: "ns-0/svc-0,ns-0/svc-2,ns-1/svc-1",
		},
		"the root namespace's Sidecar applies where a namespace has none": {
			sidecars: []model.Event{sidecarEvent("istio-system", "ns-1/*")},
			proxyNS:  "ns-0", want: "ns-1/svc-1,ns-1/svc-3",
		},
		"a namespace's own Sidecar wins over the root's": {
			sidecars: []model.Event{sidecarEvent("istio-system", "ns-1/*"), sidecarEvent("ns-0", "*/*.ns-0.svc.cluster.local")},
			proxyNS:  "ns-0", want: "ns-0/svc-0,ns-0/svc-2",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			store := model.NewStore(model.StoreOptions{})
			if _, err := store.Apply(append(worldtest.Mesh(4, 2, 1), tc.sidecars...)...); err != nil {
				t.Fatal(err)
			}
			sc := scopeOf(store.World(), sidecar(t, tc.proxyNS))
			var got []string
			for _, s := range sc.Services {
				got = append(got, s.Namespace+"/"+s.Name)
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("visible %v, want %s", got, tc.want)
			}
		})
	}
}

// scopeOf is what the class of p sees of w, read unrecorded.
func scopeOf(w *model.World, p *model.Proxy) *Scope { return newScope(newView(w, nil), p, nil) }
