package server

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A VirtualService whose routes Envoy would refuse (a CR/LF in a header
// name) used to stop every sidecar's configuration: a proxy that connects
// while it exists gets its configuration with only that host failing
// closed, and deleting it heals that host at once.
func TestABadVirtualServiceNeitherStopsTheMeshNorOutlivesItsDeletion(t *testing.T) {
	store := meshStore(t, 3)
	bad, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bad, namespace: ns-1}
spec:
  hosts: [svc-1]
  http:
  - match:
    - headers:
        "x-a\r\nb": {exact: "1"}
    route:
    - destination: {host: svc-1}
`))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, bad...)
	ts := startServer(t, store)
	c := newSotwClient(t, dial(t, ts.addr), node("sidecar~10.1.0.3~app.ns-0~ns-0.svc.cluster.local", nil))

	c.send(gen.ClusterType, nil, "", "", "")
	cds := c.next()
	if len(cds.GetResources()) == 0 {
		t.Fatal("a new sidecar got no clusters while a bad VirtualService exists")
	}
	c.ack(cds, nil)
	victim, bystander := gen.RouteName("svc-1.ns-1.svc.cluster.local", 80), gen.RouteName("svc-0.ns-0.svc.cluster.local", 80)
	want := []string{bystander, victim}
	c.send(gen.RouteType, want, "", "", "")
	r := c.next()
	routes := routeConfigs(t, r)
	if len(routes) != 2 {
		t.Fatalf("got routes %v, want %v", names(t, r), want)
	}
	if !refused(routes[victim]) || refused(routes[bystander]) {
		t.Fatalf("want only %s failing closed: victim refused %v, bystander refused %v", victim, refused(routes[victim]), refused(routes[bystander]))
	}
	c.ack(r, want)

	apply(t, store, model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindVirtualService, Namespace: "ns-1", Name: "bad"}})
	for {
		r = c.next()
		if r.GetTypeUrl() != gen.RouteType {
			c.ack(r, nil)
			continue
		}
		if rc := routeConfigs(t, r)[victim]; rc != nil && !refused(rc) {
			break
		}
		c.ack(r, want)
	}
}

func routeConfigs(t *testing.T, r *discovery.DiscoveryResponse) map[string]*routev3.RouteConfiguration {
	t.Helper()
	out := map[string]*routev3.RouteConfiguration{}
	for _, a := range r.GetResources() {
		var rc routev3.RouteConfiguration
		if err := a.UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		out[rc.Name] = &rc
	}
	return out
}

// refused reports whether every route of rc answers with a direct response
// of 500, the fail-closed stand-in.
func refused(rc *routev3.RouteConfiguration) bool {
	n := 0
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if r.GetDirectResponse().GetStatus() != 500 {
				return false
			}
			n++
		}
	}
	return n > 0
}
