package gen

import (
	"fmt"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// localityWorld is three zones of two regions, a Node each, with a pod of
// backend (and of other) on each, and one client pod per zone and index
// (client-<zone>-<i>).
const localityWorld = `
apiVersion: v1
kind: Node
metadata: {name: n-a, labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: a}}
---
apiVersion: v1
kind: Node
metadata: {name: n-b, labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: b}}
---
apiVersion: v1
kind: Node
metadata: {name: n-c, labels: {topology.kubernetes.io/region: r2, topology.kubernetes.io/zone: c}}
---
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: ns}
spec: {clusterIP: 10.96.0.1, selector: {app: backend}, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: other, namespace: ns}
spec: {clusterIP: 10.96.0.2, selector: {app: other}, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: backend-1, namespace: ns, labels: {kubernetes.io/service-name: backend}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.1.0.1], conditions: {ready: true}, nodeName: n-a, targetRef: {kind: Pod, name: backend-a, namespace: ns}}
- {addresses: [10.1.0.2], conditions: {ready: true}, nodeName: n-b, targetRef: {kind: Pod, name: backend-b, namespace: ns}}
- {addresses: [10.1.0.3], conditions: {ready: true}, nodeName: n-c, targetRef: {kind: Pod, name: backend-c, namespace: ns}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: other-1, namespace: ns, labels: {kubernetes.io/service-name: other}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.2.0.1], conditions: {ready: true}, nodeName: n-a}
- {addresses: [10.2.0.3], conditions: {ready: true}, nodeName: n-c}
`

func localityPod(name, node string) string {
	return fmt.Sprintf(`
---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: ns, labels: {app: %s}}
spec: {nodeName: %s, containers: [{name: app, image: app}]}
status: {podIP: 10.3.0.1, conditions: [{type: Ready, status: "True"}]}
`, name, strings.SplitN(name, "-", 2)[0], node)
}

func localityStore(t *testing.T, extra string) *model.Store {
	t.Helper()
	in := localityWorld
	for _, p := range [][2]string{{"backend-a", "n-a"}, {"backend-b", "n-b"}, {"backend-c", "n-c"}} {
		in += localityPod(p[0], p[1])
	}
	for _, z := range []string{"a", "b", "c"} {
		for i := 0; i < 2; i++ {
			in += localityPod(fmt.Sprintf("client-%s-%d", z, i), "n-"+z)
		}
	}
	evs, err := worldtest.Decode([]byte(in + extra))
	if err != nil {
		t.Fatal(err)
	}
	s := model.NewStore(model.StoreOptions{})
	if _, err := s.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	return s
}

func localityClient(t *testing.T, zone string, i int) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.3.0.1~client-%s-%d.ns~ns.svc.cluster.local", zone, i),
		map[string]any{"LABELS": map[string]any{"app": "client"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// classResource decodes the resource name of type typ that cc holds.
func classResource(t *testing.T, cc *ClassConfig, typ, name string) proto.Message {
	t.Helper()
	r := cc.Sets[typ].Get(name)
	if r == nil {
		t.Fatalf("no %s %s", typ, name)
	}
	m, err := r.Any.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// priorities renders a load assignment as locality=priority/weight.
func priorities(t *testing.T, cc *ClassConfig, name string) string {
	t.Helper()
	var parts []string
	for _, le := range classResource(t, cc, EndpointType, name).(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
		parts = append(parts, fmt.Sprintf("%s=%d/%d(%d)", le.GetLocality().GetZone(), le.GetPriority(), le.GetLoadBalancingWeight().GetValue(), len(le.GetLbEndpoints())))
	}
	return strings.Join(parts, " ")
}

const (
	backendEDS = "outbound|80||backend.ns.svc.cluster.local"
	otherEDS   = "outbound|80||other.ns.svc.cluster.local"
)

// TestLocalityNeedsNoClassOfItsOwn: under Istio's default MeshConfig
// (locality load balancing enabled, no failover without outlier
// detection), nothing generated depends on a proxy's locality: proxies of
// every zone share one class.
func TestLocalityNeedsNoClassOfItsOwn(t *testing.T) {
	w := localityStore(t, "").World()
	want := ClassKey(w, localityClient(t, "a", 0))
	for _, z := range []string{"a", "b", "c"} {
		for i := 0; i < 2; i++ {
			if got := ClassKey(w, localityClient(t, z, i)); got != want {
				t.Errorf("client-%s-%d: class %q, want %q (shared)", z, i, got, want)
			}
		}
	}
	if strings.Contains(want, "|lb=") {
		t.Errorf("class key %q names a locality", want)
	}
}

// TestLocalityFailoverClasses: with outlier detection on backend,
// proxies of one zone share a class and its endpoints; proxies of
// different zones get the priorities of their own locality; other, whose
// endpoints no setting changes, is one resource in every class.
func TestLocalityFailoverClasses(t *testing.T) {
	w := localityStore(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: ns}
spec:
  host: backend
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5}}
`).World()
	g := newForTest(quietLog())
	classes := map[string]*ClassConfig{}
	keys := map[string]string{}
	for _, z := range []string{"a", "b", "c"} {
		for i := 0; i < 2; i++ {
			p := localityClient(t, z, i)
			key := ClassKey(w, p)
			if i == 1 {
				if key != keys[z] {
					t.Fatalf("zone %s: clients in one locality in classes %q and %q", z, keys[z], key)
				}
				continue
			}
			keys[z] = key
			cc, err := g.Class(w, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Class != key {
				t.Fatalf("class %q, key %q", cc.Class, key)
			}
			classes[z] = cc
		}
	}
	if keys["a"] == keys["b"] || keys["b"] == keys["c"] {
		t.Fatalf("zones share a class: %v", keys)
	}
	want := map[string]string{
		"a": "a=0/1(1) b=1/1(1) c=2/1(1)",
		"b": "a=1/1(1) b=0/1(1) c=2/1(1)",
		"c": "a=1/1(1) b=1/1(1) c=0/1(1)",
	}
	for z, cc := range classes {
		if got := priorities(t, cc, backendEDS); got != want[z] {
			t.Errorf("zone %s: backend endpoints %s, want %s", z, got, want[z])
		}
		if r, ra := cc.Sets[EndpointType].Get(otherEDS), classes["a"].Sets[EndpointType].Get(otherEDS); r != ra {
			t.Errorf("zone %s: other's endpoints, which no locality setting changes, are a copy of zone a's", z)
		}
		if r, ra := cc.Sets[ClusterType].Get(backendEDS), classes["a"].Sets[ClusterType].Get(backendEDS); r != ra {
			t.Errorf("zone %s: backend's cluster, which does not depend on the locality, is a copy of zone a's", z)
		}
	}
}

// TestLocalityDistributeClasses: distribute reads only which from a
// proxy's locality matches: zones a and b (region r1) share a class, c
// gets its own and the endpoints as they are.
func TestLocalityDistributeClasses(t *testing.T) {
	w := localityStore(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: ns}
spec:
  host: backend
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        distribute: [{from: "r1/*", to: {"r1/a": 70, "r2/*": 30}}]
`).World()
	ka, kb, kc := ClassKey(w, localityClient(t, "a", 0)), ClassKey(w, localityClient(t, "b", 0)), ClassKey(w, localityClient(t, "c", 0))
	if ka != kb || ka == kc {
		t.Fatalf("classes a %q, b %q, c %q: want a and b shared, c apart", ka, kb, kc)
	}
	g := newForTest(quietLog())
	for z, want := range map[string]string{"a": "a=0/70(1) b=0/1(0) c=0/30(1)", "c": "a=0/1(1) b=0/1(1) c=0/1(1)"} {
		cc, err := g.Class(w, localityClient(t, z, 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := priorities(t, cc, backendEDS); got != want {
			t.Errorf("zone %s: %s, want %s", z, got, want)
		}
	}
}

// TestLocalityEndpointUpdateEqualsFromScratch: an endpoint change applied
// with UpdateEndpoints to a class whose endpoints depend on its locality
// gives what generating the class from nothing gives, and a Node's new
// zone moves its proxies to another class.
func TestLocalityEndpointUpdateEqualsFromScratch(t *testing.T) {
	dr := `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: ns}
spec:
  host: backend
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5}
    loadBalancer: {localityLbSetting: {failover: [{from: r1, to: r2}]}}
`
	store := localityStore(t, dr)
	g := newForTest(quietLog())
	p := localityClient(t, "b", 0)
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := worldtest.Decode([]byte(`
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: backend-1, namespace: ns, labels: {kubernetes.io/service-name: backend}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.1.0.1], conditions: {ready: true}, nodeName: n-a, targetRef: {kind: Pod, name: backend-a, namespace: ns}}
- {addresses: [10.1.0.3], conditions: {ready: true}, nodeName: n-c, targetRef: {kind: Pod, name: backend-c, namespace: ns}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	if ClassKey(w, p) != prev.Class {
		t.Fatal("an endpoint change moved the proxy to another class")
	}
	upd, names := g.UpdateEndpoints(prev, w, []model.NamespacedName{{Namespace: "ns", Name: "backend"}})
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
	if got, want := priorities(t, upd, backendEDS), "a=0/1(1) c=1/1(1)"; got != want {
		t.Errorf("updated endpoints %s, want %s", got, want)
	}

	// n-b moves to region r2: client-b-0 now fails over from r2.
	evs, err = worldtest.Decode([]byte(`
apiVersion: v1
kind: Node
metadata: {name: n-b, labels: {topology.kubernetes.io/region: r2, topology.kubernetes.io/zone: c}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	w = store.World()
	if ClassKey(w, p) == prev.Class {
		t.Fatal("the proxy's Node changed locality, its class did not")
	}
	if ClassKey(w, p) != ClassKey(w, localityClient(t, "c", 0)) {
		t.Error("a proxy whose Node moved to zone c is not in zone c's class")
	}
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := priorities(t, cc, backendEDS), "a=1/1(1) c=0/1(1)"; got != want {
		t.Errorf("after the move, endpoints %s, want %s", got, want)
	}
}

// TestProxyTopology: the proxy's locality as istiod resolves it.
func TestProxyTopology(t *testing.T) {
	store := localityStore(t, "")
	w := store.World()
	for name, tc := range map[string]struct {
		pod    string
		labels map[string]any
		meta   map[string]any
		node   model.Locality
		want   string
	}{
		"its Node":                         {pod: "client-c-0", want: "r2/c"},
		"its locality label over its Node": {pod: "client-c-0", labels: map[string]any{"istio-locality": "x.y.z"}, want: "x/y/z"},
		"topology.istio.io/locality first": {pod: "nopod", labels: map[string]any{"istio-locality": "x", "topology.istio.io/locality": "p/q"}, want: "p/q"},
		"its topology labels":              {pod: "nopod", labels: map[string]any{"topology.kubernetes.io/zone": "z"}, node: model.Locality{Region: "ignored"}, want: "/z"},
		"the xDS node's":                   {pod: "nopod", node: model.Locality{Region: "n", Zone: "m"}, want: "n/m"},
		"NODE_NAME's Node":                 {pod: "nopod", meta: map[string]any{"NODE_NAME": "n-a"}, want: "r1/a"},
	} {
		t.Run(name, func(t *testing.T) {
			meta := map[string]any{}
			for k, v := range tc.meta {
				meta[k] = v
			}
			if tc.labels != nil {
				meta["LABELS"] = tc.labels
			}
			p, err := model.ParseProxy("sidecar~10.3.0.1~"+tc.pod+".ns~ns.svc.cluster.local", meta)
			if err != nil {
				t.Fatal(err)
			}
			p.NodeLocality = tc.node
			top := topologyOf(newView(w, nil), p)
			if got := top.loc.String(); got != tc.want {
				t.Errorf("locality %q, want %q", got, tc.want)
			}
		})
	}
}
