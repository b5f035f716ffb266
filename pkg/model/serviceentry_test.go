package model

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func serviceEntry(ns, name, rv string, spec *apinetworking.ServiceEntry) Event {
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: rv}}
	proto.Merge(&se.Spec, spec)
	return Event{Op: OpUpsert, Key: Key{KindServiceEntry, ns, name}, Object: se}
}

func workloadEntry(ns, name, rv string, spec *apinetworking.WorkloadEntry) Event {
	we := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: rv}}
	proto.Merge(&we.Spec, spec)
	return Event{Op: OpUpsert, Key: Key{KindWorkloadEntry, ns, name}, Object: we}
}

func TestServiceEntryHostsBecomeServicesWithInlineEndpoints(t *testing.T) {
	s := NewStore(StoreOptions{})
	_, err := s.Apply(serviceEntry("ext", "api", "1", &apinetworking.ServiceEntry{
		Hosts:      []string{"api.example.com", "api2.example.com"},
		Addresses:  []string{"240.0.0.1/32"},
		Ports:      []*apinetworking.ServicePort{{Number: 443, Name: "https", Protocol: "HTTPS"}, {Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}},
		Resolution: apinetworking.ServiceEntry_STATIC,
		Endpoints: []*apinetworking.WorkloadEntry{
			{Address: "10.2.0.1", Ports: map[string]uint32{"http": 9090}, Locality: "r1/z1", Weight: 3, ServiceAccount: "api"},
			{Address: "10.2.0.2"},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	w := s.World()
	svc := w.ServiceByHost("api.example.com")
	if svc == nil || w.ServiceByHost("api2.example.com") == nil {
		t.Fatalf("hosts not found: %v", w.Services())
	}
	if svc.Entry == nil || svc.Entry.Resolution != ResolutionStatic || !svc.Entry.External || svc.Entry.Name != "api" {
		t.Errorf("Entry = %+v", svc.Entry)
	}
	if len(svc.Addresses) != 1 || svc.Addresses[0] != "240.0.0.1" {
		t.Errorf("Addresses = %v", svc.Addresses)
	}
	if p, _ := svc.PortByNumber(80); p.Protocol != ProtocolHTTP || p.TargetPort != "8080" {
		t.Errorf("port 80 = %+v", p)
	}
	eps := w.Endpoints("ext", "api.example.com")
	if eps == nil || len(eps.Endpoints) != 2 {
		t.Fatalf("endpoints = %+v", eps)
	}
	e := eps.Endpoints[0]
	if e.Address != "10.2.0.1" || e.Weight != 3 || e.Locality != (Locality{Region: "r1", Zone: "z1"}) || e.ServiceAccount != "api" {
		t.Errorf("endpoint = %+v", e)
	}
	if p, ok := e.PortFor("http"); !ok || p != 9090 {
		t.Errorf("PortFor(http) = %d, %v", p, ok)
	}
}

func TestServiceEntryWorkloadSelectorFollowsWorkloadEntriesAndPods(t *testing.T) {
	s := NewStore(StoreOptions{})
	_, err := s.Apply(
		serviceEntry("db", "mysql", "1", &apinetworking.ServiceEntry{
			Hosts: []string{"mysql.db.internal"}, Location: apinetworking.ServiceEntry_MESH_INTERNAL,
			Ports:            []*apinetworking.ServicePort{{Number: 3306, Name: "tcp", Protocol: "TCP"}},
			Resolution:       apinetworking.ServiceEntry_STATIC,
			WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "mysql"}},
		}),
		workloadEntry("db", "vm1", "1", &apinetworking.WorkloadEntry{Address: "10.9.0.1", Labels: map[string]string{"app": "mysql"}}),
		workloadEntry("db", "other", "1", &apinetworking.WorkloadEntry{Address: "10.9.0.2", Labels: map[string]string{"app": "web"}}),
		workloadEntry("elsewhere", "vm2", "1", &apinetworking.WorkloadEntry{Address: "10.9.0.3", Labels: map[string]string{"app": "mysql"}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	addrs := func() []string {
		var out []string
		if eps := s.World().Endpoints("db", "mysql.db.internal"); eps != nil {
			for _, e := range eps.Endpoints {
				out = append(out, e.Address)
			}
		}
		return out
	}
	if got := addrs(); len(got) != 1 || got[0] != "10.9.0.1" {
		t.Fatalf("endpoints = %v, want [10.9.0.1]", got)
	}
	if svc := s.World().ServiceByHost("mysql.db.internal"); svc.Entry.External {
		t.Error("MESH_INTERNAL entry marked external")
	}
	before := s.World().Service("db", "mysql.db.internal")
	u, err := s.Apply(Event{Op: OpUpsert, Key: Key{KindPod, "db", "mysql-0"}, Object: pod("db", "mysql-0", "10.1.0.5", "mysql", map[string]string{"app": "mysql"})})
	if err != nil {
		t.Fatal(err)
	}
	if got := addrs(); len(got) != 2 || got[0] != "10.1.0.5" || got[1] != "10.9.0.1" {
		t.Fatalf("endpoints after pod = %v", got)
	}
	if !hasChange(u, Key{KindEndpoints, "db", "mysql.db.internal"}) {
		t.Errorf("changes %v lack the entry's endpoints", u.Changes)
	}
	if s.World().Service("db", "mysql.db.internal") != before {
		t.Error("an unchanged entry service was replaced")
	}
	if _, err := s.Apply(Event{Op: OpDelete, Key: Key{KindServiceEntry, "db", "mysql"}}); err != nil {
		t.Fatal(err)
	}
	if s.World().ServiceByHost("mysql.db.internal") != nil || len(addrs()) != 0 {
		t.Error("deleted entry still has a service or endpoints")
	}
}

func TestServiceEntryDoesNotReplaceAKubernetesServiceOfTheSameHost(t *testing.T) {
	s := NewStore(StoreOptions{})
	host := "cart.shop.svc.cluster.local"
	_, err := s.Apply(
		Event{Op: OpUpsert, Key: Key{KindService, "shop", "cart"}, Object: svc("shop", "cart")},
		serviceEntry("shop", "cart", "1", &apinetworking.ServiceEntry{Hosts: []string{host}, Ports: []*apinetworking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.World().ServiceByHost(host); got == nil || got.Entry != nil {
		t.Errorf("ServiceByHost = %+v, want the Kubernetes Service", got)
	}
}

func hasChange(u *Update, k Key) bool {
	for _, c := range u.Changes {
		if c.Key == k {
			return true
		}
	}
	return false
}

// A ServiceEntry's CIDR addresses are kept (canonical), so that listeners
// match them as prefix ranges; a /32 is its address; names are dropped.
func TestEntryAddressesKeepsCIDRs(t *testing.T) {
	got := entryAddresses([]string{"192.192.192.192/24", "10.0.0.1/32", "10.0.0.2", "2001:db8::1/64", "not-an-ip", "10.0.0.0/33"})
	want := []string{"192.192.192.0/24", "10.0.0.1", "10.0.0.2", "2001:db8::/64"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("entryAddresses = %v, want %v", got, want)
	}
}

// SharedHostnames lists the hosts several Services have, follows the
// Services as they change, and is the same list while they do not.
func TestSharedHostnames(t *testing.T) {
	s := NewStore(StoreOptions{})
	host := "cart.shop.svc.cluster.local"
	port := []*apinetworking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}
	if _, err := s.Apply(
		Event{Op: OpUpsert, Key: Key{KindService, "shop", "cart"}, Object: svc("shop", "cart")},
		Event{Op: OpUpsert, Key: Key{KindService, "shop", "web"}, Object: svc("shop", "web")},
		serviceEntry("shop", "ext", "1", &apinetworking.ServiceEntry{Hosts: []string{"api.example.com"}, Ports: port}),
	); err != nil {
		t.Fatal(err)
	}
	if got := s.World().SharedHostnames(); len(got) != 0 {
		t.Fatalf("no host is shared; SharedHostnames = %v", got)
	}
	if _, err := s.Apply(
		serviceEntry("other", "squat", "1", &apinetworking.ServiceEntry{Hosts: []string{host}, Ports: port}),
		serviceEntry("other", "ext", "1", &apinetworking.ServiceEntry{Hosts: []string{"api.example.com"}, Ports: port}),
		serviceEntry("third", "ext", "1", &apinetworking.ServiceEntry{Hosts: []string{"api.example.com"}, Ports: port}),
	); err != nil {
		t.Fatal(err)
	}
	w := s.World()
	got := w.SharedHostnames()
	if want := []string{"api.example.com", host}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("SharedHostnames = %v, want %v", got, want)
	}
	// A change that leaves the Services alone keeps the list made.
	if _, err := s.Apply(workloadEntry("shop", "vm", "1", &apinetworking.WorkloadEntry{Address: "10.9.9.9"})); err != nil {
		t.Fatal(err)
	}
	if again := s.World().SharedHostnames(); len(again) == 0 || &again[0] != &got[0] {
		t.Errorf("the Services did not change, yet the list was made again: %v", again)
	}
	if _, err := s.Apply(Event{Op: OpDelete, Key: Key{KindServiceEntry, "other", "squat"}}); err != nil {
		t.Fatal(err)
	}
	if got := s.World().SharedHostnames(); strings.Join(got, ",") != "api.example.com" {
		t.Errorf("after the squatter left: SharedHostnames = %v", got)
	}
	if w.SharedHostnames()[1] != host {
		t.Error("an earlier World's list changed")
	}
}
