package server

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A delegate VirtualService (no hosts) is exported to its root's
// namespace, not to the proxies that use the root: a change to it must
// still reach them, and only them.
func TestDelegateChangeMattersWhereItsRootIsSeen(t *testing.T) {
	vsEvent := func(ns, name string, hosts, exportTo []string, hr *networking.HTTPRoute) model.Event {
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"}}
		vs.Spec.Hosts, vs.Spec.ExportTo, vs.Spec.Http = hosts, exportTo, []*networking.HTTPRoute{hr}
		return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: name}, Object: vs}
	}
	to := &networking.HTTPRoute{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "svc-1.ns-1.svc.cluster.local"}}}}
	store := model.NewStore(model.StoreOptions{})
	_, err := store.Apply(append(worldtest.Mesh(3, 3, 1),
		// The root, seen by ns-0 and ns-1 only.
		vsEvent("ns-0", "root", []string{"svc-0"}, []string{".", "ns-1"}, &networking.HTTPRoute{Delegate: &networking.Delegate{Name: "d", Namespace: "ns-1"}}),
		vsEvent("ns-1", "d", nil, []string{"ns-0"}, to),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	w := store.World()
	k := model.Key{Kind: model.KindVirtualService, Namespace: "ns-1", Name: "d"}
	for ns, want := range map[string]bool{"ns-0": true, "ns-1": true, "ns-2": false} {
		p, err := model.ParseProxy("sidecar~10.0.0.1~x."+ns+"~"+ns+".svc.cluster.local", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := matters(t, k, p, w); got != want {
			t.Errorf("a delegate change matters to %s: %v, want %v", ns, got, want)
		}
	}
}
