package gen

import (
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"
)

// builder collects resources of one type, validating each; a resource
// that fails validation is reported and replaced by its stand-in or left
// out (contain.go).
//
// A builder logs what it puts in and takes out (buildLog), and a class's
// next generation replays that log. While each of its operations is the
// previous generation's, or puts in the same names with other contents,
// it holds what the previous one held at the same point, but for those
// contents: it keeps no map, and its set is the previous set with those
// contents replaced. A VirtualService edit rebuilds a few routes of a
// class of thousands of resources: its clusters, endpoints and listeners
// are then the previous sets, and its routes a copy of the previous map
// with two entries written (BenchmarkClassAfterEditWith100VirtualServices).
// An operation that puts in other names, or a question only a map
// answers (has), fills the map from the log and the builder goes on as
// one without a previous generation.
type builder struct {
	typeURL string
	// out holds the resources put in, unless the builder is replaying.
	out  map[string]*Resource
	errs []error
	// log is what was put in and taken out, in order, for the next
	// generation to replay. While the builder follows the previous
	// generation's log it is that log: n operations of it done, with
	// those at the indexes subs replaced by subOps.
	log buildLog
	// replay is the previous generation's log while the builder follows
	// it (prevSet is the set that log built); subs are the indexes of
	// the operations that put in its names with other contents.
	replay  *buildLog
	prevSet *Set
	n       int
	subs    []int
	subOps  []buildOp
	// ins are the operations put in between the log's, skips the
	// indexes of the log's operations that did not come (builder_edit.go).
	ins   []insertion
	skips []int
	// insNames are the names ins put in, sorted.
	insNames []string
	// edits caches whether the log may be followed with insertions and
	// skips (canEdit): 0 not asked yet, 1 yes, 2 no.
	edits int8
	// opAt is which of the log's operations put in each of prevSet's
	// names (logMemo.opOf), fetched once: has asks it name by name.
	opAt []int32
	// deleted are the names taken out of out, while they are not put in
	// again (buildLog.rewrites).
	deleted map[string]bool
}

// buildLog is the operations a builder did, in order.
type buildLog struct {
	ops []buildOp
	// rewrites is set when an operation put in a name that an earlier one
	// put in, whether it was taken out since or not: the final contents
	// of a name are then not those of the one operation that names it.
	rewrites bool
	// memo is the last edit of a pooled log (builder_log_pool.go).
	memo *logMemo
}

// buildOp is one logged operation: resources put in (rs, as a unit's
// slice or one resource), or the resource named del taken out.
type buildOp struct {
	rs  []*Resource
	del string
}

// same reports whether a and b leave a builder in the same state: the
// same name taken out, or the same names with the same contents put in.
// Names alone says whether they put in the same names.
func (a *buildOp) same(b *buildOp, names bool) bool {
	if a.del != b.del || len(a.rs) != len(b.rs) {
		return false
	}
	if len(a.rs) == 0 || &a.rs[0] == &b.rs[0] {
		return true
	}
	for i, r := range a.rs {
		if o := b.rs[i]; r != o && (r.Name != o.Name || !names && r.Hash != o.Hash) {
			return false
		}
	}
	return true
}

func newBuilder(typeURL string) *builder {
	return &builder{typeURL: typeURL, out: map[string]*Resource{}}
}

// replaying makes b follow log, that of the builder that built set in
// the previous generation. Without a log, b starts with a map sized like
// set: growing a map of thousands of entries rehashes it several times.
func (b *builder) replaying(log *buildLog, set *Set) {
	if set == nil {
		return
	}
	if log == nil {
		b.sizedLike(set)
		return
	}
	b.replay, b.prevSet, b.out = log, set, nil
}

// sizedLike sizes b's map like set (nil: as it is), for a builder with
// no log to follow: at M1 the maps of the classes made while the proxies
// connected, grown as resources came, were 41 MB of the 392 MB connect
// allocated.
func (b *builder) sizedLike(set *Set) {
	if set != nil {
		b.out = make(map[string]*Resource, set.Len())
	}
}

// following reports whether b is still replaying its previous log.
func (b *builder) following() bool { return b.replay != nil }

// next reports whether op is the previous generation's next operation
// (names: or puts in the same names, which the previous log put in once
// each).
func (b *builder) next(op *buildOp, names bool) bool {
	return b.n < len(b.replay.ops) && op.same(&b.replay.ops[b.n], names && !b.replay.rewrites)
}

// nextEach reports whether the previous generation's next operations
// put in rs, one each, with the same contents.
func (b *builder) nextEach(rs []*Resource) bool {
	if b.n+len(rs) > len(b.replay.ops) {
		return false
	}
	for k := range rs {
		if !b.replay.ops[b.n+k].same(&buildOp{rs: rs[k : k+1]}, false) {
			return false
		}
	}
	return true
}

