package gen

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"
	"weak"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestClassesShareEqualResources generates the classes of two namespaces
// that see the same services and checks that every resource the two
// have alike (same name and version) is one resource, and that the
// second class's kept chains are bytes of the listeners it serves:
// nothing of what it marshaled for itself and found alike stays alive.
// Routes and clusters are alike in any case; listeners only with tracing
// off, since tracing tags name the proxy's namespace in every
// connection manager (as istiod's do).
func TestClassesShareEqualResources(t *testing.T) {
	for _, shape := range []struct {
		name               string
		perAddress, traced bool
	}{
		{"port listeners", false, false}, {"listeners per address", true, false},
		{"port listeners, tracing on", false, true}, {"listeners per address, tracing on", true, true},
	} {
		t.Run(shape.name, func(t *testing.T) {
			o := DefaultOptions(quietLog())
			o.ListenersPerAddress = shape.perAddress
			store := model.NewStore(model.StoreOptions{})
			if !shape.traced {
				ev, err := worldtest.MeshConfig("enableTracing: false\n")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := store.Apply(ev); err != nil {
					t.Fatal(err)
				}
			}
			g := newTestGenerator(t, o, false)
			w := applyStep(t, store, memoWorld(20), "", "")
			a, err := g.Class(w, sidecar(t, "a"), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := g.Class(w, sidecar(t, "b"), nil)
			if err != nil {
				t.Fatal(err)
			}
			alike := map[string]int{}
			for _, typ := range TypeURLs {
				for n, rb := range b.Sets[typ].All() {
					ra := a.Sets[typ].Get(n)
					if ra == nil || ra.Hash != rb.Hash {
						continue
					}
					alike[typ]++
					if ra != rb {
						t.Errorf("%s %s: the classes have equal resources, not one", ShortType(typ), n)
					}
				}
			}
			for _, typ := range []string{RouteType, ClusterType} {
				if alike[typ] == 0 {
					t.Errorf("no %s is alike in the two classes: the test no longer compares anything", ShortType(typ))
				}
			}
			pu := b.ports[80]
			for n, k := range pu.memo.kept {
				if !within(k.wire, pu.resources()) {
					t.Errorf("class b's memo keeps chain %s outside the listeners it serves", n)
				}
			}
			switch shared := oneAndTheSame(pu.resources(), a.ports[80].resources()); {
			case !shape.traced && !shared:
				t.Error("port 80's listeners are not one for both classes with tracing off")
			case shape.traced && shared:
				t.Error("port 80's listeners are one for both classes with tracing on: they should name the namespace")
			}
		})
	}
}

// oneAndTheSame reports whether a and b are the same resources (pointers).
func oneAndTheSame(a, b []*Resource) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// within reports whether b is a slice of one of rs's bytes.
func within(b []byte, rs []*Resource) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, r := range rs {
		v := r.Any.GetValue()
		start := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
		if p >= start && p+uintptr(len(b)) <= start+uintptr(len(v)) {
			return true
		}
	}
	return false
}

// TestPoolSharesEqualBytesOnly checks that the pool gives back a pooled
// resource only for the same type, name and bytes: a hash that matches
// over other bytes is not enough.
func TestPoolSharesEqualBytesOnly(t *testing.T) {
	p := resourcePool{m: newWeakMap[resourceKey, Resource](4096)}
	res := func(typ, name, hash, value string) *Resource {
		return &Resource{Name: name, Hash: hash, Any: &anypb.Any{TypeUrl: typ, Value: []byte(value)}}
	}
	first := p.intern(res(ListenerType, "l", "h", "one"))
	for _, c := range []struct {
		what  string
		r     *Resource
		share bool
	}{
		{"the same bytes", res(ListenerType, "l", "h", "one"), true},
		{"other bytes under the same hash", res(ListenerType, "l", "h", "two"), false},
		{"another name", res(ListenerType, "m", "h", "one"), false},
		{"another type", res(RouteType, "l", "h", "one"), false},
	} {
		if got := p.intern(c.r); (got == first) != c.share {
			t.Errorf("%s: shared %v, want %v", c.what, got == first, c.share)
		}
	}
	runtime.KeepAlive(first)
}

// TestPoolForgetsCollectedResources checks that the pool keeps no
// resource alive and that its map does not grow with resources that are
// gone.
func TestPoolForgetsCollectedResources(t *testing.T) {
	p := resourcePool{m: newWeakMap[resourceKey, Resource](4096)}
	kept := p.intern(&Resource{Name: "kept", Hash: "k", Any: &anypb.Any{TypeUrl: ListenerType, Value: []byte("kept")}})
	held := weak.Make(p.intern(&Resource{Name: "dropped", Hash: "d", Any: &anypb.Any{TypeUrl: ListenerType, Value: make([]byte, 1<<20)}}))
	runtime.GC()
	if held.Value() != nil {
		t.Fatal("a resource only the pool knows is still reachable")
	}
	for i := range 100_000 {
		p.intern(&Resource{Name: fmt.Sprint(i), Hash: "h", Any: &anypb.Any{TypeUrl: ListenerType, Value: []byte{byte(i)}}})
		if i%10_000 == 0 {
			runtime.GC()
		}
	}
	if n := len(p.m.m); n > 3*10_000+4096 {
		t.Errorf("the pool holds %d entries after 100,000 resources, at most 10,000 of them alive at a time", n)
	}
	if got := p.intern(&Resource{Name: "kept", Hash: "k", Any: &anypb.Any{TypeUrl: ListenerType, Value: []byte("kept")}}); got != kept {
		t.Error("a sweep forgot a resource still in use")
	}
}
