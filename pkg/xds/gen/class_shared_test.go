package gen

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func sharedGen(t *testing.T, perAddress bool) *Generator {
	t.Helper()
	opts := DefaultOptions(quietLog())
	opts.ListenersPerAddress = perAddress
	opts.SharedTags = true
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// noPlaceholders fails the test if a listener of s carries a placeholder.
func noPlaceholders(t *testing.T, what string, s *Set) {
	t.Helper()
	for _, n := range s.Names {
		if bytes.Contains(s.Get(n).Wire().GetValue(), []byte(placeholderMark)) {
			t.Errorf("%s: listener %s is served with a placeholder", what, n)
		}
	}
}

// A class generated with placeholders serves every proxy of it, the
// representative too, byte for byte what its own class generated with
// its values gives, class and own parts, for every sidecar case of the
// golden tests, with port listeners and listeners per address.
func TestSharedClassesServeWhatTheirClassesDo(t *testing.T) {
	served := 0
	for _, perAddress := range []bool{false, true} {
		plainOpts := DefaultOptions(quietLog())
		plainOpts.ListenersPerAddress = perAddress
		sidecarCases(t, func(dir string, w *model.World, ps []*model.Proxy) {
			rep := ps[0]
			if !sharable(ClassKey(w, rep)) {
				return
			}
			g := sharedGen(t, perAddress)
			base := mustClass(t, g, w, rep, nil)
			if !base.Shared() {
				t.Errorf("%s: a sharable class was generated with its representative's tags", dir)
				return
			}
			baseKey, _ := VariantOf(ClassKey(w, rep))
			for _, p := range ps {
				key := ClassKey(w, p)
				if b, _ := VariantOf(key); b != baseKey {
					continue
				}
				v, ok := g.Variant(base, key, p, nil)
				if !ok {
					t.Errorf("%s: Variant refused", dir)
					continue
				}
				plain, err := New(plainOpts)
				if err != nil {
					t.Fatal(err)
				}
				want := mustClass(t, plain, w, p, nil)
				what := fmt.Sprintf("%s per-address=%v %s", filepath.Base(dir), perAddress, key)
				sameSets(t, what, v.Sets, want.Sets)
				sameSets(t, what+" own", g.Proxy(w, p, v).Own, plain.Proxy(w, p, want).Own)
				noPlaceholders(t, what, v.Sets[ListenerType])
				served++
			}
		})
	}
	if served < 20 {
		t.Errorf("only %d proxies compared: the cases lost their tracing", served)
	}
}

// The same listener of two namespaces' classes is one resource when they
// are generated with placeholders, and two (differing in the
// istio.namespace tag) when generated with their values.
func TestSharedListenersAreOneAcrossNamespaces(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(20, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	proxy := func(ns string) *model.Proxy {
		p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.9.0.1~web.%s~%s.svc.cluster.local", ns, ns),
			map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": ns, model.MetaLabels: map[string]any{"app": "web", canonicalNameLabel: "web"}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := proxy("ns-0"), proxy("ns-1")
	for _, perAddress := range []bool{false, true} {
		for _, shared := range []bool{false, true} {
			opts := DefaultOptions(quietLog())
			opts.ListenersPerAddress, opts.SharedTags = perAddress, shared
			g, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			ca, cb := mustClass(t, g, w, a, nil), mustClass(t, g, w, b, nil)
			if ca.Shared() != shared || cb.Shared() != shared {
				t.Fatalf("shared=%v: classes shared %v and %v", shared, ca.Shared(), cb.Shared())
			}
			la, lb := ca.Sets[ListenerType], cb.Sets[ListenerType]
			same, tagged := 0, 0
			for _, n := range la.Names {
				ra, rb := la.Get(n), lb.Get(n)
				if rb == nil || !bytes.Contains(ra.Wire().GetValue(), []byte("istio.namespace")) {
					continue
				}
				tagged++
				if ra == rb {
					same++
				}
			}
			what := fmt.Sprintf("per-address=%v shared=%v", perAddress, shared)
			switch {
			case tagged < 2:
				t.Fatalf("%s: %d listeners with service tags: the test shows nothing", what, tagged)
			case shared && same != tagged:
				t.Errorf("%s: %d of the %d listeners with service tags are one resource in both namespaces", what, same, tagged)
			case !shared && same != 0:
				t.Errorf("%s: %d listeners naming their namespace are one resource in two namespaces", what, same)
			}
			// Their sets' versions, which delta streams keep, are one
			// when the sets are equal.
			if shared && ca.Sets[ListenerType].Versions() != cb.Sets[ListenerType].Versions() {
				t.Errorf("%s: two equal listener sets have two Versions", what)
			}
			if !shared && ca.Sets[ListenerType].Versions() == cb.Sets[ListenerType].Versions() {
				t.Errorf("%s: two listener sets that differ have one Versions", what)
			}
			// The namespaces' classes list the same endpoints: one map.
			if ca.endpoints == nil || ca.endpoints != cb.endpoints || len(ca.EndpointsOf) == 0 {
				t.Errorf("%s: two classes listing the same endpoints hold two EndpointsOf", what)
			}
			if !shared {
				continue
			}
			// And what views read of them.
			if ia, ib := la.retagInfoOf(placeholderValues), lb.retagInfoOf(placeholderValues); ia != ib {
				t.Errorf("%s: two equal listener sets have two retagInfos", what)
			}
			// Served, each names its own namespace.
			for _, p := range []*model.Proxy{a, b} {
				base := ca
				if p == b {
					base = cb
				}
				v := mustVariant(t, g, base, w, p, nil)
				noPlaceholders(t, what, v.Sets[ListenerType])
				for _, n := range v.Sets[ListenerType].Names {
					got := v.Sets[ListenerType].Get(n).Wire().GetValue()
					if bytes.Contains(got, []byte("istio.namespace")) && !bytes.Contains(got, []byte(p.Metadata.Namespace)) {
						t.Errorf("%s: listener %s served to %s does not name its namespace", what, n, p.Metadata.Namespace)
					}
				}
			}
		}
	}
}

// Where the tracing carries a service tag's name twice (a custom tag
// beside Istio's), a variant cannot tell which is the proxy's: the
// class is generated with its representative's values, as without
// SharedTags, and served as it is.
func TestSharedRefusedWhereTagsCannotBeTold(t *testing.T) {
	store := loadWorld(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n---\n"+
		"apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  ports: [{name: http, port: 80}]\n---\n"+
		"apiVersion: v1\nkind: Service\nmetadata: {name: zipkin, namespace: istio-system}\nspec:\n  ports: [{name: http, port: 9411}]\n---\n"+
		"apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: mesh-default, namespace: default}\nspec:\n  tracing:\n  - customTags:\n      istio.namespace: {literal: {value: mine}}\n")
	ev, err := worldtest.MeshConfig("defaultProviders: {tracing: [zipkin]}\nextensionProviders: [{name: zipkin, zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}}]\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(ev); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	ps := identities(t, "sidecar~10.9.0.1~pod.default~default.svc.cluster.local", map[string]any{model.MetaIstioVersion: "1.32.0"})
	if !sharable(ClassKey(w, ps[0])) {
		t.Fatalf("key %q: not a variant's", ClassKey(w, ps[0]))
	}
	g := sharedGen(t, false)
	c := mustClass(t, g, w, ps[0], nil)
	if c.Shared() {
		t.Fatal("generated with placeholders where a variant cannot rewrite them")
	}
	want := mustClass(t, newForTest(quietLog()), w, ps[0], nil)
	sameSets(t, "refused", c.Sets, want.Sets)
	noPlaceholders(t, "refused", c.Sets[ListenerType])
	// The next generation stays so, reusing the first.
	if again := mustClass(t, g, w, ps[0], c); again.Shared() {
		t.Error("the next generation used placeholders")
	}
}

// Sets of equal versions share their Versions only when every name and
// version is the same: the set's version, a 64-bit sum, finds the
// candidate.
func TestVersionsAreSharedOnlyWhenEqual(t *testing.T) {
	r := func(name, hash string) *Resource { return &Resource{Name: name, Hash: hash} }
	a := NewSet(ClusterType, map[string]*Resource{"x": r("x", "1"), "y": r("y", "2")})
	b := NewSet(ClusterType, map[string]*Resource{"x": r("x", "1"), "y": r("y", "2")})
	if a.Versions() != b.Versions() {
		t.Error("equal sets have two Versions")
	}
	// A set whose sum is forced equal but whose contents differ.
	c := NewSet(ClusterType, map[string]*Resource{"x": r("x", "1"), "y": r("y", "3")})
	c.Version = a.Version
	if c.Versions() == a.Versions() {
		t.Fatal("a set of other versions took an equal-sum set's Versions")
	}
	if h, _ := c.Versions().Hash("y"); h != "3" {
		t.Errorf("y: version %q, want 3", h)
	}
	// Another type: never shared.
	d := NewSet(RouteType, map[string]*Resource{"x": r("x", "1"), "y": r("y", "2")})
	if d.Versions() == a.Versions() {
		t.Error("sets of two types share their Versions")
	}
}

// countingWriter counts the parts a resource is written in.
type countingWriter struct {
	b      []byte
	shared int
}

func (w *countingWriter) Copy(b []byte)  { w.b = append(w.b, b...) }
func (w *countingWriter) Share(b []byte) { w.b = append(w.b, b...); w.shared++ }

// A view's large listeners (port listeners of many chains) are one
// resource for all the proxies served the view, made and written whole;
// its small ones are made per call and written in parts.
func TestLargeListenersAreMadeOncePerView(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(60, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	p, err := model.ParseProxy("sidecar~10.9.0.1~web.ns-0~ns-0.svc.cluster.local",
		map[string]any{model.MetaIstioVersion: "1.32.0", model.MetaLabels: map[string]any{"app": "web", canonicalNameLabel: "web"}})
	if err != nil {
		t.Fatal(err)
	}
	big, small := 0, 0
	for _, perAddress := range []bool{false, true} {
		g := sharedGen(t, perAddress)
		v := mustVariant(t, g, mustClass(t, g, w, p, nil), w, p, nil)
		big, small = checkMadeOnce(t, v.Sets[ListenerType], big, small)
	}
	if big == 0 || small == 0 {
		t.Fatalf("%d large and %d small lazy listeners: the test needs both", big, small)
	}
}

func checkMadeOnce(t *testing.T, ls *Set, big, small int) (int, int) {
	t.Helper()
	for _, n := range ls.Names {
		a, b := ls.Get(n), ls.Get(n)
		if !a.Lazy() {
			continue
		}
		var want []byte
		write := func() *countingWriter {
			cw := &countingWriter{}
			a.WriteWire(cw)
			if want == nil {
				want = a.Wire().GetValue()
			}
			if !bytes.Equal(cw.b, want) {
				t.Errorf("%s: written differs from made", n)
			}
			return cw
		}
		first := write()
		if a.Size() >= bigListener {
			big++
			if a != b {
				t.Errorf("%s (%d bytes): made again for the second call", n, a.Size())
			}
			if first.shared != 1 {
				t.Errorf("%s (%d bytes): written in %d shared parts, want the made bytes", n, a.Size(), first.shared)
			}
			// Collected (held weakly), its shape says one part: the
			// writer is not sized for the thousands of its parts.
			runtime.GC()
			if copied, shared := a.WireShape(256); copied != 0 || shared != 1 {
				t.Errorf("%s (%d bytes): shaped as %d bytes copied and %d parts, want one part", n, a.Size(), copied, shared)
			}
			if again := write(); again.shared != 1 {
				t.Errorf("%s (%d bytes): written again in %d shared parts, want the made bytes", n, a.Size(), again.shared)
			}
			continue
		}
		small++
		if a == b {
			t.Errorf("%s (%d bytes): a small listener held by the view", n, a.Size())
		}
	}
	return big, small
}

// Classes that list the same endpoints share one EndpointsOf, and a
// class regenerated after a change that renames its endpoints (subsets)
// writes its own copy: the other class's map is left as it was.
func TestSharedEndpointsOfIsNotWritten(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(20, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	proxy := func(ns string) *model.Proxy {
		p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.9.0.1~web.%s~%s.svc.cluster.local", ns, ns), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := proxy("ns-0"), proxy("ns-1")
	g, err := New(DefaultOptions(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := mustClass(t, g, store.World(), a, nil), mustClass(t, g, store.World(), b, nil)
	if ca.endpoints != cb.endpoints {
		t.Fatal("the two classes do not share their EndpointsOf: the test shows nothing")
	}
	before := maps.Clone(cb.EndpointsOf)
	for k, v := range before {
		before[k] = slices.Clone(v)
	}
	evs, err := worldtest.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-0, namespace: ns-0}
spec:
  host: svc-0.ns-0.svc.cluster.local
  subsets:
  - name: v1
    labels: {version: v1}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	na := mustClass(t, g, store.World(), a, ca)
	svc := model.NamespacedName{Namespace: "ns-0", Name: "svc-0"}
	if len(na.EndpointsOf[svc]) <= len(before[svc]) {
		t.Fatalf("the subset added no endpoints to %v (%v): the test shows nothing", svc, na.EndpointsOf[svc])
	}
	if !maps.EqualFunc(cb.EndpointsOf, before, slices.Equal[[]string]) {
		t.Error("regenerating one class changed the EndpointsOf of another")
	}
}

// An index equal to a pooled one is found without being built (a
// service added or removed changes every namespace class's units
// alike), and one that differs in a service or an endpoint name is
// built with its own contents.
func TestEndpointsOfFoundBeforeBuilt(t *testing.T) {
	mk := func(services int, rename string) []*unit {
		var us []*unit
		for i := range services {
			u := &unit{svc: &model.Service{Namespace: "ns", Name: fmt.Sprintf("svc-%03d", i)}}
			if i%4 != 1 { // some services have no endpoints
				for p := range 2 {
					n := fmt.Sprintf("outbound|%d||svc-%03d.ns.svc.cluster.local", 80+p, i)
					if n == rename {
						n += "|renamed"
					}
					u.endpoints = append(u.endpoints, &Resource{Name: n})
				}
			}
			us = append(us, u)
		}
		return us
	}
	want := func(us []*unit) map[model.NamespacedName][]string {
		m := map[model.NamespacedName][]string{}
		for _, u := range us {
			if names := endpointNames(u); names != nil {
				m[u.svc.Key()] = names
			}
		}
		return m
	}
	first := mk(200, "")
	a := endpointsPool.ofUnits(first)
	if !maps.EqualFunc(a.m, want(first), slices.Equal[[]string]) {
		t.Fatalf("index of 200 services: %v", a.m)
	}
	again := mk(200, "")
	if b := endpointsPool.ofUnits(again); b != a {
		t.Error("an equal index was built again")
	}
	if n := testing.AllocsPerRun(20, func() { endpointsPool.ofUnits(again) }); n != 0 {
		t.Errorf("finding an equal index allocated %v times, want 0", n)
	}
	for what, us := range map[string][]*unit{
		"a service more":      mk(201, ""),
		"a service fewer":     mk(199, ""),
		"an endpoint renamed": mk(200, "outbound|81||svc-100.ns.svc.cluster.local"),
		"no endpoints at all": mk(0, ""),
		"a service without":   append(mk(200, ""), &unit{svc: &model.Service{Namespace: "ns", Name: "zz"}}),
	} {
		got := endpointsPool.ofUnits(us)
		if !maps.EqualFunc(got.m, want(us), slices.Equal[[]string]) {
			t.Errorf("%s: index %v", what, got.m)
		}
		if what != "a service without" && got == a {
			t.Errorf("%s: given the first index", what)
		}
	}
	// Found by the sum of its entries' hashes, an index is then compared
	// entry by entry (sums can collide).
	renamed := mk(200, "outbound|80||svc-007.ns.svc.cluster.local")
	if listsUnits(a.m, renamed, len(a.m)) {
		t.Error("an index with an endpoint renamed is taken for the first")
	}
	if !listsUnits(a.m, again, len(a.m)) {
		t.Error("an equal index is not taken for the first")
	}
	runtime.KeepAlive(a)
}

// Classes that see the same services share what those services are made
// into (chosen) and the log of their clusters, also once regenerated
// after a service is added; a class whose Sidecar sees fewer has its own.
func TestClassesShareTheirChosenServices(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(12, 3, 2)...); err != nil {
		t.Fatal(err)
	}
	evs, err := worldtest.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: ns-2}
spec:
  egress: [{hosts: ["./*"]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	proxy := func(ns string) *model.Proxy { return namespaceProxy(t, ns) }
	g, err := New(DefaultOptions(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	chosenOf := func(cc *ClassConfig) *chosen { return cc.scope.vis.chosen }
	check := func(when string, a, b, c *ClassConfig, services int) {
		t.Helper()
		if chosenOf(a) != chosenOf(b) {
			t.Errorf("%s: two classes that see the same services made them into two indexes", when)
		}
		// Their clusters are the same units' (class_sibling.go): one log.
		if a.logs.of(ClusterType) != b.logs.of(ClusterType) {
			t.Errorf("%s: two classes that put in the same clusters keep two logs", when)
		}
		if chosenOf(c) == chosenOf(a) {
			t.Errorf("%s: the class whose Sidecar sees its own namespace only shares the others' index", when)
		}
		if n := len(a.scope.Services); n != services {
			t.Errorf("%s: the classes see %d services, want %d", when, n, services)
		}
		if n := len(c.scope.Services); n != services/3 {
			t.Errorf("%s: the Sidecar's class sees %d services, want %d", when, n, services/3)
		}
	}
	w := store.World()
	a, b, c := mustClass(t, g, w, proxy("ns-0"), nil), mustClass(t, g, w, proxy("ns-1"), nil), mustClass(t, g, w, proxy("ns-2"), nil)
	check("first", a, b, c, 12)
	if _, err := store.Apply(worldtest.Service("ns-0", "added", "10.96.9.1"), worldtest.Service("ns-1", "added", "10.96.9.2"), worldtest.Service("ns-2", "added", "10.96.9.3")); err != nil {
		t.Fatal(err)
	}
	w = store.World()
	a2, b2, c2 := mustClass(t, g, w, proxy("ns-0"), a), mustClass(t, g, w, proxy("ns-1"), b), mustClass(t, g, w, proxy("ns-2"), c)
	check("after services were added", a2, b2, c2, 15)
	if chosenOf(a2) == chosenOf(a) {
		t.Error("the services added did not make a new index")
	}
}

// The namespaces' classes of one World reference one list of EDS names
// and one of RDS names, after a service is added too: a class's lists
// follow its sibling's.
func TestSiblingClassesShareTheirReferenceLists(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(12, 3, 2)...); err != nil {
		t.Fatal(err)
	}
	g, err := New(DefaultOptions(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b []string) bool {
		return len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b) && len(a) == len(b)
	}
	check := func(when string, a, b *ClassConfig) {
		t.Helper()
		if !slices.Equal(a.edsRefs, b.edsRefs) || !slices.Equal(a.routeRefs, b.routeRefs) {
			t.Fatalf("%s: the classes reference different names: the test shows nothing", when)
		}
		if !same(a.edsRefs, b.edsRefs) || !same(a.routeRefs, b.routeRefs) {
			t.Errorf("%s: two classes that reference the same names hold two lists", when)
		}
	}
	w := store.World()
	a, b := mustClass(t, g, w, namespaceProxy(t, "ns-0"), nil), mustClass(t, g, w, namespaceProxy(t, "ns-1"), nil)
	check("first", a, b)
	if _, err := store.Apply(worldtest.Service("ns-0", "added", "10.96.9.1")); err != nil {
		t.Fatal(err)
	}
	w = store.World()
	a2, b2 := mustClass(t, g, w, namespaceProxy(t, "ns-0"), a), mustClass(t, g, w, namespaceProxy(t, "ns-1"), b)
	if len(a2.edsRefs) <= len(a.edsRefs) || len(a2.routeRefs) < len(a.routeRefs) {
		t.Fatalf("the service added added no EDS names (%d -> %d)", len(a.edsRefs), len(a2.edsRefs))
	}
	check("after a service was added", a2, b2)
	// Regenerated from itself in the same World, a class keeps its lists.
	a3 := mustClass(t, g, w, namespaceProxy(t, "ns-0"), a2)
	check("again", a2, a3)
}
