package gen

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// namespaceProxy is a sidecar of ns as the load tool's injected ones
// are: labelled, with its service tags.
func namespaceProxy(t testing.TB, ns string) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.9.0.1~web.%s~%s.svc.cluster.local", ns, ns),
		map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": ns, model.MetaLabels: map[string]any{"app": "web", canonicalNameLabel: "web"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkClassesOfNamespaces generates the 50 namespace classes of the
// 1,000-service World one after the other with a fresh generator, as
// the server does when 1,000 proxies of 50 namespaces connect (M1:
// listeners per address, shared service tags).
func BenchmarkClassesOfNamespaces(b *testing.B) {
	store := world1000(b)
	w := store.World()
	ps := make([]*model.Proxy, 50)
	for i := range ps {
		ps[i] = namespaceProxy(b, fmt.Sprintf("ns-%d", i))
	}
	opts := DefaultOptions(quietLog())
	opts.ListenersPerAddress, opts.SharedTags = true, true
	before := liveHeap()
	held := make([]*ClassConfig, len(ps))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, err := New(opts)
		if err != nil {
			b.Fatal(err)
		}
		for j, p := range ps {
			if held[j], err = g.Class(w, p, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	// What the classes hold, with their sets' Versions as the server's
	// streams take them: the heap they keep alive between generations.
	for _, cc := range held {
		for _, s := range cc.Sets {
			s.Versions()
		}
	}
	b.ReportMetric(float64(liveHeap()-before)/1e6, "held-MB")
	runtime.KeepAlive(held)
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSiblingClassesTakeWhatStands generates the classes of four
// namespaces one after the other, each taking from the one before
// (class_sibling.go), and requires of each what generation from nothing
// gives; and that what it took is what stands: the units of the
// services of the other two namespaces and the port listeners, one for
// both, and the clusters of the services of its own and the donor's
// namespace, whose routes (their short names) are its own.
func TestSiblingClassesTakeWhatStands(t *testing.T) {
	w := fourNamespaces(t)
	g, o := newWithOptions(t, true, true)
	var prev *ClassConfig
	for i := range 4 {
		ns := fmt.Sprintf("ns-%d", i)
		p := namespaceProxy(t, ns)
		cc := mustClass(t, g, w, p, nil)
		fresh, err := freshClass(w, p, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range TypeURLs {
			if got, want := cc.Sets[typ], fresh.Sets[typ]; got.Version != want.Version {
				t.Fatalf("%s: %s differs from a class generated from nothing in %v", ns, ShortType(typ), changed(got, want))
			}
		}
		if prev == nil {
			prev = cc
			continue
		}
		donorNS := prev.scope.Proxy.Namespace
		taken, own := 0, 0
		for _, u := range cc.units {
			d := prev.unitOf(u.svc.Key())
			if d == nil || len(u.routes) == 0 || len(u.clusters) == 0 {
				t.Fatalf("%s: %s has no routes or clusters, or no unit in the donor", ns, u.svc.Key())
			}
			if u.bloom.always {
				// The namespace questions give no token: a unit asked
				// after every change walks its reads every time.
				t.Errorf("%s: the unit of %s is asked after every change", ns, u.svc.Key())
			}
			sameRoutes := &u.routes[0] == &d.routes[0]
			switch mine := u.svc.Namespace == ns || u.svc.Namespace == donorNS; {
			case mine && sameRoutes:
				t.Errorf("%s: the routes of %s (short names differ) are the donor's", ns, u.svc.Key())
			case mine && u.clusterReads != d.clusterReads:
				t.Errorf("%s: the clusters of %s were taken anew: the donor's stand", ns, u.svc.Key())
			case !mine && u != d:
				t.Errorf("%s: the unit of %s was built again: the donor's stands", ns, u.svc.Key())
			case mine:
				own++
			default:
				taken++
			}
		}
		if taken == 0 || own == 0 {
			t.Errorf("%s: %d units taken, %d built: the test shows nothing", ns, taken, own)
		}
		for port, pu := range cc.ports {
			if d := prev.ports[port]; d == nil || pu.split == nil || pu.split != d.split {
				t.Errorf("%s: the listeners of port %d were built again: the donor's stand", ns, port)
			}
		}
		if len(cc.ports) == 0 {
			t.Fatalf("%s: no port listeners", ns)
		}
		prev = cc
	}
}

func TestFamilyOf(t *testing.T) {
	p := namespaceProxy(t, "ns-0")
	base := p.Class()
	for _, c := range []struct {
		key    string
		shared bool
		want   string
	}{
		{base, false, "sidecar/envoy//1.32"},
		{base + "|trace=x,-", false, "sidecar/envoy//1.32|trace=x,-"},
		{base + "|tags=web,,,", true, "sidecar/envoy//1.32"},
		{base + "|tags=web,,,", false, "sidecar/envoy//1.32|tags=web,,,"},
		{base + "|trace=x,-|tags=web,,,", true, "sidecar/envoy//1.32|trace=x,-"},
		{base + "|dr=a", false, ""},
		{base + "|src=d|tags=web,,,", true, ""},
		{base + "|sidecar=s", false, ""},
		{base + "|tel=a", false, ""},
		{base + "|lb=x", false, ""},
		{base + "|ef=a@1", false, ""},
		{base + "|wasm=a@1", false, ""},
		{base + "|new=a", false, ""},
		{"sidecar/envoy/ns-1/1.32", false, ""},
	} {
		if got := familyOf(c.key, p, c.shared); got != c.want {
			t.Errorf("familyOf(%q, shared=%v) = %q, want %q", c.key, c.shared, got, c.want)
		}
	}
	gw, err := model.ParseProxy("router~10.9.0.2~gw.ns-0~ns-0.svc.cluster.local", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := familyOf(gw.Class(), gw, false); got != "" {
		t.Errorf("a gateway's family is %q: gateways take nothing from siblings", got)
	}
}

// TestSiblingClassesConcurrently generates the classes of eight
// namespaces at once, as the server's workers do, then again after a
// VirtualService edit from their previous configurations: each is what
// generation from nothing gives, and at first the classes started
// together waited for the first one and took its port listeners. Run
// with -race it checks that a donor is only read.
func TestSiblingClassesConcurrently(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(24, 8, 2)...); err != nil {
		t.Fatal(err)
	}
	g, o := newWithOptions(t, true, true)
	ps := make([]*model.Proxy, 8)
	for i := range ps {
		ps[i] = namespaceProxy(t, fmt.Sprintf("ns-%d", i))
	}
	prev := make([]*ClassConfig, len(ps))
	for round := range 2 {
		if round == 1 {
			if _, err := store.Apply(vsEvent("ns-3", "svc-3", "svc-3", "1", 30, 70)); err != nil {
				t.Fatal(err)
			}
		}
		w := store.World()
		var wg sync.WaitGroup
		errs := make([]error, len(ps))
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				prev[i], errs[i] = g.Class(w, p, prev[i])
			}()
		}
		wg.Wait()
		if round == 0 {
			splits := map[*addressSplit]bool{}
			for _, cc := range prev {
				if cc != nil && cc.ports[80] != nil {
					splits[cc.ports[80].split] = true
				}
			}
			if len(splits) != 1 {
				t.Errorf("the classes generated together hold %d splits of port 80's listeners, want the first's", len(splits))
			}
		}
		for i, p := range ps {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			fresh, err := freshClass(w, p, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, typ := range TypeURLs {
				if got, want := prev[i].Sets[typ], fresh.Sets[typ]; got.Version != want.Version {
					t.Fatalf("round %d, %s: %s differs from a class generated from nothing in %v", round, p.Namespace, ShortType(typ), changed(got, want))
				}
			}
		}
	}
}

// BenchmarkClassesOfNamespacesAfterEdit regenerates the 50 namespace
// classes of BenchmarkClassesOfNamespaces from their previous
// configurations after one VirtualService edit, as a push does.
func BenchmarkClassesOfNamespacesAfterEdit(b *testing.B) {
	benchNamespacesAfter(b, func(i int) model.Event {
		return vsEvent("ns-7", "svc-7", "svc-7", fmt.Sprint(i), int32(1+i%9), 10)
	})
}

// BenchmarkClassesOfNamespacesAfterServiceChange regenerates the 50
// namespace classes of the 1,000-service World after a service is added,
// and after it is removed again, one after the other (M1's service
// changes: listeners per address, shared service tags).
func BenchmarkClassesOfNamespacesAfterServiceChange(b *testing.B) {
	svc := worldtest.Service("ns-9", "added", "10.97.0.1")
	benchNamespacesAfter(b, func(i int) model.Event {
		ev := svc
		if i%2 == 1 {
			ev.Op, ev.Object = model.OpDelete, nil
		}
		return ev
	})
}

// benchNamespacesAfter generates the 50 namespace classes of the
// 1,000-service World, then times their regeneration from their previous
// configurations after each change(i).
func benchNamespacesAfter(b *testing.B, change func(int) model.Event) {
	store := world1000(b)
	ps := make([]*model.Proxy, 50)
	for i := range ps {
		ps[i] = namespaceProxy(b, fmt.Sprintf("ns-%d", i))
	}
	g, _ := newWithOptions(b, true, true)
	prev := make([]*ClassConfig, len(ps))
	gen := func() {
		w := store.World()
		for i, p := range ps {
			var err error
			if prev[i], err = g.Class(w, p, prev[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	gen()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if _, err := store.Apply(change(i)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		gen()
	}
}

// fourNamespaces is the World of the sibling tests: 16 services in four
// namespaces, two ports each.
func fourNamespaces(t *testing.T) *model.World {
	t.Helper()
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(16, 4, 2)...); err != nil {
		t.Fatal(err)
	}
	return store.World()
}

// TestEqualSetsShared: classes that build equal sets publish one of them
// (setsPool), and sets that differ stay their own: the namespaces'
// clusters are the same, their routes name their own services by short
// names.
func TestEqualSetsShared(t *testing.T) {
	w := fourNamespaces(t)
	g, _ := newWithOptions(t, true, true)
	a := mustClass(t, g, w, namespaceProxy(t, "ns-0"), nil)
	b := mustClass(t, g, w, namespaceProxy(t, "ns-1"), nil)
	for _, typ := range []string{ClusterType, EndpointType} {
		if a.Sets[typ] != b.Sets[typ] {
			t.Errorf("%s: equal sets not shared", ShortType(typ))
		}
	}
	if a.Sets[RouteType] == b.Sets[RouteType] || a.Sets[RouteType].equals(b.Sets[RouteType]) {
		t.Errorf("the namespaces' routes are one set; want each its own short names")
	}
	// A class generated apart, by another generator, shares them too.
	g2, _ := newWithOptions(t, true, true)
	c := mustClass(t, g2, w, namespaceProxy(t, "ns-2"), nil)
	if c.Sets[ClusterType] != a.Sets[ClusterType] {
		t.Errorf("another generator's equal clusters not shared")
	}
	runtime.KeepAlive(a)
}

// TestGroupsAreTheSet: a class's groups (ClassConfig.Groups), where it
// gives them, hold each resource of its set once, as the set has it;
// sibling classes give the same slices for the units one took from the
// other; a variant gives its base's; a set whose names were taken out
// gives none.
func TestGroupsAreTheSet(t *testing.T) {
	w := fourNamespaces(t)
	g, _ := newWithOptions(t, true, true)
	pa, pb := namespaceProxy(t, "ns-0"), namespaceProxy(t, "ns-1")
	a := mustClass(t, g, w, pa, nil)
	b := mustClass(t, g, w, pb, nil)
	for _, cc := range []*ClassConfig{a, b} {
		for typ, set := range cc.Sets {
			groups := cc.Groups(typ)
			if groups == nil {
				if typ == RouteType {
					t.Fatalf("%s: no groups for the routes", cc.Class)
				}
				continue
			}
			seen := map[string]bool{}
			for _, gr := range groups {
				for _, r := range gr {
					if seen[r.Name] {
						t.Errorf("%s %s: %s in two groups", cc.Class, ShortType(typ), r.Name)
					}
					seen[r.Name] = true
					if h, ok := set.Hash(r.Name); !ok || h != r.Hash {
						t.Errorf("%s %s: group's %s is not the set's", cc.Class, ShortType(typ), r.Name)
					}
				}
			}
			if len(seen) != set.Len() {
				t.Errorf("%s %s: groups hold %d resources, the set %d", cc.Class, ShortType(typ), len(seen), set.Len())
			}
		}
	}
	// b took the units of ns-2's and ns-3's services from a: the same
	// slices.
	first := map[**Resource]bool{}
	for _, gr := range a.Groups(RouteType) {
		first[&gr[0]] = true
	}
	shared := 0
	for _, gr := range b.Groups(RouteType) {
		if first[&gr[0]] {
			shared++
		}
	}
	if shared == 0 {
		t.Error("sibling classes share no group of routes")
	}
	key := ClassKey(w, pb)
	v, ok := g.Variant(b, key, pb, nil)
	if !ok {
		t.Fatalf("no variant for %s", key)
	}
	if vg, bg := v.Groups(RouteType), b.Groups(RouteType); len(vg) != len(bg) || &vg[0][0] != &bg[0][0] {
		t.Error("a variant's groups are not its base's")
	}
	// Endpoints updated: the set is no longer its builder's.
	svc := model.NamespacedName{Namespace: "ns-1", Name: "svc-1"}
	up, _ := g.UpdateEndpoints(b, w, []model.NamespacedName{svc})
	if up.Groups(EndpointType) != nil {
		t.Error("groups for endpoints updated since generation")
	}
}
