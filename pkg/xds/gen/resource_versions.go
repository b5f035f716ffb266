package gen

import (
	"slices"
	"weak"
)

// versionsPool shares the Versions of equal sets. A delta stream keeps
// the Versions of the sets it was last brought up to date with
// (pkg/xds/server), one per class and type: at M1 with injected labels
// the 50 namespaces' classes, whose sets have the same resources since
// their listeners are generated with placeholders (class_shared.go),
// held 50 equal maps per type, 34 of the 324 MB of heap after the
// changes. Held weakly and swept as it grows, like the resource pool.
var versionsPool = versionsShare{weakPool[versionsKey, Versions]{m: newWeakMap[versionsKey, Versions](1024)}}

type versionsKey struct {
	typeURL, version string
	n                int
}

type versionsShare struct {
	weakPool[versionsKey, Versions]
}

// of returns the Versions of s, a builder's set: the pooled one of an
// equal set if one is in use, else a new one, pooled. Equal is checked
// name by name: the set's version is a 64-bit sum, which finds the
// candidate but does not prove it.
func (p *versionsShare) of(s *Set) *Versions {
	k := versionsKey{s.TypeURL, s.Version, len(s.rs)}
	same := func(old *Versions) bool { return old.equals(s) }
	if old := p.find(k, same); old != nil {
		return old
	}
	v := &Versions{names: s.Names, hashes: make([]string, len(s.rs))}
	for i, r := range s.rs {
		v.hashes[i] = r.Hash
	}
	return p.keep(k, v, same)
}

// equals reports whether v versions exactly the resources of s, a
// builder's set.
func (v *Versions) equals(s *Set) bool {
	if v.from != nil || len(v.hashes) != len(s.rs) || !slices.Equal(v.names, s.Names) {
		return false
	}
	for i, r := range s.rs {
		if v.hashes[i] != r.Hash {
			return false
		}
	}
	return true
}

// setsPool shares equal builder sets between classes. The 50 namespaces'
// classes at M1 build equal clusters, endpoints and listeners (their
// routes differ by their own services' short names), each from its own
// builder: 50 equal lists of names and resources per type. A class
// publishes the pooled set when one equal to its own is in use (publish):
// a Set is never changed once built, so sharing it is sharing its value.
// Held weakly, like the Versions.
var setsPool = setsShare{weakPool[versionsKey, Set]{m: newWeakMap[versionsKey, Set](1024)}}

type setsShare struct{ weakPool[versionsKey, Set] }

// of returns the pooled set equal to s, a builder's set, if one is in
// use; else s, pooled (in place of another of the same sum, if one is).
func (p *setsShare) of(s *Set) *Set {
	if s == nil || s.view != nil {
		return s
	}
	return p.keep(versionsKey{s.TypeURL, s.Version, len(s.rs)}, s, func(old *Set) bool { return old == s || old.equals(s) })
}

// equals reports whether builder sets s and o hold the same names with
// the same contents (versions: resources are hashed by their bytes).
func (s *Set) equals(o *Set) bool {
	if s.TypeURL != o.TypeURL || len(s.rs) != len(o.rs) || !slices.Equal(s.Names, o.Names) {
		return false
	}
	for i, r := range s.rs {
		if q := o.rs[i]; r != q && r.Hash != q.Hash {
			return false
		}
	}
	return true
}

// Memo returns what build makes of the resources v versions, made once
// per Versions while the last one made is in use: v holds it weakly, so
// it lives as long as its callers hold it and is made again after a
// collection found it unused. Equal sets share their Versions
// (versionsPool), so the classes of a mesh's namespaces share one.
// build reads one of the sets v versions; concurrent callers wait for
// one build. Only a builder's set has Versions of its own content: a
// view's (retagView.versions) is never memoized.
func Memo[T any](v *Versions, build func() *T) *T {
	v.memoMu.Lock()
	defer v.memoMu.Unlock()
	for i, m := range v.memo {
		if w, ok := m.(weak.Pointer[T]); ok {
			if p := w.Value(); p != nil {
				return p
			}
			p := build()
			v.memo[i] = weak.Make(p)
			return p
		}
	}
	p := build()
	v.memo = append(v.memo, weak.Make(p))
	return p
}
