package gen

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// With listeners per address a port's listeners are an operation each
// (sidecarOutbound): a service added or removed is an edit of the
// class's listeners (an operation put in between, or skipped), not a
// rebuild from a map of all of them, even though deriving the port's
// listeners asks whether each of its names is taken (builder.has). The
// result is what generating afresh gives.
func TestServiceChangesEditTheListeners(t *testing.T) {
	store, o := perAddressMesh(t)
	g := newTestGenerator(t, o, false)
	p := namespaceProxy(t, "ns-0")
	check := func(when string, prev, next *ClassConfig) {
		t.Helper()
		if !next.presplit {
			t.Fatalf("%s: the class's port listeners are not built split: the test shows nothing", when)
		}
		e := prev.baseSet(ListenerType).edit.Load()
		if e == nil || e.set.Version != next.Sets[ListenerType].Version {
			t.Errorf("%s: the listeners were rebuilt, not edited", when)
		}
		fresh := mustClass(t, newTestGenerator(t, o, false), store.World(), p, nil)
		got, want := next.Sets[ListenerType], fresh.Sets[ListenerType]
		if got.Version != want.Version || got.Len() != want.Len() {
			t.Fatalf("%s: %d listeners (version %s), afresh %d (%s)", when, got.Len(), got.Version, want.Len(), want.Version)
		}
		for n, r := range want.All() {
			if h, _ := got.Hash(n); h != r.Hash {
				t.Errorf("%s: listener %s differs from the one generated afresh", when, n)
			}
		}
	}
	a := mustClass(t, g, store.World(), p, nil)
	if _, err := store.Apply(worldtest.Service("ns-1", "added", "10.96.9.1")); err != nil {
		t.Fatal(err)
	}
	b := mustClass(t, g, store.World(), p, a)
	if b.Sets[ListenerType].Len() <= a.Sets[ListenerType].Len() {
		t.Fatal("the service added added no listener")
	}
	check("after a service was added", a, b)
	applyStep(t, store, "", "ns-1", "added")
	c := mustClass(t, g, store.World(), p, b)
	check("after it was removed", b, c)
}

// perAddressMesh is a store of twelve services in three namespaces, and
// options for listeners per address.
func perAddressMesh(t *testing.T) (*model.Store, Options) {
	t.Helper()
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(12, 3, 2)...); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions(quietLog())
	o.ListenersPerAddress = true
	return store, o
}
