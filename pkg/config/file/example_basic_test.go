package file

import (
	"path/filepath"
	"reflect"
	"testing"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// TestExampleBasicLoads keeps examples/basic (the README's quickstart)
// loading without errors and saying what its files say.
func TestExampleBasicLoads(t *testing.T) {
	h := start(t, filepath.Join("..", "..", "..", "examples", "basic"))
	if errs := h.src.Errors(); len(errs) != 0 {
		t.Fatalf("examples/basic has errors: %v", errs)
	}
	w := h.world()

	var namespaces []string
	for _, ns := range w.Namespaces() {
		namespaces = append(namespaces, ns.Name)
	}
	if want := []string{"backend", "frontend"}; !reflect.DeepEqual(namespaces, want) {
		t.Errorf("namespaces = %v, want %v", namespaces, want)
	}

	type port struct {
		host  string
		port  int32
		proto model.Protocol
		eps   []string
	}
	var ports []port
	for _, s := range w.Services() {
		var eps []string
		if se := w.Endpoints(s.Namespace, s.Name); se != nil {
			for _, e := range se.Endpoints {
				if !e.Ready || e.Pod == "" || e.ServiceAccount == "" {
					t.Errorf("%s: endpoint %s is not ready or not joined with its pod: %+v", s.Hostname, e.Address, e)
				}
				eps = append(eps, e.Address+"/"+e.Labels["version"])
			}
		}
		for _, p := range s.Ports {
			ports = append(ports, port{s.Hostname, p.Port, p.Protocol, eps})
		}
	}
	want := []port{
		{"ratings.backend.svc.cluster.local", 7070, model.ProtocolGRPC, []string{"127.0.0.31/v1"}},
		{"reviews.backend.svc.cluster.local", 9080, model.ProtocolHTTP, []string{"127.0.0.21/v1", "127.0.0.22/v2"}},
		{"productpage.frontend.svc.cluster.local", 9080, model.ProtocolHTTP, []string{"127.0.0.10/v1"}},
	}
	if !reflect.DeepEqual(ports, want) {
		t.Errorf("services:\n got %+v\nwant %+v", ports, want)
	}

	dr := w.Config(model.KindDestinationRule, "backend", "reviews")
	vs := w.Config(model.KindVirtualService, "backend", "reviews")
	if dr == nil || vs == nil {
		t.Fatalf("DestinationRule %v, VirtualService %v", dr, vs)
	}
	subsets := map[string]bool{}
	for _, s := range dr.Object.(*networkingv1.DestinationRule).Spec.GetSubsets() {
		subsets[s.GetName()] = true
	}
	split := map[string]int32{}
	for _, r := range vs.Object.(*networkingv1.VirtualService).Spec.GetHttp()[0].GetRoute() {
		d := r.GetDestination()
		if w.ServiceByHost(d.GetHost()) == nil || !subsets[d.GetSubset()] {
			t.Errorf("route to %s subset %s: no such service or subset", d.GetHost(), d.GetSubset())
		}
		split[d.GetSubset()] = r.GetWeight()
	}
	if want := map[string]int32{"v1": 80, "v2": 20}; !reflect.DeepEqual(split, want) {
		t.Errorf("weights = %v, want %v", split, want)
	}
}
