package gen

import (
	"sync"
	"weak"

	"google.golang.org/protobuf/types/known/anypb"
)

// Lazy resources: a variant's listeners (class_variant.go), made from
// their base's when asked for, written in parts, versioned from their
// base's.

// WireWriter receives a resource's marshaled bytes in parts, in order
// (Resource.WriteWire).
type WireWriter interface {
	// Copy appends b, which the writer may not keep: it is reused.
	Copy(b []byte)
	// Share appends b, which does not change: the writer may keep it
	// instead of a copy.
	Share(b []byte)
}

// WriteWire writes the resource's marshaled bytes (Wire's value) to w. A
// lazy resource whose bytes are not held is written as the parts it is
// made of, most of them its base's bytes, without being made: a variant
// listener sent to its proxy costs a few new bytes rather than a copy of
// its base (2 MB per proxy and service change with port listeners).
func (r *Resource) WriteWire(w WireWriter) {
	if r.lazy == nil {
		w.Share(r.Any.GetValue())
		return
	}
	r.lazy.write(w)
}

// WireShape bounds what WriteWire writes: the bytes in parts shorter
// than small and in Copy calls (copied), and the parts as long or longer
// (shared). A lazy resource counts them from its plan, making and sizing
// nothing.
func (r *Resource) WireShape(small int) (copied, shared int) {
	var b []byte
	if r.lazy == nil {
		b = r.Any.GetValue()
	} else {
		r.lazy.mu.Lock()
		a := r.lazy.held.Value()
		r.lazy.mu.Unlock()
		if a == nil && r.lazy.size >= bigListener {
			// Its write makes it (lazyWire.write): counting it in parts
			// would size the writer for thousands of them.
			a = r.lazy.get()
		}
		if a == nil {
			return r.lazy.plan.shape(r.lazy.base.Wire().GetValue(), r.lazy.tab, small)
		}
		b = a.GetValue()
	}
	if len(b) < small {
		return len(b), 0
	}
	return 0, 1
}

// Lazy reports whether the resource's bytes are made when asked for
// (WriteWire writes them without making them).
func (r *Resource) Lazy() bool { return r.lazy != nil }

// lazyWire is a resource's marshaled form, held weakly and made when
// asked for after it was collected. A variant's listeners
// (class_variant.go) are each a few bytes of a base listener rewritten:
// 2 MB each at M1, one per workload, and sent once or a few times per
// change; holding them would hold a copy of every base listener per
// workload.
//
// What it is made from is kept in the fields rather than a closure: at M1
// per address a variant has 2,000 listeners, and the closures were a
// tenth of the heap.
type lazyWire struct {
	size int
	// The listener is base's bytes rewritten by plan with tab's values
	// and tracings (retagPlan.apply).
	base *Resource
	plan *retagPlan
	tab  *retagTable
	mu   sync.Mutex
	held weak.Pointer[anypb.Any]
}

func (l *lazyWire) write(w WireWriter) {
	l.mu.Lock()
	a := l.held.Value()
	l.mu.Unlock()
	if a == nil && l.size >= bigListener {
		// A large listener is made, and shared by the proxies of its
		// view (retagView.made) while one holds it.
		a = l.get()
	}
	if a != nil {
		w.Share(a.GetValue())
		return
	}
	blobs := l.tab.of(l.plan)
	l.plan.write(w, l.base.Wire().GetValue(), *l.tab.rt, blobs, l.plan.sizes(*l.tab.rt, blobs))
}

func (l *lazyWire) get() *anypb.Any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.held.Value(); a != nil {
		return a
	}
	a := &anypb.Any{TypeUrl: ListenerType, Value: l.plan.apply(l.base.Wire().GetValue(), *l.tab.rt, l.tab.of(l.plan))}
	l.held = weak.Make(a)
	return a
}

// lazyResource is the resource of version hash and size bytes that w
// makes when asked for (Wire); nothing holds its bytes in between.
func lazyResource(name, hash string, w *lazyWire) *Resource {
	return &Resource{Name: name, Hash: hash, lazy: w}
}

// sameSlice reports whether a and b are one slice.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
