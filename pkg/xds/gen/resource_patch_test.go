package gen

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// TestPatchedSetEqualsNewSet changes random sets by adding, removing and
// changing a few resources and checks that the patched set has the names
// and version NewSet gives, and names exactly what changed.
func TestPatchedSetEqualsNewSet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	res := func(name string, v int) *Resource {
		return &Resource{Name: name, Hash: fmt.Sprintf("h%d", v)}
	}
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.Intn(200)
		prevRs := map[string]*Resource{}
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("r%03d", rng.Intn(1000))
			prevRs[name] = res(name, 0)
		}
		prev := NewSet(ClusterType, prevRs)
		next := map[string]*Resource{}
		for k, r := range prevRs {
			switch rng.Intn(20) {
			case 0: // removed
			case 1:
				next[k] = res(k, 1) // changed
			case 2:
				next[k] = res(k, 0) // rebuilt, same content
			default:
				next[k] = r
			}
		}
		for i := rng.Intn(4); i > 0; i-- {
			name := fmt.Sprintf("r%03d", rng.Intn(1000))
			if _, ok := next[name]; !ok {
				next[name] = res(name, 2)
			}
		}
		got, changed := setPatched(ClusterType, prev, next)
		want := NewSet(ClusterType, next)
		if got == nil {
			continue // too much changed: built afresh
		}
		if !slices.Equal(got.Names, want.Names) || got.Version != want.Version {
			t.Fatalf("trial %d: patched set %v (version %s), want %v (%s)", trial, got.Names, got.Version, want.Names, want.Version)
		}
		diff := diffNames(prev, want)
		slices.Sort(diff)
		if !slices.Equal(changed, diff) {
			t.Fatalf("trial %d: patched set names %v as changed, want %v", trial, changed, diff)
		}
	}
}
