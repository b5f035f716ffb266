package gen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestIncrementalEqualsFromScratchUnderChurn regenerates classes from
// their previous configuration through a long random series of changes
// (VirtualServices and DestinationRules written and removed, services
// added, removed and given other ports, endpoints updated in place, a
// Sidecar that narrows what a namespace sees, ServiceEntries sharing a
// host with a Service, MeshConfig's default exportTo, routes matching a
// sourceNamespace, a namespace's access-logging Telemetry) and requires, after every step, what generation
// from nothing gives, and Changed naming exactly what differs. It is the
// check on the generation's shortcuts: units reused by their reads,
// builders replaying the previous generation's log (builder.go), the
// units' maps shared (endpointsOf), units and port listeners taken from
// the class of another namespace (class_sibling.go: the sidecars of
// ns-0, ns-1 and ns-2 are siblings).
func TestIncrementalEqualsFromScratchUnderChurn(t *testing.T) {
	for _, c := range []struct{ perAddress, shared bool }{{false, false}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("perAddress=%v/shared=%v", c.perAddress, c.shared), func(t *testing.T) {
			churn(t, c.perAddress, c.shared, 150)
		})
	}
}

// churn runs the series of changes; with shared, on a generator with
// Options.SharedTags, whose sidecars carry service tags (their classes
// are generated with placeholders for them, as the server's are).
func churn(t *testing.T, perAddress, shared bool, steps int) {
	const services, namespaces = 16, 3
	store := model.NewStore(model.StoreOptions{})
	// Access logs on, which a namespace's Telemetry may turn off.
	meshEv, err := worldtest.MeshConfig(churnMesh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(append(worldtest.Mesh(services, namespaces, 2), meshEv)...); err != nil {
		t.Fatal(err)
	}
	g, o := newWithOptions(t, perAddress, shared)
	side := sidecar
	if shared {
		side = namespaceProxy
	}
	proxies := []*model.Proxy{side(t, "ns-0"), side(t, "ns-1"), grpcProxy(t, "ns-2"), side(t, "ns-2")}
	prev := make([]*ClassConfig, len(proxies))
	rng := rand.New(rand.NewPCG(22, uint64(services)))
	svc := func() (string, string, int) {
		i := rng.IntN(services + 4) // a few beyond the first are added later
		return fmt.Sprintf("ns-%d", i%namespaces), fmt.Sprintf("svc-%d", i), i
	}
	for step := range steps {
		var what string
		var evs []model.Event
		var endpointsOf *model.NamespacedName
		switch k := rng.IntN(12); k {
		case 0, 1:
			ns, name, _ := svc()
			what = "VirtualService " + name
			evs = append(evs, vsEvent(ns, name, name, fmt.Sprint(step), int32(1+rng.IntN(9)), int32(1+rng.IntN(9))))
		case 2:
			ns, name, _ := svc()
			what = "VirtualService removed " + name
			evs = append(evs, model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: name}})
		case 3:
			ns, name, _ := svc()
			what = "DestinationRule " + name
			evs = mustDecode(t, fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: %s, namespace: %s}
spec:
  host: %s
  subsets: [{name: a, labels: {v: a}}, {name: b, labels: {v: b}}]
  trafficPolicy: {connectionPool: {tcp: {maxConnections: %d}}}
`, name, ns, name, 1+rng.IntN(50)))
			if rng.IntN(3) == 0 {
				what = "DestinationRule removed " + name
				evs = []model.Event{{Op: model.OpDelete, Key: model.Key{Kind: model.KindDestinationRule, Namespace: ns, Name: name}}}
			}
		case 4:
			ns, name, i := svc()
			what = "Service " + name
			ev := worldtest.Service(ns, name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1))
			switch rng.IntN(3) {
			case 0:
				what = "Service removed " + name
				ev = model.Event{Op: model.OpDelete, Key: ev.Key}
			case 1:
				what = "Service with another port " + name
				evs = mustDecode(t, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s}
spec: {clusterIP: 10.96.%d.%d, selector: {app: %s}, ports: [{name: http, port: %d, targetPort: 8080}]}
`, name, ns, i/250, i%250+1, name, 80+rng.IntN(3)))
				ev = model.Event{}
			}
			if ev.Object != nil || ev.Op == model.OpDelete {
				evs = append(evs, ev)
			}
		case 5, 6:
			ns, name, i := svc()
			what = "endpoints " + name
			endpointsOf = &model.NamespacedName{Namespace: ns, Name: name}
			n := 1 + rng.IntN(3)
			addrs := make([]string, n)
			for j := range addrs {
				addrs[j] = fmt.Sprintf("10.%d.%d.%d", 1+i/250, i%250, 1+rng.IntN(9))
			}
			evs = append(evs, worldtest.Slice(ns, name, addrs...))
		case 7:
			what = "Sidecar ns-1"
			evs = mustDecode(t, `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: ns-1}
spec:
  egress: [{hosts: ["./*", "ns-0/*"]}]
`)
			if rng.IntN(2) == 0 {
				what = "Sidecar ns-1 removed"
				evs = []model.Event{{Op: model.OpDelete, Key: model.Key{Kind: model.KindSidecar, Namespace: "ns-1", Name: "default"}}}
			}
		case 8:
			_, name, _ := svc()
			what = "ServiceEntry for " + name
			evs = mustDecode(t, fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se-%s, namespace: ns-2}
