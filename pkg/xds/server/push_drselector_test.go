package server

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A DestinationRule with a workloadSelector applies in its own namespace
// only, whatever its exportTo says (Istio makes it private): a change to
// it matters there and nowhere else.
func TestSelectingDestinationRuleChangeMattersInItsNamespace(t *testing.T) {
	store := meshStore(t, 4)
	evs, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: selected, namespace: ns-0}
spec:
  host: svc-1.ns-1.svc.cluster.local
  exportTo: [ns-1]
  workloadSelector: {matchLabels: {app: a}}
  trafficPolicy: {loadBalancer: {simple: RANDOM}}
`))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, evs...)
	w := store.World()
	k := model.Key{Kind: model.KindDestinationRule, Namespace: "ns-0", Name: "selected"}
	for ns, want := range map[string]bool{"ns-0": true, "ns-1": false} {
		p, err := model.ParseProxy("sidecar~10.0.0.1~x."+ns+"~"+ns+".svc.cluster.local", map[string]any{"LABELS": map[string]any{"app": "a"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := matters(t, k, p, w); got != want {
			t.Errorf("a change to a selecting rule of ns-0 matters to a proxy of %s: %v, want %v", ns, got, want)
		}
	}
}

// TestDestinationRuleSelectingAWorkloadMovesItsProxy: two proxies of one
// namespace share a class until a DestinationRule selects one of them;
// that one is pushed the rule's subsets, the other nothing. An edit of
// the rule then reaches the selected proxy.
func TestDestinationRuleSelectingAWorkloadMovesItsProxy(t *testing.T) {
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
		t.Fatalf("before the rule: %d and %d clusters, want 11 each", na, nb)
	}
	rule := func(subsets string) []model.Event {
		evs, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: only-a, namespace: ns-0}
spec:
  host: svc-1.ns-1.svc.cluster.local
  exportTo: [ns-1]
  workloadSelector: {matchLabels: {app: a}}
  subsets: ` + subsets + `
`))
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	apply(t, store, rule("[{name: v1, labels: {version: v1}}]")...)
	r := a.next()
	if got := len(r.GetResources()); got != na+2 {
		t.Errorf("a after the rule selecting it: %d clusters, want %d (subset v1 on both ports of svc-1)", got, na+2)
	}
	a.ack(r, nil)
	select {
	case r := <-b.recv:
		t.Errorf("b, not selected, was pushed %d clusters", len(r.GetResources()))
	default:
	}
	apply(t, store, rule("[{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]")...)
	if got := len(a.next().GetResources()); got != na+4 {
		t.Errorf("a after the rule's edit: %d clusters, want %d (subsets v1 and v2)", got, na+4)
	}
}
