package gen

import "weak"

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