spec:
  hosts: [%s.ext.example.com, %s.ns-0.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
  location: MESH_EXTERNAL
`, name, name, name))
			if rng.IntN(2) == 0 {
				what = "ServiceEntry removed for " + name
				evs = []model.Event{{Op: model.OpDelete, Key: model.Key{Kind: model.KindServiceEntry, Namespace: "ns-2", Name: "se-" + name}}}
			}
		case 9:
			// Services exported to their own namespace only, or to all.
			exportTo := []string{`"*"`, `"."`}[rng.IntN(2)]
			what = "MeshConfig defaultServiceExportTo " + exportTo
			ev, err := worldtest.MeshConfig(churnMesh + "defaultServiceExportTo: [" + exportTo + "]\n")
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		case 10:
			// A route for the clients of one namespace: the classes of
			// the others must not take it, nor it theirs.
			ns, name, _ := svc()
			src := fmt.Sprintf("ns-%d", rng.IntN(namespaces))
			what = "VirtualService " + name + " from " + src
			evs = mustDecode(t, fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %s, namespace: %s, resourceVersion: "%d"}
spec:
  hosts: [%s]
  http:
  - match: [{sourceNamespace: %s}]
    route: [{destination: {host: %s}}]
    timeout: %ds
  - route: [{destination: {host: %s}}]
`, name, ns, step, name, src, name, 1+rng.IntN(9), name))
		case 11:
			// A namespace's Telemetry changes its classes' listeners only.
			ns := fmt.Sprintf("ns-%d", rng.IntN(namespaces))
			what = "Telemetry " + ns
			evs = mustDecode(t, fmt.Sprintf(`
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: logs, namespace: %s, resourceVersion: "%d"}
spec:
  accessLogging: [{providers: [{name: envoy}], disabled: %v}]
`, ns, step, rng.IntN(2) == 0))
			if rng.IntN(3) == 0 {
				what = "Telemetry removed " + ns
				evs = []model.Event{{Op: model.OpDelete, Key: model.Key{Kind: model.KindTelemetry, Namespace: ns, Name: "logs"}}}
			}
		}
		if _, err := store.Apply(evs...); err != nil {
			t.Fatalf("step %d (%s): %v", step, what, err)
		}
		w := store.World()
		for i, p := range proxies {
			var next *ClassConfig
			var err error
			if endpointsOf != nil && prev[i] != nil && rng.IntN(2) == 0 {
				// As the push does for an endpoint change: in place.
				next, _ = g.UpdateEndpoints(prev[i], w, []model.NamespacedName{*endpointsOf})
			} else if next, err = g.Class(w, p, prev[i]); err != nil {
				t.Fatalf("step %d (%s), %s: %v", step, what, p.Class(), err)
			}
			fresh, err := freshClass(w, p, o)
			if err != nil {
				t.Fatalf("step %d (%s), %s: fresh: %v", step, what, p.Class(), err)
			}
			for _, typ := range TypeURLs {
				if got, want := next.Sets[typ], fresh.Sets[typ]; got.Version != want.Version {
					t.Fatalf("step %d (%s), %s: %s regenerated from the previous class differs from a fresh one in %v",
						step, what, p.Class(), ShortType(typ), changed(got, want))
				}
			}
			for nn, names := range fresh.EndpointsOf {
				if got := next.EndpointsOf[nn]; fmt.Sprint(got) != fmt.Sprint(names) {
					t.Fatalf("step %d (%s), %s: EndpointsOf[%s] = %v, want %v", step, what, p.Class(), nn, got, names)
				}
			}
			if len(next.EndpointsOf) != len(fresh.EndpointsOf) {
				t.Fatalf("step %d (%s), %s: EndpointsOf has %d services, want %d", step, what, p.Class(), len(next.EndpointsOf), len(fresh.EndpointsOf))
			}
			if prev[i] != nil {
				// As sets: Changed lists names in the order it found them.
				for _, typ := range TypeURLs {
					want := diffNames(prev[i].Sets[typ], next.Sets[typ])
					if got := next.Changed[typ]; !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
						t.Fatalf("step %d (%s), %s: Changed[%s] = %v, want %v", step, what, p.Class(), ShortType(typ), got, want)
					}
				}
			}
			prev[i] = next
		}
	}
}

// churnMesh is the MeshConfig of churn's World.
const churnMesh = "accessLogFile: /dev/stdout\n"

// newWithListeners returns a generator with listeners per address or
// per port, and its options.
func newWithListeners(tb testing.TB, perAddress bool) (*Generator, Options) {
	return newWithOptions(tb, perAddress, false)
}

// newWithOptions returns a generator with listeners per address or per
// port, with Options.SharedTags or without, and its options.
func newWithOptions(tb testing.TB, perAddress, shared bool) (*Generator, Options) {
	tb.Helper()
	o := DefaultOptions(quietLog())
	o.ListenersPerAddress, o.SharedTags = perAddress, shared
	g, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return g, o
}

// freshClass generates p's class in w from nothing with a new generator
// of options o.
func freshClass(w *model.World, p *model.Proxy, o Options) (*ClassConfig, error) {
	fg, err := New(o)
	if err != nil {
		return nil, err
	}
	return fg.Class(w, p, nil)
}

func mustDecode(t *testing.T, yaml string) []model.Event {
	t.Helper()
	evs, err := worldtest.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
