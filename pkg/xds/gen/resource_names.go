package gen

import (
	"hash/maphash"
	"slices"
	"unsafe"
)

// Sets share their lists of names. M1's 50 namespace classes build route
// sets that differ in content (each namespace's own services' short host
// names) but not in names: 2,002 the same in each. Each set held its own
// sorted list, 32 KB, and while a service change's pushes went on the
// route sets of three or four generations were alive: 214 lists, 6.7 of
// the 124 MB a collection found live mid-changes (test/load/results/
// f03d442/heap-midchanges-n.txt). A set built with a new list takes the
// pooled equal one in its place; Versions share their set's.

// namesPool finds a list of names equal to one just built among those in
// use, held weakly: by its first element, whose weak pointer keeps the
// list's array as long as a set does.
var namesPool = namesShare{weakPool[namesKey, string]{m: newWeakMap[namesKey, string](1024)}}

var namesSeed = maphash.MakeSeed()

type namesKey struct {
	h uint64
	n int
}

type namesShare struct{ weakPool[namesKey, string] }

// of returns the list in use equal to names, a sorted list no one else
// holds yet, or names itself, pooled.
func (p *namesShare) of(names []string) []string {
	if len(names) == 0 {
		return names
	}
	var h maphash.Hash
	h.SetSeed(namesSeed)
	for _, n := range names {
		h.WriteString(n)
		h.WriteByte(0)
	}
	k := namesKey{h.Sum64(), len(names)}
	// A pooled first element was pooled under its list's length: the
	// array behind it holds at least that many.
	same := func(first *string) bool { return slices.Equal(unsafe.Slice(first, len(names)), names) }
	if first := p.find(k, same); first != nil {
		return unsafe.Slice(first, len(names))
	}
	return unsafe.Slice(p.keep(k, &names[0], same), len(names))
}
