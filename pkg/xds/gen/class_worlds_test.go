package gen

import (
	"fmt"
	"runtime"
	"testing"
	"weak"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// worldsKept follows the Worlds a churn goes through and tells which of
// them are still alive.
type worldsKept struct {
	store *model.Store
	seen  []weak.Pointer[model.World]
}

func (k *worldsKept) next() *model.World {
	w := k.store.World()
	k.seen = append(k.seen, weak.Make(w))
	return w
}

// extra fails t for every World still alive after a collection that
// neither the Store (its newest) nor a class configuration in ccs (the
// World it judges changes from, and the one its scope sees) holds: what a
// shared part or a unit kept on its own.
func (k *worldsKept) extra(t *testing.T, what string, ccs []*ClassConfig) {
	t.Helper()
	held := map[*model.World]bool{k.store.World(): true}
	for _, cc := range ccs {
		held[cc.at.w] = true
		held[cc.scope.w.w] = true
	}
	runtime.GC()
	runtime.GC()
	alive, extra := 0, 0
	for _, p := range k.seen {
		if w := p.Value(); w != nil {
			alive++
			if !held[w] {
				extra++
			}
		}
	}
	if extra > 0 {
		t.Errorf("%s: %d of the %d Worlds gone through are alive, %d of them held by no class and not the Store's newest", what, alive, len(k.seen), extra)
	}
	runtime.KeepAlive(ccs)
}

// TestChurnKeepsNoOldWorlds: endpoint changes to one service after
// another, pushed as endpoint updates, and services added and removed,
// each followed by a full generation, leave alive no World but those the
// classes and the Store hold. Each World holds its own copies of the
// Store's maps it changed: kept by the shared parts (class_parts.go) and
// by units updated with new endpoints, they were one World per service
// changed, 100 KB each at M1's size.
func TestChurnKeepsNoOldWorlds(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(100, 10, 2)...); err != nil {
		t.Fatal(err)
	}
	g, o := newWithOptions(t, true, true)
	ps := make([]*model.Proxy, 10)
	for i := range ps {
		ps[i] = namespaceProxy(t, fmt.Sprintf("ns-%d", i))
	}
	ccs := make([]*ClassConfig, len(ps))
	generate := func(w *model.World) {
		t.Helper()
		for i, p := range ps {
			var err error
			if ccs[i], err = g.Class(w, p, ccs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	kept := &worldsKept{store: store}
	generate(kept.next())

	for i := range 60 {
		k := i * 37 % 100
		nn := model.NamespacedName{Namespace: fmt.Sprintf("ns-%d", k%10), Name: fmt.Sprintf("svc-%d", k)}
		if _, err := store.Apply(worldtest.Slice(nn.Namespace, nn.Name, fmt.Sprintf("10.77.0.%d", i+1))); err != nil {
			t.Fatal(err)
		}
		w := kept.next()
		for j := range ccs {
			ccs[j], _ = g.UpdateEndpoints(ccs[j], w, []model.NamespacedName{nn})
		}
	}
	kept.extra(t, "after 60 endpoint updates", ccs)

	for i := range 20 {
		ev := worldtest.Service("ns-9", fmt.Sprintf("added-%d", i/2), fmt.Sprintf("10.97.0.%d", i/2+1))
		if i%2 == 1 {
			ev.Op, ev.Object = model.OpDelete, nil
		}
		if _, err := store.Apply(ev); err != nil {
			t.Fatal(err)
		}
		generate(kept.next())
	}
	kept.extra(t, "after 10 services added and removed", ccs)

	for i, p := range ps {
		sameAsFreshWith(t, o, "after the churn", ccs[i], store.World(), p)
	}
}

// BenchmarkEndpointChurn pushes endpoint changes to the 1,000 services of
// M1's World one after another to the 50 namespace classes
// (UpdateEndpoints), as a rollout across a mesh does; KB-kept/change is
// what each change leaves on the heap once collected.
func BenchmarkEndpointChurn(b *testing.B) {
	store := world1000(b)
	g, _ := newWithOptions(b, true, true)
	ccs := make([]*ClassConfig, 50)
	for i := range ccs {
		var err error
		if ccs[i], err = g.Class(store.World(), namespaceProxy(b, fmt.Sprintf("ns-%d", i)), nil); err != nil {
			b.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i * 37 % 1000
		nn := model.NamespacedName{Namespace: fmt.Sprintf("ns-%d", k%50), Name: fmt.Sprintf("svc-%d", k)}
		if _, err := store.Apply(worldtest.Slice(nn.Namespace, nn.Name, fmt.Sprintf("10.77.%d.%d", i/250%250, i%250+1))); err != nil {
			b.Fatal(err)
		}
		w := store.World()
		for j := range ccs {
			ccs[j], _ = g.UpdateEndpoints(ccs[j], w, []model.NamespacedName{nn})
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(int64(heap())-int64(before))/1e3/float64(b.N), "KB-kept/change")
	runtime.KeepAlive(ccs)
}
