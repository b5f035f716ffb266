package gen

import (
	"sync"
	"weak"
)

// weakMap maps keys to values it holds weakly, for the pools that find
// what is in use by content (resource.go, class_variant_wire.go,
// resource_versions.go): it keeps nothing alive. It forgets the entries
// whose value was collected when it has grown to twice what it last
// kept, plus floor, so that forgetting costs a constant per entry
// added. Its user locks it.
type weakMap[K comparable, V any] struct {
	m     map[K]weak.Pointer[V]
	floor int
	// live is how many entries the last sweep left.
	live int
}

func newWeakMap[K comparable, V any](floor int) weakMap[K, V] {
	return weakMap[K, V]{m: map[K]weak.Pointer[V]{}, floor: floor}
}

// get returns the value of k, nil if there is none or it was collected.
func (w *weakMap[K, V]) get(k K) *V { return w.m[k].Value() }

// put makes v the value of k.
func (w *weakMap[K, V]) put(k K, v *V) {
	if len(w.m) >= 2*w.live+w.floor {
		for k, p := range w.m {
			if p.Value() == nil {
				delete(w.m, k)
			}
		}
		w.live = len(w.m)
	}
	w.m[k] = weak.Make(v)
}

// weakPool is a weakMap behind its own lock, for the pools that find a
// value in use by a key (a hash of what it is made of) and check that the
// value found is the one wanted: sets, their Versions, logs, endpoint
// indexes, chosen services. Pooled values are never changed, so a value
// found is compared without the lock.
type weakPool[K comparable, V any] struct {
	mu sync.Mutex
	m  weakMap[K, V]
}

// find returns the value of k in use for which same holds, or nil.
func (p *weakPool[K, V]) find(k K, same func(*V) bool) *V {
	p.mu.Lock()
	v := p.m.get(k)
	p.mu.Unlock()
	if v != nil && same(v) {
		return v
	}
	return nil
}

// keep returns the value of k for which same holds if one was pooled
// meanwhile, else pools v, made after find found none, and returns it.
func (p *weakPool[K, V]) keep(k K, v *V, same func(*V) bool) *V {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.m.get(k); old != nil && same(old) {
		return old
	}
	p.m.put(k, v)
	return v
}
