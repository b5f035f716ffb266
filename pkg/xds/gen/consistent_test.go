package gen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// TestConsistencyIsCheckedAgainWhenReferencesChange: a class whose route
// names are prev's (a set sharing prev's sorted names) skips the check
// only while the listeners reference the same names; references that
// changed are checked, and an unreferenced or missing route is reported.
func TestConsistencyIsCheckedAgainWhenReferencesChange(t *testing.T) {
	routes := func(names ...string) map[string]*Resource {
		out := map[string]*Resource{}
		for _, n := range names {
			r, err := NewResource(n, RouteType, &routev3.RouteConfiguration{Name: n})
			if err != nil {
				t.Fatal(err)
			}
			out[n] = r
		}
		return out
	}
	prevRoutes := NewSet(RouteType, routes("a", "b"))
	prev := &ClassConfig{Sets: map[string]*Set{RouteType: prevRoutes}, routeRefs: []string{"a", "b"}}
	// New contents, the same names: setFrom's shape.
	b := newBuilder(RouteType)
	b.out = routes("a", "b")
	// Resources are shared by content (rawResource): b changes by being
	// another resource, not by changing the one prev holds.
	changedB, err := NewResource("b", RouteType, &routev3.RouteConfiguration{Name: "b", VirtualHosts: []*routev3.VirtualHost{{Name: "v", Domains: []string{"*"}}}})
	if err != nil {
		t.Fatal(err)
	}
	b.out["b"] = changedB
	next, changed, known := b.setFrom(prevRoutes)
	if !known || len(changed) != 1 || !sameNames(next, prevRoutes) {
		t.Fatalf("setFrom = changed %v, known %v, same names %v; want [b], true, true", changed, known, sameNames(next, prevRoutes))
	}
	sets := map[string]*Set{RouteType: next}
	if err := consistentSince(prev, sets, nil, []string{"a", "b"}); err != nil {
		t.Errorf("same names, same references: %v", err)
	}
	err = consistentSince(prev, sets, nil, []string{"a", "c"})
	if !errors.Is(err, ErrInconsistent) {
		t.Errorf("references changed to [a c] over routes [a b]: got %v, want ErrInconsistent", err)
	}
}

// checkByMap is check as it was written first, with a map of the
// references: the oracle for TestCheckReportsAsByMap.
func checkByMap(set *Set, refs []string) (missing, unused []string) {
	want := map[string]bool{}
	for _, r := range refs {
		want[r] = true
	}
	for _, n := range set.Names {
		if !want[n] {
			unused = append(unused, n)
		}
	}
	for r := range want {
		if set.Get(r) == nil {
			missing = append(missing, r)
		}
	}
	sort.Strings(missing)
	return missing, unused
}

// check, which marks the set's names in a bit set, finds a set consistent
// with its references exactly when a map of them does, and reports the
// same missing and unreferenced names.
func TestCheckReportsAsByMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	universe := make([]string, 150)
	for i := range universe {
		universe[i] = fmt.Sprintf("r%03d", i)
	}
	for round := 0; round < 400; round++ {
		pick := func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = universe[rng.IntN(len(universe))]
			}
			return out
		}
		names := pick(rng.IntN(140))
		rs := map[string]*Resource{}
		for _, n := range names {
			r, err := NewResource(n, RouteType, &routev3.RouteConfiguration{Name: n})
			if err != nil {
				t.Fatal(err)
			}
			rs[n] = r
		}
		set := NewSet(RouteType, rs)
		var refs []string
		switch round % 3 {
		case 0: // the set's names, repeated and shuffled: consistent
			refs = append(slices.Clone(set.Names), set.Names...)
			rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
		case 1: // all but some, and some the set lacks
			refs = append(slices.Clone(set.Names), pick(rng.IntN(3))...)
			if len(refs) > 0 {
				refs = refs[rng.IntN(2):]
			}
		default:
			refs = pick(rng.IntN(200))
		}
		err := check(map[string]*Set{RouteType: set}, RouteType, refs)
		missing, unused := checkByMap(set, refs)
		if len(missing)+len(unused) == 0 {
			if err != nil {
				t.Fatalf("names %v, references %v: %v, want none", set.Names, refs, err)
			}
			continue
		}
		want := fmt.Sprintf("%v: rds referenced but missing [%s], present but unreferenced [%s]",
			ErrInconsistent, strings.Join(missing, " "), strings.Join(unused, " "))
		if err == nil || err.Error() != want {
			t.Fatalf("names %v, references %v:\n got %v\nwant %s", set.Names, refs, err, want)
		}
	}
}
