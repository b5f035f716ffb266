package model

import (
	"testing"

	"google.golang.org/protobuf/proto"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHealthCheckedWorkloadEntryIsAnEndpointOnlyWhileHealthy(t *testing.T) {
	s := NewStore(StoreOptions{})
	if _, err := s.Apply(serviceEntry("shop", "ratings", "1", &apinetworking.ServiceEntry{
		Hosts: []string{"ratings.shop.internal"}, Location: apinetworking.ServiceEntry_MESH_INTERNAL,
		Ports:            []*apinetworking.ServicePort{{Number: 9080, Name: "http", Protocol: "HTTP"}},
		Resolution:       apinetworking.ServiceEntry_STATIC,
		WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "ratings"}},
	})); err != nil {
		t.Fatal(err)
	}
	vm := func(rv string, annotations map[string]string, healthy string) Event {
		we := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: "ratings-10.0.0.7", Namespace: "shop", ResourceVersion: rv, Annotations: annotations}}
		proto.Merge(&we.Spec, &apinetworking.WorkloadEntry{Address: "10.0.0.7", Labels: map[string]string{"app": "ratings"}})
		if healthy != "" {
			we.Status.Conditions = []*metav1alpha1.IstioCondition{{Type: "Healthy", Status: healthy}}
		}
		return Event{Op: OpUpsert, Key: Key{KindWorkloadEntry, "shop", we.Name}, Object: we}
	}
	checked := map[string]string{"proxy.istio.io/health-checks-enabled": "true"}
	cases := []struct {
		name string
		ev   Event
		want int
	}{
		{"an entry without health checks is an endpoint", vm("1", nil, ""), 1},
		{"a health-checked entry not probed yet is not", vm("2", checked, ""), 0},
		{"one reported healthy is", vm("3", checked, "True"), 1},
		{"one reported unhealthy is not", vm("4", checked, "False"), 0},
	}
	for _, tc := range cases {
		if _, err := s.Apply(tc.ev); err != nil {
			t.Fatal(err)
		}
		n := 0
		if eps := s.World().Endpoints("shop", "ratings.shop.internal"); eps != nil {
			n = len(eps.Endpoints)
		}
		if n != tc.want {
			t.Errorf("%s: %d endpoints, want %d", tc.name, n, tc.want)
		}
	}
}
