package model

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// bigStore holds 1,000 services in 50 namespaces with 10 endpoints each.
func bigStore(b *testing.B) *Store {
	b.Helper()
	s := NewStore(StoreOptions{})
	var evs []Event
	for i := range 1000 {
		ns, name := fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("svc-%d", i)
		evs = append(evs, Event{
			Op: OpUpsert, Key: Key{KindService, ns, name},
			Object: svc(ns, name, corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "grpc", Port: 7070}),
		})
		pods := map[string]string{}
		for j := range 10 {
			pods[fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)] = fmt.Sprintf("%s-%d", name, j)
		}
		evs = append(evs, Event{Op: OpUpsert, Key: Key{KindEndpointSlice, ns, name + "-1"}, Object: slice(ns, name+"-1", name, pods, true)})
	}
	if _, err := s.Apply(evs...); err != nil {
		b.Fatal(err)
	}
	return s
}

// One EndpointSlice change in a 1,000-service World: the cost of
// publishing a new World (copy-on-write of the touched maps only).
func BenchmarkApplyOneEndpointChange(b *testing.B) {
	s := bigStore(b)
	ready := []*Event{}
	for i := range 2 {
		es := slice("ns-7", "svc-7-1", "svc-7", map[string]string{"10.0.7.1": "svc-7-0", "10.0.7.2": "svc-7-1"}, i == 0)
		ready = append(ready, &Event{Op: OpUpsert, Key: Key{KindEndpointSlice, "ns-7", "svc-7-1"}, Object: es})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if u, err := s.Apply(*ready[i%2]); err != nil || u == nil {
			b.Fatalf("Apply = %v, %v", u, err)
		}
	}
}

// One Service change in a 1,000-service World.
func BenchmarkApplyOneServiceChange(b *testing.B) {
	s := bigStore(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		sv := svc("ns-7", "svc-7", corev1.ServicePort{Name: "http", Port: int32(80 + i%2)})
		if u, err := s.Apply(Event{Op: OpUpsert, Key: Key{KindService, "ns-7", "svc-7"}, Object: sv}); err != nil || u == nil {
			b.Fatalf("Apply = %v, %v", u, err)
		}
	}
}
