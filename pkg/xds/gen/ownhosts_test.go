package gen

import (
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A hostname several services have belongs to one of them per proxy
// namespace, as in istiod's sidecar scope.
func TestOwnHosts(t *testing.T) {
	kube := func(ns, host string) *model.Service {
		return &model.Service{Name: "svc", Namespace: ns, Hostname: host}
	}
	entry := func(ns, name, host string) *model.Service {
		return &model.Service{Name: name, Namespace: ns, Hostname: host, Entry: &model.ServiceEntryInfo{Name: name}}
	}
	keys := func(svcs []*model.Service) (out []string) {
		for _, s := range svcs {
			out = append(out, s.Namespace+"/"+s.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []*model.Service
		ns   string
		want []string
	}{
		{"distinct hosts are all kept", []*model.Service{kube("a", "x.a"), entry("b", "e", "y.b")}, "c", []string{"a/svc", "b/e"}},
		{"a Service beats an entry of its name elsewhere", []*model.Service{kube("a", "x.a"), entry("b", "squat", "x.a")}, "c", []string{"a/svc"}},
		{"a Service beats an entry of its name in its namespace", []*model.Service{entry("a", "e", "x.a"), kube("a", "x.a")}, "c", []string{"a/svc"}},
		{"the proxy's namespace wins over a Service elsewhere", []*model.Service{kube("a", "x.a"), entry("c", "mine", "x.a")}, "c", []string{"c/mine"}},
		{"else the first", []*model.Service{entry("a", "e1", "h"), entry("b", "e2", "h")}, "c", []string{"a/e1"}},
		{"entries of one namespace share a host", []*model.Service{entry("a", "e1", "h"), entry("a", "e2", "h")}, "c", []string{"a/e1", "a/e2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := keys(ownHosts(tc.in, tc.ns))
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// An ExternalName Service is an alias: no clusters of its own, and the
// host it names answers to its names.
func TestExternalNameAlias(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	alias := worldtest.Service("ns-0", "legacy", "")
	svcObj := alias.Object.(*corev1.Service)
	svcObj.Spec.Type = corev1.ServiceTypeExternalName
	svcObj.Spec.ExternalName = "svc-1.ns-1.svc.cluster.local"
	svcObj.Spec.ClusterIP, svcObj.Spec.ClusterIPs = "", nil
	if _, err := store.Apply(append(worldtest.Mesh(2, 2, 1), alias)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	cc, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cc.Sets[ClusterType].Names {
		if strings.Contains(n, "legacy.ns-0") {
			t.Errorf("the alias has a cluster of its own: %s", n)
		}
	}
	rc := classResource(t, cc, RouteType, RouteName("svc-1.ns-1.svc.cluster.local", 80)).(*routev3.RouteConfiguration)
	domains := strings.Join(rc.GetVirtualHosts()[0].GetDomains(), " ")
	for _, want := range []string{"legacy.ns-0.svc.cluster.local", "legacy", "legacy.ns-0:80"} {
		if !strings.Contains(" "+domains+" ", " "+want+" ") {
			t.Errorf("domains %q lack %s", domains, want)
		}
	}
	// Removing the alias must reach the reused route.
	if _, err := store.Apply(model.Event{Op: model.OpDelete, Key: alias.Key}); err != nil {
		t.Fatal(err)
	}
	after, err := g.Class(store.World(), p, cc)
	if err != nil {
		t.Fatal(err)
	}
	rc = classResource(t, after, RouteType, RouteName("svc-1.ns-1.svc.cluster.local", 80)).(*routev3.RouteConfiguration)
	if d := strings.Join(rc.GetVirtualHosts()[0].GetDomains(), " "); strings.Contains(d, "legacy") {
		t.Errorf("after the alias is gone the domains still name it: %s", d)
	}
}

// A class looks for the owners of its services' hosts only when the World
// says one of them is shared.
func TestHostShared(t *testing.T) {
	a := &model.Service{Name: "svc", Namespace: "a", Hostname: "x.a"}
	b := &model.Service{Name: "svc", Namespace: "b", Hostname: "y.b"}
	for _, tc := range []struct {
		svcs   []*model.Service
		shared []string
		want   bool
	}{
		{[]*model.Service{a, b}, nil, false},
		{[]*model.Service{a, b}, []string{"x.a"}, true},
		{[]*model.Service{a, b}, []string{"w", "y.b", "z"}, true},
		{[]*model.Service{b}, []string{"x.a"}, false},
		{nil, []string{"x.a"}, false},
	} {
		if got := hostShared(tc.svcs, tc.shared); got != tc.want {
			t.Errorf("hostShared(%d services, %v) = %v, want %v", len(tc.svcs), tc.shared, got, tc.want)
		}
	}
}

// A ServiceEntry in another namespace that names a Service's host is left
// out of a class's clusters, also once it comes after the class was
// generated (the class then reuses what it had).
func TestSquattingEntryLeftOut(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(4, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	before, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := worldtest.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: squat, namespace: ns-1}
spec:
  hosts: [svc-0.ns-0.svc.cluster.local]
  ports: [{number: 9999, name: http, protocol: HTTP}]
  resolution: DNS
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	if shared := store.World().SharedHostnames(); len(shared) != 1 {
		t.Fatalf("SharedHostnames = %v: the test shows nothing", shared)
	}
	for what, prev := range map[string]*ClassConfig{"fresh": nil, "regenerated": before} {
		cc, err := g.Class(store.World(), p, prev)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range cc.Sets[ClusterType].Names {
			if strings.Contains(n, "|9999|") {
				t.Errorf("%s: the squatting entry has a cluster: %s", what, n)
			}
		}
	}
}
