package gen

import (
	"hash/maphash"
	"slices"
	"sync"
)

// Logs are shared like sets. M1's 50 namespace classes put the same
// units' resources into their clusters and endpoints (class_sibling.go),
// and each kept its own log of them for the next generation: 2,000
// operations per type and class. A class's log is now the pooled one
// equal to it (logsPool), and a pooled log keeps its last edit
// (logMemo): the classes that follow it through the same insertions,
// skips or substitutions (a service added or removed) are given the log
// the first made (59 MB of what ten services added and removed
// allocated, and 22 MB more for substitutions alone).

// logsPool finds a log equal to a builder's among those in use, held
// weakly.
var logsPool = logsShare{weakPool[uint64, buildLog]{m: newWeakMap[uint64, buildLog](1024)}}

var logsSeed = maphash.MakeSeed()

type logsShare struct{ weakPool[uint64, buildLog] }

// of returns the pooled log equal to l, pooling a copy of l if there is
// none.
func (p *logsShare) of(l buildLog) *buildLog {
	var h maphash.Hash
	h.SetSeed(logsSeed)
	maphash.WriteComparable(&h, l.rewrites)
	for i := range l.ops {
		op := &l.ops[i]
		h.WriteString(op.del)
		maphash.WriteComparable(&h, len(op.rs))
		for _, r := range op.rs {
			maphash.WriteComparable(&h, r)
		}
	}
	k := h.Sum64()
	same := func(old *buildLog) bool {
		return old.rewrites == l.rewrites && slices.EqualFunc(old.ops, l.ops, sameOp)
	}
	if old := p.find(k, same); old != nil {
		return old
	}
	l.memo = &logMemo{}
	return p.keep(k, &l, same)
}

// pooledLog is b's log, pooled: the pooled log b followed when b did
// exactly what it logged (most of a class's logs after a VirtualService
// edit), else logsPool's.
func (b *builder) pooledLog() *buildLog {
	if r := b.replay; r != nil && r.memo != nil && r.rewrites == b.log.rewrites && len(r.ops) == len(b.log.ops) &&
		(len(r.ops) == 0 || &r.ops[0] == &b.log.ops[0]) {
		return r
	}
	return logsPool.of(b.log)
}

// sameOp reports whether a and b are the same operation: the same name
// taken out, the same slice put in (a unit's, which sibling classes
// share: class_sibling.go), or the same one resource. Equal resources in
// another slice are not the same operation: a log pooled by them would
// hold another generation's slices than its class's units, keep them
// alive, and give the class other groups (Groups) than its siblings.
func sameOp(a, b buildOp) bool {
	if a.del != b.del || len(a.rs) != len(b.rs) {
		return false
	}
	switch len(a.rs) {
	case 0:
		return true
	case 1:
		return a.rs[0] == b.rs[0]
	}
	return &a.rs[0] == &b.rs[0]
}

// logMemo is the last edit made of a log, and the log it made; and
// which of the log's operations put in each name of the set it built.
type logMemo struct {
	mu     sync.Mutex
	n      int
	ins    []insertion
	skips  []int
	subs   []int
	subOps []buildOp
	ops    []buildOp

	opSet *Set
	opAt  []int32
}

// opOf returns, for each name of set, the set l built, the index of the
// operation of l that put it in (-1 for none): what a builder that
// follows l asks to tell whether it holds a name (has) without filling
// its map. A port's listeners split by address are an operation each
// (sidecarOutbound), and a class that derives a port's listeners asks
// for each of the port's names; with the map filled instead, every
// namespace class at M1 made a map of its 2,000 listeners for each
// service added or removed, 5.4 of the 19 MB its regeneration allocated
// (BenchmarkClassesOfNamespacesAfterServiceChange). Made once per log
// and set: the namespace classes share both. m is nil for a log that is
// not pooled: made for the caller then.
func (m *logMemo) opOf(l *buildLog, set *Set) []int32 {
	if m != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.opSet == set {
			return m.opAt
		}
	}
	at := make([]int32, set.Len())
	for i := range at {
		at[i] = -1
	}
	for i, op := range l.ops {
		for _, r := range op.rs {
			if j, ok := set.find(r.Name); ok {
				at[j] = int32(i)
			}
		}
	}
	if m != nil {
		m.opSet, m.opAt = set, at
	}
	return at
}

// editOf returns the log of b, a builder that followed the log m is of
// through an edit: the one made of an equal edit last, if there was one.
// m is nil for a log that is not pooled.
func (m *logMemo) editOf(b *builder) []buildOp {
	if m == nil {
		return b.editedOps()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ops != nil && m.n == b.n && slices.Equal(m.skips, b.skips) && slices.Equal(m.subs, b.subs) &&
		slices.EqualFunc(m.subOps, b.subOps, sameOp) &&
		slices.EqualFunc(m.ins, b.ins, func(x, y insertion) bool { return x.at == y.at && sameOp(x.op, y.op) }) {
		return m.ops
	}
	m.n, m.ins, m.skips, m.subs, m.subOps = b.n, b.ins, b.skips, b.subs, b.subOps
	m.ops = b.editedOps()
	return m.ops
}