// do applies op: logged, and put in out unless the builder follows its
// previous log and op is that log's next operation or puts in the same
// names (a substitution).
func (b *builder) do(op buildOp) {
	if b.replay != nil {
		switch {
		case b.next(&op, false):
			b.n++
			return
		case b.next(&op, true):
			b.subs, b.subOps = append(b.subs, b.n), append(b.subOps, op)
			b.n++
			return
		case b.insert(&op):
			return
		case b.skipTo(&op):
			b.do(op)
			return
		}
		b.diverge()
	}
	b.log.ops = append(b.log.ops, op)
	b.apply(&op)
}

// followed is the log of a builder that followed its previous one: that
// log, shared, or a copy with the substitutions.
func (b *builder) followed() buildLog {
	ops := b.replay.ops[:b.n]
	if len(b.ins) > 0 || len(b.skips) > 0 || len(b.subs) > 0 {
		ops = b.replay.memo.editOf(b)
	}
	return buildLog{ops: ops, rewrites: b.replay.rewrites}
}

// editedOps is the log of a builder that followed its previous one with
// substitutions, insertions or skips.
func (b *builder) editedOps() []buildOp {
	if len(b.ins) > 0 || len(b.skips) > 0 {
		return b.edited()
	}
	ops := slices.Clone(b.replay.ops[:b.n])
	for k, i := range b.subs {
		ops[i] = b.subOps[k]
	}
	return ops
}

// apply does op to out.
func (b *builder) apply(op *buildOp) {
	if op.rs == nil {
		if _, ok := b.out[op.del]; ok {
			delete(b.out, op.del)
			if b.deleted == nil {
				b.deleted = map[string]bool{}
			}
			b.deleted[op.del] = true
		}
		return
	}
	for _, r := range op.rs {
		n := len(b.out)
		b.out[r.Name] = r
		if len(b.out) == n || b.deleted[r.Name] {
			b.log.rewrites = true
		}
	}
}

// diverge stops replaying: out is filled from the operations so far.
func (b *builder) diverge() {
	if b.replay == nil {
		return
	}
	b.out = make(map[string]*Resource, b.prevSet.Len())
	log := b.followed()
	b.log.ops = append(make([]buildOp, 0, len(b.replay.ops)+8), log.ops...)
	b.replay, b.prevSet, b.n, b.subs, b.subOps = nil, nil, 0, nil, nil
	b.ins, b.skips, b.insNames, b.edits, b.opAt = nil, nil, nil, 0, nil
	for i := range b.log.ops {
		b.apply(&b.log.ops[i])
	}
}

// has reports whether b holds a resource named name. Following a log
// that puts every name in once and takes none out, b holds a name the
// previous set lacks only if an operation put in between put it, and
// one of the previous set's if the operation that put it in is done and
// was not skipped (a substitution puts in the same names).
func (b *builder) has(name string) bool {
	if b.replay != nil && b.canEdit() {
		i, ok := b.prevSet.find(name)
		if !ok {
			return b.inserted(name)
		}
		if b.opAt == nil {
			b.opAt = b.replay.memo.opOf(b.replay, b.prevSet)
		}
		if at := b.opAt[i]; at >= 0 {
			_, skipped := slices.BinarySearch(b.skips, int(at))
			return int(at) < b.n && !skipped
		}
	}
	b.diverge()
	return b.out[name] != nil
}

// add builds a resource from m and puts it in, unless b has one of that
// name already (an error).
func (b *builder) add(name string, m proto.Message) {
	r, err := buildResource(name, b.typeURL, m)
	var op buildOp
	if r != nil {
		op.rs = []*Resource{r}
	}
	// Replaying, the name was not taken when the previous generation put
	// it in at this point, and the state is the same now.
	if b.replay != nil && (r == nil || !b.next(&op, true) && !b.insertable(&op) && b.skippable(&op) == 0) {
		b.diverge()
	}
	if b.replay == nil {
		if _, dup := b.out[name]; dup {
			b.errs = append(b.errs, fmt.Errorf("duplicate %s %q", ShortType(b.typeURL), name))
			return
		}
	}
	if err != nil {
		b.errs = append(b.errs, err)
	}
	if r != nil {
		b.do(op)
	}
}

// reuse puts r in, replacing any resource of its name.
func (b *builder) reuse(r *Resource) { b.do(buildOp{rs: []*Resource{r}}) }

// reuseAll puts rs in, replacing resources of their names; rs is logged
// as it is, and must not change after.
func (b *builder) reuseAll(rs []*Resource) {
	if len(rs) > 0 {
		b.do(buildOp{rs: rs})
	}
}

// reuseEach puts rs in as an operation each; rs must not change after.
// A builder without a log to follow grows its log once for them.
func (b *builder) reuseEach(rs []*Resource) {
	if b.replay == nil {
		b.log.ops = slices.Grow(b.log.ops, len(rs))
	}
	for i := range rs {
		b.reuseAll(rs[i : i+1 : i+1])
	}
}

// remove takes the resource named name out, if b has one.
func (b *builder) remove(name string) { b.do(buildOp{del: name}) }

func (b *builder) set() *Set {
	b.diverge()
	return NewSet(b.typeURL, b.out)
}

