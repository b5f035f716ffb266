package push

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// Proxies of a namespace that differ in their canonical service (every
// injected pod's labels) are variants of one class: through changes of
// every kind, what Classes gives each of them, by a full push or an
// endpoints one, is what generating its class from scratch gives, and the
// variants share their base's clusters.
//
// With SharedTags (the server's), the bases are generated with
// placeholders for the service tags and every proxy, a base's
// representative too, is served a variant: the same bytes.
func TestClassesServeVariantsAsTheirClasses(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) { serveVariantsAsTheirClasses(t, shared) })
	}
}

func serveVariantsAsTheirClasses(t *testing.T, shared bool) {
	trials := 40
	if testing.Short() {
		trials = 10
	}
	opts := gen.DefaultOptions(nil)
	opts.SharedTags = shared
	gs, err := gen.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// g generates afresh, with each proxy's own values.
	g, err := gen.New(gen.DefaultOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	variants := 0
	for trial := range trials {
		rng := rand.New(rand.NewSource(int64(1000 + trial)))
		pw := randomPlanWorld(rng)
		store := model.NewStore(model.StoreOptions{})
		evs, err := decodeVersioned(pw.yaml())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Apply(append(evs, pw.slices()...)...); err != nil {
			t.Fatal(err)
		}
		var ps []*model.Proxy
		for i, s := range pw.services {
			for j, name := range []string{s.name, s.name + "-canary"} {
				ps = append(ps, planProxy(t, "sidecar", s.eps[0], fmt.Sprintf("%s-%d-%d", s.name, i, j), s.ns,
					map[string]any{"app": s.name, "version": "v1", "service.istio.io/canonical-name": name, "service.istio.io/canonical-revision": "v1"}))
			}
		}
		var cc Classes
		check := func(w *model.World, desc string, get func(p *model.Proxy) *gen.ClassConfig) {
			bases := map[string]*gen.Set{}
			for _, p := range ps {
				got := get(p)
				want, err := g.Class(w, p, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got == nil || got.Class != want.Class {
					t.Fatalf("trial %d (%s), %s: class %v, want %q", trial, desc, p.ID, got, want.Class)
				}
				for _, typ := range gen.TypeURLs {
					a, b := got.Sets[typ], want.Sets[typ]
					if !slices.Equal(a.Names, b.Names) {
						t.Errorf("trial %d (%s), %s %s: names differ from the class generated afresh", trial, desc, p.ID, gen.ShortType(typ))
						continue
					}
					for _, n := range b.Names {
						if !bytes.Equal(a.Get(n).Wire().GetValue(), b.Get(n).Wire().GetValue()) {
							t.Errorf("trial %d (%s), %s: %s %s differs from the class generated afresh", trial, desc, p.ID, gen.ShortType(typ), n)
						}
					}
				}
				// The proxy's own part (its inbound listeners) is built
				// from its class's scope, whose telemetry a variant
				// keeps or rebuilds for its own values.
				gotOwn, wantOwn := gs.Proxy(w, p, got).Own, g.Proxy(w, p, want).Own
				for _, typ := range gen.TypeURLs {
					a, b := gotOwn[typ], wantOwn[typ]
					if a.Len() != b.Len() {
						t.Errorf("trial %d (%s), %s: %d own %s, %d generated afresh", trial, desc, p.ID, a.Len(), gen.ShortType(typ), b.Len())
						continue
					}
					if b == nil {
						continue
					}
					for _, n := range b.Names {
						if !bytes.Equal(a.Get(n).Wire().GetValue(), b.Get(n).Wire().GetValue()) {
							t.Errorf("trial %d (%s), %s: own %s %s differs from the one generated afresh", trial, desc, p.ID, gen.ShortType(typ), n)
						}
					}
				}
				base, tags := gen.VariantOf(got.Class)
				if tags == "" {
					continue
				}
				variants++
				if s, ok := bases[base]; ok && s != got.Sets[gen.ClusterType] {
					t.Errorf("trial %d (%s), %s: the variants of %s do not share their clusters", trial, desc, p.ID, base)
				}
				bases[base] = got.Sets[gen.ClusterType]
			}
		}
		w := store.World()
		check(w, "first", func(p *model.Proxy) *gen.ClassConfig { return cc.Full(gs, w, p) })
		for step := range 3 {
			desc, change := pw.change(rng)
			u, err := store.Apply(change...)
			if err != nil {
				t.Fatal(err)
			}
			if u == nil {
				continue
			}
			w := u.World
			ch := map[model.Key]model.Op{}
			for _, c := range u.Changes {
				ch[c.Key] = c.Op
			}
			sp := Split(ch)
			desc = fmt.Sprintf("change %d: %s", step+1, desc)
			if len(sp.Others) == 0 && len(sp.Endpoints) > 0 {
				var svcs []model.NamespacedName
				for nn := range sp.Endpoints {
					svcs = append(svcs, nn)
				}
				check(w, desc, func(p *model.Proxy) *gen.ClassConfig { return cc.Endpoints(gs, w, p, svcs) })
				continue
			}
			check(w, desc, func(p *model.Proxy) *gen.ClassConfig { return cc.Full(gs, w, p) })
		}
	}
	if variants == 0 {
		t.Fatal("no variants: the proxies' classes lost their tags")
	}
}

// A class's configuration replaced by a later generation, full or of
// endpoints, lets go of its logs (gen.ClassConfig.Retire): Groups, which
// reads them, has nothing of it any more, while the configuration that
// replaced it has. A configuration a generation gives again is kept.
func TestClassesRetireTheConfigurationsTheyReplace(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(6, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	g, err := gen.New(gen.DefaultOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := planProxy(t, "sidecar", "10.9.0.1", "web-1", "ns-0", map[string]any{"app": "web"})
	var cc Classes
	first := cc.Full(g, store.World(), p)
	if first == nil || first.Groups(gen.ClusterType) == nil {
		t.Fatal("the first configuration has no groups of clusters: the test shows nothing")
	}
	if again := cc.Full(g, store.World(), p); again != first || first.Groups(gen.ClusterType) == nil {
		t.Fatal("a configuration given again was retired")
	}
	if _, err := store.Apply(worldtest.Service("ns-1", "added", "10.96.9.1")); err != nil {
		t.Fatal(err)
	}
	next := cc.Full(g, store.World(), p)
	if next == first {
		t.Fatal("a service added made no new configuration")
	}
	if first.Groups(gen.ClusterType) != nil {
		t.Error("the configuration a service added replaced still holds its logs")
	}
	if next.Groups(gen.ClusterType) == nil {
		t.Error("the configuration that replaced it has no groups of clusters")
	}
	if _, err := store.Apply(worldtest.Slice("ns-1", "svc-1", "10.1.1.9")); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	last := cc.Endpoints(g, w, p, []model.NamespacedName{{Namespace: "ns-1", Name: "svc-1"}})
	if last == next || last.WorldVersion != w.Version {
		t.Fatal("an endpoint change made no new configuration")
	}
	if next.Groups(gen.ClusterType) != nil {
		t.Error("the configuration an endpoint change replaced still holds its logs")
	}
	if last.Groups(gen.ClusterType) == nil {
		t.Error("the configuration of the endpoint change has no groups of clusters")
	}
}
