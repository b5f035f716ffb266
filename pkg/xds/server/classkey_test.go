package server

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestSidecarSelectingAWorkloadMovesItsProxy: two proxies of one namespace
// share a class until a Sidecar selects one of them by its labels; that
// one is then pushed the Sidecar's narrower egress, the other keeps
// everything.
func TestSidecarSelectingAWorkloadMovesItsProxy(t *testing.T) {
	store := meshStore(t, 4) // svc-0..3 over ns-0 and ns-1
	ts := startServer(t, store)
	connect := func(id, app string) (*sotwClient, int) {
		c := newSotwClient(t, dial(t, ts.addr), node(id, map[string]any{"LABELS": map[string]any{"app": app}}))
		c.send(gen.ClusterType, nil, "", "", "")
		r := c.next()
		c.ack(r, nil)
		return c, len(r.GetResources())
	}
	a, na := connect("sidecar~10.9.0.1~a.ns-0~ns-0.svc.cluster.local", "a")
	b, nb := connect("sidecar~10.9.0.2~b.ns-0~ns-0.svc.cluster.local", "b")
	if na != 4*2+3 || nb != na {
		t.Fatalf("before the Sidecar: %d and %d clusters, want 11 each", na, nb)
	}
	evs, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: only-a, namespace: ns-0}
spec:
  workloadSelector: {labels: {app: a}}
  egress: [{hosts: [./*]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, evs...)
	r := a.next()
	if got := len(r.GetResources()); got != 2*2+3 {
		t.Errorf("a after the Sidecar selecting it: %d clusters, want 7 (ns-0's two services + 3 fixed)", got)
	}
	select {
	case r := <-b.recv:
		t.Errorf("b, not selected, was pushed %d clusters", len(r.GetResources()))
	default:
	}
	classes := map[string]bool{}
	for _, row := range ts.s.Syncz() {
		classes[row.Class] = true
	}
	if len(classes) != 2 {
		t.Errorf("syncz shows classes %v, want two", classes)
	}
}

// TestHeadlessEndpointChangePushesListeners: the endpoints of a headless
// TCP service are filter chains of its port's listener, so an endpoint
// change re-sends LDS, not only EDS.
func TestHeadlessEndpointChangePushesListeners(t *testing.T) {
	store := meshStore(t, 1)
	slice := func(addr string) []model.Event {
		evs, err := worldtest.Decode([]byte(`
apiVersion: v1
kind: Service
metadata: {name: db, namespace: ns-0}
spec:
  clusterIP: None
  ports: [{name: tcp-db, port: 9042}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, namespace: ns-0, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: tcp-db, port: 9042}]
endpoints:
- addresses: [` + addr + `]
  conditions: {ready: true}
`))
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	apply(t, store, slice("10.1.0.1")...)
	ts := startServer(t, store)
	c := newSotwClient(t, dial(t, ts.addr), node(sidecarID, nil))
	c.send(gen.ListenerType, nil, "", "", "")
	r := c.next()
	c.ack(r, nil)
	apply(t, store, slice("10.1.0.2")...)
	r2 := c.next()
	if r2.GetTypeUrl() != gen.ListenerType || r2.GetVersionInfo() == r.GetVersionInfo() {
		t.Fatalf("after the headless service's endpoint moved: %s version %q, want new listeners", gen.ShortType(r2.GetTypeUrl()), r2.GetVersionInfo())
	}
}
