package gen

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// identities are proxies of one workload that differ in what the service
// tags name: the representative first.
func identities(t *testing.T, id string, meta map[string]any) []*model.Proxy {
	t.Helper()
	variants := []map[string]any{
		{canonicalNameLabel: "reviews", canonicalRevisionLabel: "v1"},
		{canonicalNameLabel: "ratings", canonicalRevisionLabel: "v2"},
		{canonicalNameLabel: "a-much-longer-canonical-service-name-than-the-others"},
		{"MESH_ID": "mesh-2", "CLUSTER_ID": "cluster-east"},
	}
	var out []*model.Proxy
	for _, v := range variants {
		m := maps.Clone(meta)
		labels := map[string]any{}
		if l, ok := m[model.MetaLabels].(map[string]any); ok {
			maps.Copy(labels, l)
		}
		for k, val := range v {
			if k == "MESH_ID" || k == "CLUSTER_ID" {
				m[k] = val
			} else {
				labels[k] = val
			}
		}
		m[model.MetaLabels] = labels
		p, err := model.ParseProxy(id, m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// sameSets reports the first difference between two sets of every type.
func sameSets(t *testing.T, what string, got, want map[string]*Set) {
	t.Helper()
	for _, typ := range append(TypeURLs, "") {
		g, w := got[typ], want[typ]
		if g.Len() != w.Len() {
			t.Errorf("%s %s: %d resources, want %d", what, ShortType(typ), g.Len(), w.Len())
			continue
		}
		if w == nil {
			continue
		}
		for _, n := range w.Names {
			gr, wr := g.Get(n), w.Get(n)
			if gr == nil {
				t.Errorf("%s %s %s: missing", what, ShortType(typ), n)
				continue
			}
			if !bytes.Equal(gr.Wire().GetValue(), wr.Wire().GetValue()) || gr.Size() != wr.Size() || gr.lazy == nil && gr.Hash != wr.Hash {
				t.Errorf("%s %s %s: differs from the class generated for the proxy", what, ShortType(typ), n)
			}
		}
	}
}

// A variant is byte for byte the configuration its class generates, class
// and own parts, for every sidecar case of the golden tests, with port
// listeners and listeners per address, for proxies whose service tags
// differ in each value and in length.
func TestVariantsAreTheirClasses(t *testing.T) {
	variants := 0
	for _, perAddress := range []bool{false, true} {
		opts := DefaultOptions(quietLog())
		opts.ListenersPerAddress = perAddress
		sidecarCases(t, func(dir string, w *model.World, ps []*model.Proxy) {
			rep := ps[0]
			g, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			base, err := g.Class(w, rep, nil)
			if err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			baseKey, tags := VariantOf(ClassKey(w, rep))
			if tags == "" {
				if base.Scope().outTel().tracing != nil {
					t.Errorf("%s: a sidecar that traces has no variant key: %q", dir, ClassKey(w, rep))
				}
				return
			}
			for _, p := range ps[1:] {
				key := ClassKey(w, p)
				if b, _ := VariantOf(key); b != baseKey {
					t.Logf("%s: the labels change more than the tags: %q against %q", dir, key, baseKey)
					continue
				}
				v, ok := g.Variant(base, key, p, nil)
				if !ok {
					t.Errorf("%s: Variant refused", dir)
					continue
				}
				fresh, err := New(opts)
				if err != nil {
					t.Fatal(err)
				}
				want, err := fresh.Class(w, p, nil)
				if err != nil {
					t.Fatal(err)
				}
				what := filepath.Base(dir) + " " + key
				sameSets(t, what, v.Sets, want.Sets)
				sameSets(t, what+" own", g.Proxy(w, p, v).Own, fresh.Proxy(w, p, want).Own)
				if v.Sets[ClusterType] != base.Sets[ClusterType] {
					t.Errorf("%s: the variant does not share its base's clusters", what)
				}
				// Made again from itself, it takes the table of tracings
				// it rewrote, and rewrites nothing.
				again, ok := g.Variant(base, key, p, v)
				if !ok {
					t.Fatalf("%s: refused the second time", what)
				}
				if again.variant.tab != v.variant.tab {
					t.Errorf("%s: tracings rewritten again", what)
				}
				sameSets(t, what+" again", again.Sets, want.Sets)
				variants++
			}
		})
	}
	if variants < 20 {
		t.Errorf("only %d variants compared: the cases lost their tracing", variants)
	}
}

// sidecarCases calls f with every sidecar case of the golden tests: its
// World and the proxies of its node under several identities
// (identities), the node's first.
func sidecarCases(t *testing.T, f func(dir string, w *model.World, ps []*model.Proxy)) {
	t.Helper()
	dirs, err := filepath.Glob("testdata/*/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, nodeFile := range dirs {
		dir := filepath.Dir(nodeFile)
		if _, err := os.Stat(filepath.Join(dir, "input.yaml")); err != nil {
			continue // a case of another form
		}
		w, node := loadCase(t, dir)
		if !variantsApply(node) {
			continue
		}
		data, err := os.ReadFile(nodeFile)
		if err != nil {
			t.Fatal(err)
		}
		var raw struct {
			Metadata map[string]any `json:"metadata"`
		}
		if err := yaml.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		f(dir, w, identities(t, node.ID, raw.Metadata))
	}
}

// A custom tag named like a service tag, beside Istio's: the connection
// managers carry the name twice, the rewrite cannot tell which is the
// proxy's, and the variant is refused (its class is generated). Without
// Istio's tags the custom tag is the user's, the same for every proxy,
// and left alone.
func TestVariantRefusesTagsItCannotTell(t *testing.T) {
	ns := "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n---\n" +
		"apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  ports: [{name: http, port: 80}]\n---\n" +
		"apiVersion: v1\nkind: Service\nmetadata: {name: zipkin, namespace: istio-system}\nspec:\n  ports: [{name: http, port: 9411}]\n---\n"
	tel := func(istioTags bool) string {
		s := "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: mesh-default, namespace: default}\nspec:\n  tracing:\n  - customTags:\n      istio.canonical_service: {literal: {value: mine}}\n"
		if !istioTags {
			s += "    enableIstioTags: false\n"
		}
		return s
	}
	for _, istioTags := range []bool{true, false} {
		store := loadWorld(t, ns+tel(istioTags))
		ev, err := worldtest.MeshConfig("defaultProviders: {tracing: [zipkin]}\nextensionProviders: [{name: zipkin, zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}}]\n")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Apply(ev); err != nil {
			t.Fatal(err)
		}
		w := store.World()
		ps := identities(t, "sidecar~10.9.0.1~pod.default~default.svc.cluster.local", map[string]any{model.MetaIstioVersion: "1.32.0"})
		g := newForTest(quietLog())
		base, err := g.Class(w, ps[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(base.Scope().outTel().tracing.GetCustomTags()) == 0 {
			t.Fatalf("istio tags %v: the test world does not trace", istioTags)
		}
		v, ok := g.Variant(base, ClassKey(w, ps[1]), ps[1], nil)
		if istioTags {
			if ok {
				t.Errorf("a custom tag of a service tag's name beside Istio's: variant made")
			}
			continue
		}
		if !ok {
			t.Fatalf("without Istio's tags: refused")
		}
		fresh := newForTest(quietLog())
		want, err := fresh.Class(w, ps[1], nil)
		if err != nil {
			t.Fatal(err)
		}
		sameSets(t, "istio tags off", v.Sets, want.Sets)
	}
}

// The key's variant part comes last and only for sidecars: gateways keep
// the tags in their class.
func TestVariantKeys(t *testing.T) {
	w := loadWorld(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n").World()
	a := labelled(t, "sidecar", "default", map[string]string{canonicalNameLabel: "reviews"})
	b := labelled(t, "sidecar", "default", map[string]string{canonicalNameLabel: "ratings"})
	ka, kb := ClassKey(w, a), ClassKey(w, b)
	ba, ta := VariantOf(ka)
	bb, tb := VariantOf(kb)
	if ka == kb || ba != bb || ta == "" || tb == "" {
		t.Errorf("sidecars: keys %q and %q, want one base and two tags", ka, kb)
	}
	gw := labelled(t, "router", "default", map[string]string{canonicalNameLabel: "ingress"})
	if _, tags := VariantOf(ClassKey(w, gw)); tags != "" {
		t.Errorf("gateway key %q has a variant part", ClassKey(w, gw))
	}
}

// bookinfoIdentities is bookinfo's sidecar under several identities
// (identities), in bookinfo's World.
func bookinfoIdentities(t *testing.T) (*model.World, []*model.Proxy) {
	t.Helper()
	w, node := loadCase(t, "testdata/bookinfo")
	return w, identities(t, node.ID, map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": "default"})
}

// mustClass generates p's class in w.
func mustClass(t *testing.T, g *Generator, w *model.World, p *model.Proxy, prev *ClassConfig) *ClassConfig {
	t.Helper()
	c, err := g.Class(w, p, prev)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mustVariant makes p's class in w as a variant of base.
func mustVariant(t *testing.T, g *Generator, base *ClassConfig, w *model.World, p *model.Proxy, prev *ClassConfig) *ClassConfig {
	t.Helper()
	v, ok := g.Variant(base, ClassKey(w, p), p, prev)
	if !ok {
		t.Fatal("Variant refused")
	}
	return v
}

// A variant's rewritten listeners are held as the means to make them:
// their bytes go with the last holder and are made again, the same, when
// asked for.
func TestVariantListenersAreMadeWhenAsked(t *testing.T) {
	w, ps := bookinfoIdentities(t)
	g := newForTest(quietLog())
	base := mustClass(t, g, w, ps[0], nil)
	v := mustVariant(t, g, base, w, ps[1], nil)
	lazy := 0
	for n, r := range v.Sets[ListenerType].All() {
		if r.lazy == nil {
			continue
		}
		lazy++
		first := bytes.Clone(r.Wire().GetValue())
		if r.Size() != len(first) {
			t.Errorf("%s: size %d, made %d bytes", n, r.Size(), len(first))
		}
		runtime.GC()
		runtime.GC()
		if r.lazy.held.Value() != nil {
			t.Errorf("%s: its bytes outlived their holders", n)
		}
		if again := r.Wire().GetValue(); !bytes.Equal(first, again) {
			t.Errorf("%s: made again, differs", n)
		}
	}
	if lazy == 0 {
		t.Fatal("no listener of the variant was rewritten")
	}
	// Another workload's rewrite of the same listener is another version.
	other := mustVariant(t, g, base, w, ps[2], nil)
	for n, r := range v.Sets[ListenerType].All() {
		if o := other.Sets[ListenerType].Get(n); r.lazy != nil && o.Hash == r.Hash {
			t.Errorf("%s: the variants of two workloads have one version", n)
		}
	}
}

// A variant's listener set keeps no version per listener: its Versions
// finds them in its base's, with the variant's suffix, and keeps the
// others. They answer as versions built from the resources would, for
// every name and for names the set lacks; and the listeners of the
// base's plans share their tracings' plans.
func TestVariantVersionsAreDerived(t *testing.T) {
	w, ps := bookinfoIdentities(t)
	// Per address, the listeners are many and their tracings alike.
	opts := DefaultOptions(quietLog())
	opts.ListenersPerAddress = true
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	base := mustClass(t, g, w, ps[0], nil)
	for _, p := range ps[1:] {
		v := mustVariant(t, g, base, w, p, nil)
		set := v.Sets[ListenerType]
		got := set.Versions()
		if got.from == nil {
			t.Fatal("the variant's versions are not derived from its base's")
		}
		rewritten := 0
		for _, n := range set.Names {
			h, ok := got.Hash(n)
			if r := set.Get(n); !ok || h != r.Hash {
				t.Errorf("%s: version %q (%v), the resource's %q", n, h, ok, r.Hash)
			}
			if _, kept := got.plain[n]; !kept {
				rewritten++
			}
		}
		if rewritten == 0 {
			t.Error("every version kept: none derived")
		}
		if got.Len() != set.Len() || !slices.Equal(got.Names(), set.Names) {
			t.Errorf("versions of %d names %v, the set has %d", got.Len(), got.Names(), set.Len())
		}
		if h, ok := got.Hash("no-such-listener"); ok {
			t.Errorf("a name the set lacks has version %q", h)
		}
	}
	ls := base.Sets[ListenerType]
	// Tracings are planned once for all the listeners that carry them.
	subs := map[*retagPlan]int{}
	for _, r := range ls.rs {
		if p := r.plan.Load(); p != nil {
			for _, b := range p.blobs {
				subs[b.plan]++
			}
		}
	}
	shared := false
	for _, n := range subs {
		shared = shared || n > 1
	}
	if len(subs) == 0 || !shared {
		t.Errorf("the listeners' tracings have %d plans, none shared: %v", len(subs), subs)
	}
}

// A variant made again after its base's listeners changed (a MeshConfig
// that sets the sampling changes every tracing) rewrites them with a table of
// its own: the listeners of the earlier generation, which a stream may
// still be sending, are made as before.
func TestVariantTablesOutliveTheirGeneration(t *testing.T) {
	store, err := worldtest.LoadFile("testdata/bookinfo/input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, ps := bookinfoIdentities(t)
	g := newForTest(quietLog())
	w1 := store.World()
	base1 := mustClass(t, g, w1, ps[0], nil)
	v1 := mustVariant(t, g, base1, w1, ps[1], nil)
	before := map[string][]byte{}
	for n, r := range v1.Sets[ListenerType].All() {
		if r.lazy != nil {
			before[n] = bytes.Clone(r.Wire().GetValue())
		}
	}
	if len(before) == 0 {
		t.Fatal("no listener of the variant was rewritten")
	}
	tab1, blobs1 := v1.variant.tab, len(v1.variant.tab.blobs)
	mesh, err := worldtest.MeshConfig("defaultConfig:\n  tracing:\n    sampling: 42\n")
	if err != nil {
		t.Fatal(err)
	}
	evs := []model.Event{mesh}
	u, err := store.Apply(evs...)
	if err != nil || u == nil {
		t.Fatalf("Apply = %v, %v", u, err)
	}
	w2 := u.World
	base2 := mustClass(t, g, w2, ps[0], base1)
	v2 := mustVariant(t, g, base2, w2, ps[1], v1)
	if v2.variant.tab == tab1 || len(tab1.blobs) != blobs1 {
		t.Errorf("the later generation wrote into the earlier one's table (%d blobs, had %d)", len(tab1.blobs), blobs1)
	}
	changed := 0
	for n, r := range v2.Sets[ListenerType].All() {
		if old, ok := before[n]; ok && r.lazy != nil && !bytes.Equal(old, r.Wire().GetValue()) {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("the Telemetry changed no listener of the variant: the test shows nothing")
	}
	runtime.GC()
	runtime.GC()
	for n, r := range v1.Sets[ListenerType].All() {
		if want, ok := before[n]; ok && !bytes.Equal(r.Wire().GetValue(), want) {
			t.Errorf("%s of the earlier generation is made otherwise now", n)
		}
	}
	// And the variant is still its own class.
	sameSets(t, "after the MeshConfig", v2.Sets, mustClass(t, g, w2, ps[1], nil).Sets)
}

// shapeWriter counts what a sliceWriter-like writer would copy and share.
type shapeWriter struct{ small, copied, shared int }

func (c *shapeWriter) Copy(b []byte) { c.copied += len(b) }
func (c *shapeWriter) Share(b []byte) {
	if len(b) < c.small {
		c.copied += len(b)
	} else {
		c.shared++
	}
}

// WireShape bounds what WriteWire writes, for a lazy listener counted
// from its plan and for one whose bytes are held; and WriteWire writes
// the listener's bytes.
func TestWireShapeBoundsWriteWire(t *testing.T) {
	w, ps := bookinfoIdentities(t)
	g := newForTest(quietLog())
	base := mustClass(t, g, w, ps[0], nil)
	v := mustVariant(t, g, base, w, ps[1], nil)
	lazy := 0
	for n, r := range v.Sets[ListenerType].All() {
		if !r.Lazy() {
			continue
		}
		lazy++
		for _, small := range []int{1, 64, 256, 1 << 20} {
			runtime.GC()
			runtime.GC()
			copied, shared := r.WireShape(small)
			got := shapeWriter{small: small}
			r.WriteWire(&got)
			if got.shared != shared || got.copied > copied || copied > got.copied+5*r.lazy.plan.count {
				t.Errorf("%s, small %d: shape %d copied, %d shared; written %d, %d", n, small, copied, shared, got.copied, got.shared)
			}
		}
		var a appender
		r.WriteWire(&a)
		if !bytes.Equal(a.b, r.Wire().GetValue()) {
			t.Errorf("%s: written in parts, differs from the listener made", n)
		}
		held := r.Wire() // held while in use: one part
		if c, s := r.WireShape(256); c != 0 || s != 1 {
			t.Errorf("%s held: shape %d copied, %d shared, want one shared part", n, c, s)
		}
		runtime.KeepAlive(held)
	}
	if lazy == 0 {
		t.Fatal("no lazy listener")
	}
}

// A variant's listener set is a view of its base's (retagView): making a
// variant, from nothing or again after its base changed, allocates the
// same whatever the number of listeners, and it holds none of them.
// Before, it built a resource and a version per listener: 435 MB of heap
// at M1 per address.
func TestVariantHoldsNothingPerListener(t *testing.T) {
	allocs := map[int][2]uint64{}
	for _, n := range []int{10, 80} {
		g, _ := newWithListeners(t, true)
		store := model.NewStore(model.StoreOptions{})
		w := applyStep(t, store, memoWorld(n), "", "")
		ps := identities(t, "sidecar~10.9.0.1~client.ns~ns.svc.cluster.local",
			map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": "ns"})
		base := mustClass(t, g, w, ps[0], nil)
		if got := base.Sets[ListenerType].Len(); got < n {
			t.Fatalf("%d services, %d listeners: not per address", n, got)
		}
		key := ClassKey(w, ps[1])
		v := mustVariant(t, g, base, w, ps[1], nil)
		if v.Sets[ListenerType].view == nil {
			t.Fatal("the variant's listeners are no view")
		}
		fresh := bytesPerRun(50, func() { g.Variant(base, key, ps[1], nil) })
		// Its base changed: another service.
		w2 := applyStep(t, store, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: added, namespace: ns}
spec: {clusterIP: 10.96.3.%d, ports: [{name: http, port: 8080}]}
`, n), "", "")
		base2 := mustClass(t, g, w2, ps[0], base)
		mustVariant(t, g, base2, w2, ps[1], v) // the base's plans, once
		again := bytesPerRun(50, func() { g.Variant(base2, key, ps[1], v) })
		allocs[n] = [2]uint64{fresh, again}
	}
	t.Logf("bytes per variant made, from nothing and again: %v with 10 services, %v with 80", allocs[10], allocs[80])
	// 70 more services are 70 more listeners: 16 KB of resources and
	// versions as the variant's own.
	for i := range 2 {
		if allocs[80][i] > allocs[10][i]+512 {
			t.Errorf("bytes allocated making a variant, from nothing and again: %v with 10 services, %v with 80", allocs[10], allocs[80])
		}
	}
}

// bytesPerRun is what f allocates per call, on average over runs calls.
func bytesPerRun(runs int, f func()) uint64 {
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// Listeners laid out alike share a plan (planPool): per address, the
// listeners of services whose addresses and names are of the same
// lengths differ in no offset. The variant made from them is still its
// class, and a pooled plan holds copies of its tracings, not slices of
// the listener it was found in.
func TestListenersLaidOutAlikeShareAPlan(t *testing.T) {
	g, _ := newWithListeners(t, true)
	store := model.NewStore(model.StoreOptions{})
	w := applyStep(t, store, memoWorld(60), "", "")
	ps := identities(t, "sidecar~10.9.0.1~client.ns~ns.svc.cluster.local",
		map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": "ns"})
	base := mustClass(t, g, w, ps[0], nil)
	v := mustVariant(t, g, base, w, ps[1], nil)
	info := base.Sets[ListenerType].retagInfoOf(tagValues(ps[0]))
	distinct := map[*retagPlan]bool{}
	for n, p := range info.plans {
		distinct[p] = true
		r := base.Sets[ListenerType].Get(n)
		for _, b := range p.blobs {
			if len(b.b) > 0 && sameArray(b.b, r.Wire().GetValue()) {
				t.Errorf("%s: its plan's tracing is a slice of the listener", n)
			}
		}
	}
	t.Logf("%d listeners planned, %d plans", len(info.plans), len(distinct))
	if len(info.plans) < 60 || len(distinct) > len(info.plans)/4 {
		t.Errorf("%d listeners planned, %d plans: alike ones do not share", len(info.plans), len(distinct))
	}
	fresh, _ := newWithListeners(t, true)
	sameSets(t, "variant", v.Sets, mustClass(t, fresh, w, ps[1], nil).Sets)
}

// sameArray reports whether a lies within b's array.
func sameArray(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	start, end := &b[0], &b[:cap(b)][cap(b)-1]
	p := &a[0]
	return uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(start)) && uintptr(unsafe.Pointer(p)) <= uintptr(unsafe.Pointer(end))
}
