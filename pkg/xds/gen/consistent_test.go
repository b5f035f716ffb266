package gen

import (
	"errors"
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
