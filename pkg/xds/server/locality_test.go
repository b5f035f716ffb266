package server

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

const localityMesh = `
apiVersion: v1
kind: Node
metadata: {name: n-a, labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: a}}
---
apiVersion: v1
kind: Node
metadata: {name: n-c, labels: {topology.kubernetes.io/region: r2, topology.kubernetes.io/zone: c}}
---
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: ns-a}
spec: {clusterIP: 10.96.0.1, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: ns-a}
spec:
  host: backend
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5}}
---
`

func localitySlice(ips map[string]string) string {
	s := `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: backend-1, namespace: ns-a, labels: {kubernetes.io/service-name: backend}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
`
	keys := make([]string, 0, len(ips))
	for ip := range ips {
		keys = append(keys, ip)
	}
	sort.Strings(keys)
	for _, ip := range keys {
		s += fmt.Sprintf("- {addresses: [%s], conditions: {ready: true}, nodeName: %s}\n", ip, ips[ip])
	}
	return s
}

func applyYAML(t *testing.T, store *model.Store, y string) {
	t.Helper()
	evs, err := worldtest.Decode([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, evs...)
}

// localClient connects a sidecar of ns-a whose xDS node is in zone of
// region and fetches its clusters and endpoints.
func localClient(t *testing.T, ts *testServer, name, region, zone string) (*sotwClient, []string) {
	t.Helper()
	n := node("sidecar~10.9.0.1~"+name+".ns-a~ns-a.svc.cluster.local", nil)
	n.Locality = &corev3.Locality{Region: region, Zone: zone}
	c := newSotwClient(t, dial(t, ts.addr), n)
	c.send(gen.ClusterType, nil, "", "", "")
	cds := c.next()
	c.ack(cds, nil)
	var eds []string
	for _, a := range cds.GetResources() {
		var cl clusterv3.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			t.Fatal(err)
		}
		if cl.GetType() == clusterv3.Cluster_EDS {
			eds = append(eds, cl.GetEdsClusterConfig().GetServiceName())
		}
	}
	c.send(gen.EndpointType, eds, "", "", "")
	return c, eds
}

// backendPriorities renders backend's load assignment in an EDS response
// as zone=priority per locality group.
func backendPriorities(t *testing.T, r *discovery.DiscoveryResponse) string {
	t.Helper()
	if r.GetTypeUrl() != gen.EndpointType {
		t.Fatalf("got %s, want EDS", r.GetTypeUrl())
	}
	for _, a := range r.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		if cla.GetClusterName() != "outbound|80||backend.ns-a.svc.cluster.local" {
			continue
		}
		var parts []string
		for _, le := range cla.GetEndpoints() {
			parts = append(parts, fmt.Sprintf("%s=%d(%d)", le.GetLocality().GetZone(), le.GetPriority(), len(le.GetLbEndpoints())))
		}
		return strings.Join(parts, " ")
	}
	t.Fatal("no endpoints of backend")
	return ""
}

// TestLocalityEndpointPushes: proxies of one locality share a class, of
// different localities get their own priorities; an endpoint change and
// a Node's new locality reach each with its own priorities, as EDS only.
func TestLocalityEndpointPushes(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	applyYAML(t, store, localityMesh+localitySlice(map[string]string{"10.1.0.1": "n-a", "10.1.0.2": "n-c"}))
	ts := startServer(t, store)
	clients, eds := map[string]*sotwClient{}, map[string][]string{}
	for _, c := range [][3]string{{"a1", "r1", "a"}, {"a2", "r1", "a"}, {"c", "r2", "c"}} {
		clients[c[0]], eds[c[0]] = localClient(t, ts, c[0], c[1], c[2])
	}
	want := map[string]string{"a1": "a=0(1) c=1(1)", "a2": "a=0(1) c=1(1)", "c": "a=1(1) c=0(1)"}
	for n, c := range clients {
		r := c.next()
		if got := backendPriorities(t, r); got != want[n] {
			t.Errorf("%s: initial endpoints %s, want %s", n, got, want[n])
		}
		c.ack(r, eds[n])
	}
	classes := map[string]*gen.ClassConfig{}
	ts.s.conns.Range(func(_, v any) bool {
		c := v.(*conn)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.proxy != nil && c.cfg != nil {
			classes[c.proxy.PodName] = c.cfg.Class
		}
		return true
	})
	if classes["a1"] == nil || classes["a1"] != classes["a2"] || classes["a1"] == classes["c"] {
		t.Errorf("classes a1 %p, a2 %p, c %p: want a1 and a2 to share one, c its own", classes["a1"], classes["a2"], classes["c"])
	}
	before := ts.counter(t, "pilot_xds_pushes", "type", "cds")

	applyYAML(t, store, localitySlice(map[string]string{"10.1.0.1": "n-a", "10.1.0.2": "n-c", "10.1.0.3": "n-a"}))
	want = map[string]string{"a1": "a=0(2) c=1(1)", "a2": "a=0(2) c=1(1)", "c": "a=1(2) c=0(1)"}
	for n, c := range clients {
		r := c.next()
		if got := backendPriorities(t, r); got != want[n] {
			t.Errorf("%s: after the endpoint change %s, want %s", n, got, want[n])
		}
		c.ack(r, eds[n])
	}

	// n-a moves to r2/c: its endpoints join c's group.
	applyYAML(t, store, `
apiVersion: v1
kind: Node
metadata: {name: n-a, labels: {topology.kubernetes.io/region: r2, topology.kubernetes.io/zone: c}}
`)
	want = map[string]string{"a1": "c=0(3)", "a2": "c=0(3)", "c": "c=0(3)"}
	for n, c := range clients {
		r := c.next()
		if got := backendPriorities(t, r); got != want[n] {
			t.Errorf("%s: after the Node's move %s, want %s", n, got, want[n])
		}
		c.ack(r, eds[n])
	}
	if got := ts.counter(t, "pilot_xds_pushes", "type", "cds"); got != before {
		t.Errorf("pilot_xds_pushes{type=cds} went from %v to %v: endpoint and Node changes need EDS only", before, got)
	}
}
