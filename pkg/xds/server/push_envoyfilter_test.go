package server

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func envoyFilterEvents(t *testing.T, ns, name, rv, selector, cluster string) []model.Event {
	t.Helper()
	evs, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: ` + name + `, namespace: ` + ns + `, resourceVersion: "` + rv + `"}
spec:
  workloadSelector: {labels: {app: ` + selector + `}}
  configPatches:
  - applyTo: CLUSTER
    match: {context: SIDECAR_OUTBOUND}
    patch: {operation: ADD, value: {name: ` + cluster + `, type: STATIC, connect_timeout: 1s}}
`))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// A change to an EnvoyFilter matters to the proxies it selects, in its
// namespace, and to no other.
func TestEnvoyFilterChangeMattersToTheProxiesItSelects(t *testing.T) {
	store := meshStore(t, 2)
	apply(t, store, envoyFilterEvents(t, "ns-0", "ef", "1", "a", "extra")...)
	w := store.World()
	k := model.Key{Kind: model.KindEnvoyFilter, Namespace: "ns-0", Name: "ef"}
	for _, tc := range []struct {
		ns, app string
		want    bool
	}{{"ns-0", "a", true}, {"ns-0", "b", false}, {"ns-1", "a", false}} {
		p, err := model.ParseProxy("sidecar~10.0.0.1~x."+tc.ns+"~"+tc.ns+".svc.cluster.local", map[string]any{"LABELS": map[string]any{"app": tc.app}})
		if err != nil {
			t.Fatal(err)
		}
		if got := matters(t, k, p, w); got != tc.want {
			t.Errorf("proxy app=%s in %s: ChangeMatters = %v, want %v", tc.app, tc.ns, got, tc.want)
		}
	}
}

// An EnvoyFilter selecting one of two proxies of a namespace moves it to
// its own class: it is pushed the added cluster, the other nothing; an
// edit reaches the selected one.
func TestEnvoyFilterSelectingAWorkloadMovesItsProxy(t *testing.T) {
	store := meshStore(t, 4)
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
	if nb != na {
		t.Fatalf("before the filter: %d and %d clusters", na, nb)
	}
	apply(t, store, envoyFilterEvents(t, "ns-0", "only-a", "1", "a", "extra")...)
	r := a.next()
	if got := len(r.GetResources()); got != na+1 {
		t.Errorf("a after the filter selecting it: %d clusters, want %d", got, na+1)
	}
	a.ack(r, nil)
	select {
	case r := <-b.recv:
		t.Errorf("b, not selected, was pushed %d clusters", len(r.GetResources()))
	default:
	}
	apply(t, store, envoyFilterEvents(t, "ns-0", "only-a", "2", "a", "renamed")...)
	r = a.next()
	names := map[string]bool{}
	for _, res := range r.GetResources() {
		var cl clusterv3.Cluster
		if err := res.UnmarshalTo(&cl); err != nil {
			t.Fatal(err)
		}
		names[cl.GetName()] = true
	}
	if !names["renamed"] || names["extra"] {
		t.Errorf("a after the filter's edit: want cluster renamed and not extra, got %d clusters", len(names))
	}
}
