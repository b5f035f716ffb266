package gen

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// The namespaces' classes build route sets that differ in content (each
// namespace's own services' short host names) but not in names: the
// sets share one list of names, built afresh, after services are added
// (each class edits its own set: editedSet) and after one is removed.
func TestRouteSetsOfNamespacesShareTheirNames(t *testing.T) {
	store, o := perAddressMesh(t)
	g := newTestGenerator(t, o, false)
	nss := []string{"ns-0", "ns-1", "ns-2"}
	check := func(when string, cs []*ClassConfig) {
		t.Helper()
		a := cs[0].Sets[RouteType]
		for i, c := range cs[1:] {
			b := c.Sets[RouteType]
			if a == b || a.Version == b.Version {
				t.Fatalf("%s: the route sets of %s and %s are alike: the test shows nothing", when, nss[0], nss[i+1])
			}
			if !slices.Equal(a.Names, b.Names) {
				t.Fatalf("%s: the route sets of %s and %s name different routes: the test shows nothing", when, nss[0], nss[i+1])
			}
			if unsafe.SliceData(a.Names) != unsafe.SliceData(b.Names) {
				t.Errorf("%s: the route sets of %s and %s hold two lists of the same %d names", when, nss[0], nss[i+1], len(a.Names))
			}
		}
	}
	gen := func(prev []*ClassConfig) []*ClassConfig {
		w := store.World()
		out := make([]*ClassConfig, len(nss))
		for i, ns := range nss {
			var p *ClassConfig
			if prev != nil {
				p = prev[i]
			}
			out[i] = mustClass(t, g, w, namespaceProxy(t, ns), p)
		}
		return out
	}
	cs := gen(nil)
	check("first", cs)
	for i, ns := range nss {
		if _, err := store.Apply(worldtest.Service(ns, "added", fmt.Sprintf("10.96.9.%d", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	cs2 := gen(cs)
	check("after services were added", cs2)
	if len(cs2[0].Sets[RouteType].Names) <= len(cs[0].Sets[RouteType].Names) {
		t.Fatal("the services added added no route")
	}
	applyStep(t, store, "", "ns-1", "added")
	check("after a service was removed", gen(cs2))
}

// A list pooled is given for an equal one while a set holds it, and an
// unequal list of the same length is not.
func TestNamesPoolSharesEqualListsOnly(t *testing.T) {
	a := namesPool.of([]string{"x|80", "y|80", "z|80"})
	b := namesPool.of([]string{"x|80", "y|80", "z|80"})
	c := namesPool.of([]string{"x|80", "y|80", "z|81"})
	if unsafe.SliceData(a) != unsafe.SliceData(b) || len(b) != 3 {
		t.Errorf("two equal lists are %p and %p", unsafe.SliceData(a), unsafe.SliceData(b))
	}
	if unsafe.SliceData(c) == unsafe.SliceData(a) || !slices.Equal(c, []string{"x|80", "y|80", "z|81"}) {
		t.Errorf("an unequal list was given %v", c)
	}
	if got := namesPool.of(nil); got != nil {
		t.Errorf("no names gave %v", got)
	}
}
