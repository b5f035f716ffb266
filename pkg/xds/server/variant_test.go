package server

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// canonicalServices returns the canonical service each connection
// manager of the listeners names in its tracing tags, and how many did.
func canonicalServices(t *testing.T, anys []*anypb.Any) (map[string]bool, int) {
	t.Helper()
	out, n := map[string]bool{}, 0
	for _, a := range anys {
		var l listenerv3.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		for _, fc := range append(l.GetFilterChains(), l.GetDefaultFilterChain()) {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().MessageIs(&hcm) {
					if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
						t.Fatal(err)
					}
					for _, tag := range hcm.GetTracing().GetCustomTags() {
						if tag.GetTag() == "istio.canonical_service" {
							out[tag.GetLiteral().GetValue()] = true
							n++
						}
					}
				}
			}
		}
	}
	return out, n
}

// Sidecars of one namespace with different canonical services (the
// labels Istio's injector gives every pod) share a base class; over real
// gRPC, delta and state of the world, each is sent listeners whose
// tracing tags name its own service, before and after a change.
func TestVariantsNameTheirOwnService(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	meta := func(name string) map[string]any {
		return map[string]any{"ISTIO_VERSION": "1.32.0", "LABELS": map[string]any{"app": name, "service.istio.io/canonical-name": name}}
	}
	type deltaProxy struct {
		name string
		c    *deltaClient
	}
	var ds []deltaProxy
	for i, name := range []string{"reviews", "ratings"} {
		c := newDeltaClient(t, ts)
		id := "sidecar~10.9.0." + string(rune('1'+i)) + "~" + name + ".ns-0~ns-0.svc.cluster.local"
		c.send(&discovery.DeltaDiscoveryRequest{Node: node(id, meta(name)), TypeUrl: gen.ListenerType})
		ds = append(ds, deltaProxy{name, c})
	}
	sotw := newSotwClient(t, dial(t, ts.addr), node("sidecar~10.9.0.9~details.ns-0~ns-0.svc.cluster.local", meta("details")))
	sotw.send(gen.ListenerType, nil, "", "", "")

	check := func(when, name string, anys []*anypb.Any) {
		t.Helper()
		got, n := canonicalServices(t, anys)
		if n == 0 || len(got) != 1 || !got[name] {
			t.Errorf("%s, %s: %d connection managers name %v, want %s alone", when, name, n, got, name)
		}
	}
	deltaAnys := func(r *discovery.DeltaDiscoveryResponse) []*anypb.Any {
		var out []*anypb.Any
		for _, res := range r.GetResources() {
			out = append(out, res.GetResource())
		}
		return out
	}
	var nonces []string
	for _, d := range ds {
		r := d.c.next()
		check("first", d.name, deltaAnys(r))
		nonces = append(nonces, r.GetNonce())
	}
	r := sotw.next()
	check("first", "details", r.GetResources())
	for i, d := range ds {
		d.c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ListenerType, ResponseNonce: nonces[i]})
	}
	sotw.ack(r, nil)

	apply(t, store, worldtest.Service("ns-0", "x", "10.96.8.1"))
	for _, d := range ds {
		check("after a service added", d.name, deltaAnys(d.c.next()))
	}
	check("after a service added", "details", sotw.next().GetResources())
}
