package gen

import "slices"

// A service added or removed is the same edit of the same set in each of
// M1's 50 namespace classes: their clusters and endpoints are one set,
// shared (setsPool), and each class's builder follows its log through
// the same insertion or skip (builder_edit.go). Each made its own copy
// of the 2,000 names and resources (editedSet: 71-81 MB of what ten
// services added and removed allocate), for setsPool to keep the first
// and drop the other 49. A set now keeps its last edit and the result:
// an equal edit of it is given that result, not made again.

// setEdit is an edit of a set and, once made, its result.
type setEdit struct {
	subs    []subst
	changed []string
	skipped []string
	added   []*Resource

	set *Set
	all []string // the names editedSet reports changed
}

// subst puts r in at index at of the set's resources.
type subst struct {
	at int
	r  *Resource
}

// madeOf returns the result of an edit equal to e last made of prev.
// Resources of equal name and hash are equal (their bytes are).
func (e *setEdit) madeOf(prev *Set) (*Set, []string, bool) {
	last := prev.edit.Load()
	if last == nil || !slices.Equal(last.changed, e.changed) || !slices.Equal(last.skipped, e.skipped) ||
		!slices.EqualFunc(last.subs, e.subs, func(a, b subst) bool { return a.at == b.at && sameResource(a.r, b.r) }) ||
		!slices.EqualFunc(last.added, e.added, sameResource) {
		return nil, nil, false
	}
	return last.set, last.all, true
}

func sameResource(a, b *Resource) bool {
	return a == b || a.Name == b.Name && a.Hash == b.Hash
}
