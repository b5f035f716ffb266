package model

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
)

func svc(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: ports, Selector: map[string]string{"app": name}},
	}
}

func slice(ns, name, service string, pods map[string]string, ready bool) *discoveryv1.EndpointSlice {
	port, pname := int32(8080), "http"
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port}},
	}
	for ip, pod := range pods {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod},
		})
	}
	return es
}

func pod(ns, name, ip, sa string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{ServiceAccountName: sa},
		Status:     corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func TestStoreBuildsServicesWithHostnamesAndProtocols(t *testing.T) {
	s := NewStore(StoreOptions{DomainSuffix: "example.local"})
	http := "http"
	u, err := s.Apply(Event{Op: OpUpsert, Key: Key{KindService, "shop", "cart"}, Object: svc("shop", "cart",
		corev1.ServicePort{Name: "http-web", Port: 80, TargetPort: intstr.FromInt32(8080)},
		corev1.ServicePort{Name: "grpc", Port: 7070},
		corev1.ServicePort{Name: "metrics", Port: 9090, AppProtocol: &http},
		corev1.ServicePort{Name: "db", Port: 5432},
	)})
	if err != nil || u == nil {
		t.Fatalf("Apply = %v, %v", u, err)
	}
	got := s.World().ServiceByHost("cart.shop.svc.example.local")
	if got == nil {
		t.Fatal("service not found by host")
	}
	// "db" names no protocol Istio knows: sniffed (TestServicePortProtocols).
	want := []Protocol{ProtocolHTTP, ProtocolGRPC, ProtocolHTTP, ProtocolUnknown}
	for i, p := range got.Ports {
		if p.Protocol != want[i] {
			t.Errorf("port %s: protocol %s, want %s", p.Name, p.Protocol, want[i])
		}
	}
	if got.Ports[0].TargetPort != "8080" || got.Ports[1].TargetPort != "7070" {
		t.Errorf("target ports = %q, %q", got.Ports[0].TargetPort, got.Ports[1].TargetPort)
	}
	if u.World.Version != 1 || len(u.Changes) != 1 || u.Changes[0].Key.Kind != KindService {
		t.Errorf("update = version %d, changes %v", u.World.Version, u.Changes)
	}
}

func TestStoreJoinsEndpointsWithPodsInEitherOrder(t *testing.T) {
	s := NewStore(StoreOptions{})
	if _, err := s.Apply(Event{
		Op: OpUpsert, Key: Key{KindEndpointSlice, "shop", "cart-1"},
		Object: slice("shop", "cart-1", "cart", map[string]string{"10.1.0.1": "cart-a"}, true),
	}); err != nil {
		t.Fatal(err)
	}
	eps := s.World().Endpoints("shop", "cart")
	if eps == nil || len(eps.Endpoints) != 1 || eps.Endpoints[0].ServiceAccount != "" {
		t.Fatalf("endpoints before the pod = %+v", eps)
	}
	u, err := s.Apply(Event{
		Op: OpUpsert, Key: Key{KindPod, "shop", "cart-a"},
		Object: pod("shop", "cart-a", "10.1.0.1", "cart-sa", map[string]string{"app": "cart", LabelLocality: "eu.west-1a.rack1"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !u.Kinds()[KindEndpoints] || !u.Kinds()[KindPod] {
		t.Fatalf("changes = %v, want Pod and Endpoints", u.Changes)
	}
	ep := s.World().Endpoints("shop", "cart").Endpoints[0]
	if ep.ServiceAccount != "cart-sa" || ep.Labels["app"] != "cart" || ep.Locality != (Locality{"eu", "west-1a", "rack1"}) {
		t.Errorf("endpoint after the pod = %+v", ep)
	}
	if p, ok := ep.PortFor("http"); !ok || p != 8080 {
		t.Errorf("PortFor(http) = %d, %v", p, ok)
	}
	if s.World().PodByIP("10.1.0.1") == nil {
		t.Error("pod not indexed by IP")
	}
}

func TestStoreSkipsChangesTheMeshCannotSee(t *testing.T) {
	s := NewStore(StoreOptions{})
	p := pod("shop", "a", "10.1.0.1", "sa", nil)
	if u, _ := s.Apply(Event{Op: OpUpsert, Key: Key{KindPod, "shop", "a"}, Object: p}); u == nil {
		t.Fatal("first pod upsert published nothing")
	}
	p2 := p.DeepCopy()
	p2.Status.StartTime = &metav1.Time{}
	p2.ResourceVersion = "2"
	if u, _ := s.Apply(Event{Op: OpUpsert, Key: Key{KindPod, "shop", "a"}, Object: p2}); u != nil {
		t.Errorf("an invisible pod change published %v", u.Changes)
	}
	if s.World().Version != 1 {
		t.Errorf("version = %d, want 1", s.World().Version)
	}
}

func TestStoreEndpointSliceMovesBetweenServicesAndDeletes(t *testing.T) {
	s := NewStore(StoreOptions{})
	es := slice("shop", "s1", "a", map[string]string{"10.1.0.1": "p"}, true)
	mustApply(t, s, Event{Op: OpUpsert, Key: Key{KindEndpointSlice, "shop", "s1"}, Object: es})
	moved := es.DeepCopy()
	moved.Labels[LabelServiceName] = "b"
	mustApply(t, s, Event{Op: OpUpsert, Key: Key{KindEndpointSlice, "shop", "s1"}, Object: moved})
	if s.World().Endpoints("shop", "a") != nil || s.World().Endpoints("shop", "b") == nil {
		t.Fatal("slice did not move from a to b")
	}
	u := mustApply(t, s, Event{Op: OpDelete, Key: Key{KindEndpointSlice, "shop", "s1"}})
	if s.World().Endpoints("shop", "b") != nil {
		t.Fatal("endpoints remain after the slice was deleted")
	}
	if !u.EndpointsOnly() {
		t.Errorf("slice delete: EndpointsOnly = false for %v", u.Changes)
	}
}

func TestStoreKeepsOldWorldsUnchanged(t *testing.T) {
	s := NewStore(StoreOptions{})
	mustApply(t, s, Event{Op: OpUpsert, Key: Key{KindService, "shop", "a"}, Object: svc("shop", "a")})
	old := s.World()
	mustApply(t, s, Event{Op: OpUpsert, Key: Key{KindService, "shop", "b"}, Object: svc("shop", "b")})
	mustApply(t, s, Event{Op: OpDelete, Key: Key{KindService, "shop", "a"}})
	if old.ServiceCount() != 1 || old.Service("shop", "a") == nil {
		t.Errorf("an earlier World changed: %d services", old.ServiceCount())
	}
	if s.World().ServiceCount() != 1 || s.World().Service("shop", "b") == nil {
		t.Errorf("current World wrong: %d services", s.World().ServiceCount())
	}
}

func TestStoreHoldsIstioConfigsAndRefusesWrongTypes(t *testing.T) {
	s := NewStore(StoreOptions{})
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "shop", ResourceVersion: "5"}}
	vs.Spec.Hosts = []string{"reviews"}
	var got []*Update
	s.Subscribe(func(u *Update) { got = append(got, u) })
	_, err := s.Apply(
		Event{Op: OpUpsert, Key: Key{KindVirtualService, "shop", "r"}, Object: vs},
		Event{Op: OpUpsert, Key: Key{KindDestinationRule, "shop", "wrong"}, Object: vs},
	)
	if err == nil {
		t.Error("a VirtualService filed as a DestinationRule was accepted")
	}
	if c := s.World().Config(KindVirtualService, "shop", "r"); c == nil {
		t.Fatal("VirtualService missing although the other event failed")
	}
	// An informer resync with the same resourceVersion changes nothing.
	if u, _ := s.Apply(Event{Op: OpUpsert, Key: Key{KindVirtualService, "shop", "r"}, Object: vs}); u != nil {
		t.Errorf("resync published %v", u.Changes)
	}
	mustApply(t, s, Event{Op: OpDelete, Key: Key{KindVirtualService, "shop", "r"}})
	if len(s.World().Configs(KindVirtualService)) != 0 {
		t.Error("VirtualService not deleted")
	}
	if len(got) != 2 {
		t.Errorf("subscriber saw %d updates, want 2", len(got))
	}
}

func TestKindForAcceptsOlderIstioVersions(t *testing.T) {
	tests := map[string]struct {
		group, version, kind string
		ok                   bool
	}{
		"networking v1":                 {GroupNetworking, "v1", "VirtualService", true},
		"networking v1alpha3":           {GroupNetworking, "v1alpha3", "Gateway", true},
		"security v1beta1":              {GroupSecurity, "v1beta1", "AuthorizationPolicy", true},
		"security v1alpha3 is not real": {GroupSecurity, "v1alpha3", "AuthorizationPolicy", false},
		"a kind in the wrong group":     {GroupSecurity, "v1", "VirtualService", false},
		"an unknown kind":               {"apps", "v1", "Deployment", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := KindFor(schemaGVK(tt.group, tt.version, tt.kind))
			if (err == nil) != tt.ok {
				t.Errorf("KindFor: err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func mustApply(t *testing.T, s *Store, evs ...Event) *Update {
	t.Helper()
	u, err := s.Apply(evs...)
	if err != nil {
		t.Fatal(err)
	}
	if u == nil {
		t.Fatal("Apply published nothing")
	}
	return u
}

func schemaGVK(g, v, k string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: g, Version: v, Kind: k}
}

func TestStoreMarksStatusOnlyConfigChanges(t *testing.T) {
	base := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "shop", ResourceVersion: "1", Labels: map[string]string{"team": "a"}}}
	base.Spec.Hosts = []string{"reviews"}
	tests := map[string]struct {
		edit       func(*networkingv1.VirtualService)
		statusOnly bool
	}{
		"a status condition written by discovery is status-only": {edit: func(v *networkingv1.VirtualService) {
			v.Status.ObservedGeneration = 3
		}, statusOnly: true},
		"managed fields alone are status-only": {edit: func(v *networkingv1.VirtualService) {
			v.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "discovery"}}
		}, statusOnly: true},
		"a spec change pushes":        {edit: func(v *networkingv1.VirtualService) { v.Spec.Hosts = []string{"ratings"} }},
		"a label change pushes":       {edit: func(v *networkingv1.VirtualService) { v.Labels = map[string]string{"team": "b"} }},
		"an annotation change pushes": {edit: func(v *networkingv1.VirtualService) { v.Annotations = map[string]string{"x": "y"} }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewStore(StoreOptions{})
			key := Key{KindVirtualService, "shop", "r"}
			mustApply(t, s, Event{Op: OpUpsert, Key: key, Object: base.DeepCopy()})
			next := base.DeepCopy()
			next.ResourceVersion = "2"
			tc.edit(next)
			u := mustApply(t, s, Event{Op: OpUpsert, Key: key, Object: next})
			if len(u.Changes) != 1 || u.Changes[0].StatusOnly != tc.statusOnly {
				t.Fatalf("changes %+v, want one with StatusOnly %v", u.Changes, tc.statusOnly)
			}
			if s.World().Config(KindVirtualService, "shop", "r").Object != next {
				t.Error("the World does not hold the newest object (its status is read by the auditor)")
			}
		})
	}
}

// Services and Configs are listed once per map and shared by the Worlds
// that did not change it: every World's listing is still its own, sorted,
// and a caller's changes to one do not reach the next caller.
func TestWorldListingsFollowTheirMaps(t *testing.T) {
	s := NewStore(StoreOptions{})
	names := func(ss []*Service) (out []string) {
		for _, x := range ss {
			out = append(out, x.Namespace+"/"+x.Name)
		}
		return out
	}
	vsNames := func(cs []*Config) (out []string) {
		for _, c := range cs {
			out = append(out, c.Key.Namespace+"/"+c.Key.Name)
		}
		return out
	}
	vs := func(ns, name string) Event {
		v := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1"}}
		v.Spec.Hosts = []string{name}
		return Event{Op: OpUpsert, Key: Key{KindVirtualService, ns, name}, Object: v}
	}
	mustApply(t, s, Event{Op: OpUpsert, Key: Key{KindService, "shop", "b"}, Object: svc("shop", "b")},
		Event{Op: OpUpsert, Key: Key{KindService, "app", "z"}, Object: svc("app", "z")}, vs("shop", "r2"))
	w1 := s.World()
	if got := names(w1.Services()); !slices.Equal(got, []string{"app/z", "shop/b"}) {
		t.Fatalf("services %v", got)
	}
	w1.Services()[0] = nil // a caller's copy
	if got := names(w1.Services()); !slices.Equal(got, []string{"app/z", "shop/b"}) {
		t.Fatalf("a caller's change reached the listing: %v", got)
	}
	// A config change shares the services' listing and lists its kind anew.
	mustApply(t, s, vs("app", "r1"))
	w2 := s.World()
	if w2.sorted.services != w1.sorted.services {
		t.Error("a VirtualService change listed the services again")
	}
	if got := vsNames(w2.Configs(KindVirtualService)); !slices.Equal(got, []string{"app/r1", "shop/r2"}) {
		t.Errorf("VirtualServices %v", got)
	}
	if got := vsNames(w1.Configs(KindVirtualService)); !slices.Equal(got, []string{"shop/r2"}) {
		t.Errorf("the earlier World's VirtualServices %v", got)
	}
	// A service change lists the services anew and shares the configs'.
	mustApply(t, s, Event{Op: OpUpsert, Key: Key{KindService, "shop", "a"}, Object: svc("shop", "a")})
	w3 := s.World()
	if got := names(w3.Services()); !slices.Equal(got, []string{"app/z", "shop/a", "shop/b"}) {
		t.Errorf("services after an addition %v", got)
	}
	if got := names(w2.Services()); !slices.Equal(got, []string{"app/z", "shop/b"}) {
		t.Errorf("the earlier World's services %v", got)
	}
	if w3.sorted.configList(KindVirtualService) != w2.sorted.configList(KindVirtualService) {
		t.Error("a service change listed the VirtualServices again")
	}
	mustApply(t, s, Event{Op: OpDelete, Key: Key{KindVirtualService, "shop", "r2"}})
	if got := vsNames(s.World().Configs(KindVirtualService)); !slices.Equal(got, []string{"app/r1"}) {
		t.Errorf("VirtualServices after a deletion %v", got)
	}
}
