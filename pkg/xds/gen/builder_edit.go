package gen

import (
	"slices"
	"strings"
)

// A builder that follows its previous log through operations put in
// between the log's and operations of the log that do not come.
//
// A service added to the World is one unit more in every class that sees
// it: in each type's log, one operation more, putting in names the
// previous set did not have; a service removed is one operation fewer.
// A builder that stopped following at the first such operation filled a
// map of the whole set from the log (diverge): at M1, the 50 namespaces'
// classes filled a map of about 2,000 entries per type for every service
// added or removed, 25 MB that the collection running meanwhile found
// live (BENCHMARKS.md). Instead the builder goes on following: its set is
// the previous one with the new names merged in and the missing
// operations' names taken out, and its log is the previous one with the
// same edits. (With listeners per address a port's listeners are one
// operation, which a service added or removed changes rather than adds
// to: the listeners' builder still fills its map then. Replacing an
// operation by one with a few names more or fewer, tried, cost as much:
// two sorted copies of the operation's names and the set's.)
//
// That holds when every name the previous log put in, it put in once and
// never took out (no rewrites, no deletions): then each of the previous
// set's names is one operation's, an operation put in between may put in
// only names the previous set lacks (and no operation put in before has),
// and the names of an operation that did not come are out of the set. A
// later operation that puts in such a name again, or any other that is
// none of these, is the log's no more, and the builder fills its map from
// what it followed (diverge), as before.

// insertion is an operation put in before the log's operation at.
type insertion struct {
	at int
	op buildOp
}

// skipAhead is how many of the log's operations an operation may skip
// to be the log's next: a service removed is one unit's operation fewer,
// and a few of them are removed together.
const skipAhead = 8

// canEdit reports whether b's log may be followed with insertions and
// skips: it put in every name once and took none out.
func (b *builder) canEdit() bool {
	if b.edits == 0 {
		b.edits = 1
		if b.replay.rewrites {
			b.edits = 2
		}
		for i := range b.replay.ops {
			if b.replay.ops[i].rs == nil {
				b.edits = 2
				break
			}
		}
	}
	return b.edits == 1
}

// insertable reports whether op may be put in between the log's
// operations: it puts in names that neither the previous set nor an
// operation put in before has, each once.
func (b *builder) insertable(op *buildOp) bool {
	if len(op.rs) == 0 || !b.canEdit() {
		return false
	}
	for i, r := range op.rs {
		if _, ok := b.prevSet.find(r.Name); ok || b.inserted(r.Name) {
			return false
		}
		for _, o := range op.rs[:i] {
			if o.Name == r.Name {
				return false
			}
		}
	}
	return true
}

// inserted reports whether an operation put in between has name.
func (b *builder) inserted(name string) bool {
	_, ok := slices.BinarySearch(b.insNames, name)
	return ok
}

// insert puts op in between the log's operations, if it may be: before
// the log's next one, its names merged into insNames.
func (b *builder) insert(op *buildOp) bool {
	if !b.insertable(op) {
		return false
	}
	b.ins = append(b.ins, insertion{at: b.n, op: *op})
	names := sortedNames(op.rs)
	all := make([]string, 0, len(b.insNames)+len(names))
	i, j := 0, 0
	for i < len(b.insNames) && j < len(names) {
		if b.insNames[i] < names[j] {
			all = append(all, b.insNames[i])
			i++
		} else {
			all = append(all, names[j])
			j++
		}
	}
	b.insNames = append(append(all, b.insNames[i:]...), names[j:]...)
	return true
}

func sortedNames(rs []*Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	slices.Sort(out)
	return out
}

// skippable returns k > 0 when op is the log's operation k after the
// next, and the k before it put names in: those did not come.
func (b *builder) skippable(op *buildOp) int {
	if op.rs == nil || !b.canEdit() {
		return 0
	}
	for k := 1; k <= skipAhead && b.n+k < len(b.replay.ops); k++ {
		if op.same(&b.replay.ops[b.n+k], true) {
			return k
		}
	}
	return 0
}

// skipTo skips the log's operations before the one op is, if it is one
// of the next few: op is then the log's next.
func (b *builder) skipTo(op *buildOp) bool {
	k := b.skippable(op)
	for range k {
		b.skips = append(b.skips, b.n)
		b.n++
	}
	return k > 0
}