// replayed is setFrom for a builder that followed its previous log to
// its end, prev being the set that log built: prev itself, or a copy
// with the contents the substitutions put in. Each name was put in once
// by that log (not rewrites): its final contents are those of the one
// operation that put it in, unless an operation took it out since.
func (b *builder) replayed(prev *Set) (*Set, []string, bool) {
	var changed []string
	for j, i := range b.subs {
		was := b.replay.ops[i].rs
		for k, r := range b.subOps[j].rs {
			if o := was[k]; r != o && r.Hash != o.Hash && prev.at(r.Name) != nil {
				changed = append(changed, r.Name)
			}
		}
	}
	if len(b.ins) > 0 || len(b.skips) > 0 {
		return b.editedSet(prev, changed)
	}
	if len(changed) == 0 {
		return prev, nil, true
	}
	rs := b.substituted(prev)
	sort.Strings(changed)
	return newSetSorted(b.typeURL, rs, prev.Names, prev.replaced(rs, changed)), changed, true
}

// substituted is prev's resources, in its order, with the contents the
// substitutions put in.
func (b *builder) substituted(prev *Set) []*Resource {
	rs := slices.Clone(prev.rs)
	for _, op := range b.subOps {
		for _, r := range op.rs {
			if i, ok := prev.find(r.Name); ok {
				rs[i] = r
			}
		}
	}
	return rs
}

// setFrom is set for a builder whose previous result was prev: when every
// resource is prev's own, prev itself; when only the contents changed, a
// new Set that shares prev's sorted names. Most regenerations after a
// config change touch a few resources of one or two types, and sorting and
// hashing thousands of names for the others was a fifth of their cost.
// When it returns prev or such a set, known is true and changed lists,
// sorted, the names whose contents differ from prev's (diffNames).
//
// When names were added or removed, a few against prev's, the set is
// patched from prev (setPatched) and known is true as well.
func (b *builder) setFrom(prev *Set) (set *Set, changed []string, known bool) {
	if b.replay != nil {
		if b.prevSet == prev {
			b.skipRest()
		}
		if b.n == len(b.replay.ops) && b.prevSet == prev {
			b.log = b.followed()
			return b.replayed(prev)
		}
		b.diverge()
	}
	if prev == nil {
		return b.set(), nil, false
	}
	if len(prev.rs) != len(b.out) {
		return b.patched(prev)
	}
	// In prev's name order: changed comes out sorted.
	for i, n := range prev.Names {
		r, ok := b.out[n]
		if !ok {
			return b.patched(prev)
		}
		if pr := prev.rs[i]; pr != r && pr.Hash != r.Hash {
			changed = append(changed, n)
		}
	}
	if len(changed) == 0 {
		// Same content (maybe rebuilt objects): the previous set.
		return prev, nil, true
	}
	rs := inOrder(b.out, prev.Names)
	return newSetSorted(b.typeURL, rs, prev.Names, prev.replaced(rs, changed)), changed, true
}

// patched is setFrom's answer when names differ from prev's.
func (b *builder) patched(prev *Set) (*Set, []string, bool) {
	if set, changed := setPatched(b.typeURL, prev, b.out); set != nil {
		return set, changed, true
	}
	return b.set(), nil, false
}

// setPatched is the Set of rs derived from prev: prev's sorted names with
// those rs lacks dropped and its new ones merged in, and prev's sum
// updated for the names that differ, instead of sorting and hashing every
// name again (a service added to a class of 1,000 adds a few names to
// sets of thousands). changed lists, sorted, the names added, changed or
// removed. It returns nil when more than a quarter of the names come or
// go: building the set afresh costs no more then.
func setPatched(typeURL string, prev *Set, rs map[string]*Resource) (*Set, []string) {
	var added, changed, removed []string
	sum := prev.sum
	kept := 0
	for i, n := range prev.Names {
		r, ok := rs[n]
		pr := prev.rs[i]
		switch {
		case !ok:
			removed = append(removed, n)
			sum -= entryHash(n, pr)
			continue
		case pr != r && pr.Hash != r.Hash:
			changed = append(changed, n)
			sum += entryHash(n, r) - entryHash(n, pr)
		}
		kept++
	}
	addedN := len(rs) - kept
	if 4*(addedN+len(removed)) > len(rs) {
		return nil, nil
	}
	if addedN > 0 {
		added = make([]string, 0, addedN)
		for n, r := range rs {
			if _, ok := prev.find(n); !ok {
				added = append(added, n)
				sum += entryHash(n, r)
			}
		}
	}
	sort.Strings(added)
	names := make([]string, 0, len(rs))
	i, j := 0, 0
	for _, n := range prev.Names {
		if j < len(removed) && removed[j] == n {
			j++
			continue
		}
		for i < len(added) && added[i] < n {
			names = append(names, added[i])
			i++
		}
		names = append(names, n)
	}
	names = namesPool.of(append(names, added[i:]...))
	all := make([]string, 0, len(added)+len(removed)+len(changed))
	all = append(append(append(all, added...), changed...), removed...)
	sort.Strings(all)
	return newSetSorted(typeURL, inOrder(rs, names), names, sum), all
}
