package gen

import (
	"runtime"
	"slices"
	"testing"
	"weak"
)

// TestVersionsOutliveTheirSet checks that a Set's Versions answer for
// every name as the Set does and hold none of its resources: once the Set
// is unreachable its marshaled resources are collected while the
// Versions stay usable (a delta stream's base keeps only them).
func TestVersionsOutliveTheirSet(t *testing.T) {
	rs := map[string]*Resource{}
	for _, n := range []string{"b", "a", "c"} {
		rs[n] = rawResource(n, ListenerType, make([]byte, 1<<20))
	}
	set := NewSet(ListenerType, rs)
	want := map[string]string{}
	for n, r := range rs {
		want[n] = r.Hash
	}
	v := set.Versions()
	if set.Versions() != v {
		t.Fatal("a Set built its Versions twice")
	}
	held := weak.Make(rs["a"])
	set, rs = nil, nil
	runtime.GC()
	runtime.GC()
	if held.Value() != nil {
		t.Fatal("a resource of the Set is still reachable through its Versions")
	}
	if got := v.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names() = %v, want [a b c]", got)
	}
	for n, h := range want {
		if got, ok := v.Hash(n); !ok || got != h {
			t.Errorf("Hash(%q) = %q, %v; want %q, true", n, got, ok, h)
		}
	}
	if got, ok := v.Hash("d"); ok || got != "" {
		t.Errorf("Hash of a name not in the Set = %q, %v; want \"\", false", got, ok)
	}
	var none *Versions
	if _, ok := none.Hash("a"); ok || none.Len() != 0 || none.Names() != nil {
		t.Error("nil Versions are not empty")
	}
	if (*Set)(nil).Versions() != nil {
		t.Error("a nil Set has Versions")
	}
}