// skipRest skips the log's operations that did not come at its end.
func (b *builder) skipRest() {
	if b.n == len(b.replay.ops) || !b.canEdit() {
		return
	}
	for ; b.n < len(b.replay.ops); b.n++ {
		b.skips = append(b.skips, b.n)
	}
}

// edited is the log b followed: the previous one's operations it did, as
// it did them, with those put in between in their places.
func (b *builder) edited() []buildOp {
	ops := make([]buildOp, 0, b.n+len(b.ins)-len(b.skips))
	ii, si, ki := 0, 0, 0
	for i := 0; ; i++ {
		for ; ii < len(b.ins) && b.ins[ii].at == i; ii++ {
			ops = append(ops, b.ins[ii].op)
		}
		if i == b.n {
			return ops
		}
		if ki < len(b.skips) && b.skips[ki] == i {
			ki++
			continue
		}
		op := b.replay.ops[i]
		if si < len(b.subs) && b.subs[si] == i {
			op = b.subOps[si]
			si++
		}
		ops = append(ops, op)
	}
}

// editedSet is replayed's set when operations were put in between or
// did not come: prev's resources with the substitutions' contents
// (changed: the names whose contents differ), the names of the
// operations that did not come taken out and those put in merged in
// (insertable: no name is both); its sum is prev's, updated for those
// names alone. The names it lists as changed are diffNames's, in its
// order.
func (b *builder) editedSet(prev *Set, changed []string) (*Set, []string, bool) {
	e := b.edit(prev, changed)
	if set, all, ok := e.madeOf(prev); ok {
		return set, all, true
	}
	// The substitutions in index order, applied as prev's resources are
	// copied: no copy of prev's resources to put them in first.
	subs := e.subs
	if !slices.IsSortedFunc(subs, bySubstIndex) {
		subs = slices.SortedFunc(slices.Values(subs), bySubstIndex)
	}
	sum := prev.sum
	for _, s := range subs {
		sum += entryHash(s.r.Name, s.r) - entryHash(s.r.Name, prev.rs[s.at])
	}
	added, skipped := e.added, e.skipped
	names := make([]string, 0, len(prev.rs)+len(added)-len(skipped))
	out := make([]*Resource, 0, cap(names))
	all := slices.Clone(changed)
	var removed []string
	put := func(r *Resource) {
		names, out = append(names, r.Name), append(out, r)
	}
	ai, si := 0, 0
	addBefore := func(n string, last bool) {
		for ; ai < len(added) && (last || added[ai].Name < n); ai++ {
			put(added[ai])
			sum += entryHash(added[ai].Name, added[ai])
			all = append(all, added[ai].Name)
		}
	}
	bi := 0
	for i, n := range prev.Names {
		addBefore(n, false)
		r := prev.rs[i]
		if bi < len(subs) && subs[bi].at == i {
			r = subs[bi].r
			bi++
		}
		if si == len(skipped) || skipped[si] != n {
			put(r)
			continue
		}
		si++
		sum -= entryHash(n, r)
		removed = append(removed, n)
	}
	addBefore("", true)
	// In diffNames's order: the names changed or added, then those
	// removed, each in name order.
	slices.Sort(all)
	all = slices.Clip(append(all, removed...))
	e.set, e.all = newSetSorted(b.typeURL, out, namesPool.of(names), sum), all
	prev.edit.Store(e)
	return e.set, all, true
}

// edit is what b's edit of prev is made of: the substitutions' contents
// (changed: the names whose contents differ), the names of the
// operations that did not come, and the resources of those put in
// between, each in name order.
func (b *builder) edit(prev *Set, changed []string) *setEdit {
	e := &setEdit{changed: changed}
	for _, op := range b.subOps {
		for _, r := range op.rs {
			if i, ok := prev.find(r.Name); ok {
				e.subs = append(e.subs, subst{i, r})
			}
		}
	}
	n := 0
	for _, i := range b.skips {
		n += len(b.replay.ops[i].rs)
	}
	e.skipped = make([]string, 0, n)
	for _, i := range b.skips {
		for _, r := range b.replay.ops[i].rs {
			e.skipped = append(e.skipped, r.Name)
		}
	}
	slices.Sort(e.skipped)
	e.added = make([]*Resource, 0, len(b.insNames))
	for _, in := range b.ins {
		e.added = append(e.added, in.op.rs...)
	}
	slices.SortFunc(e.added, func(x, y *Resource) int { return strings.Compare(x.Name, y.Name) })
	return e
}

func bySubstIndex(a, b subst) int { return a.at - b.at }
