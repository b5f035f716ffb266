package gen

import (
	"slices"
	"sync/atomic"
)

// A proxy's push compares only what its class changed since the class
// configuration the proxy last had (push.ChangedSince). That is Changed
// when the new configuration was derived from the proxy's own, but with
// a thousand proxies in the push queue a class often moves on by two or
// three steps before the last of them is served (a Service and then its
// endpoints, edits a second apart): without the steps between, every such
// proxy compared all its resources, 8,000 names at M1, which was most of
// the server's time after a service was added. A configuration keeps what
// its last few ancestors changed, names only.

// keptAncestors is how many ancestors a configuration keeps:
// ChangesSince sees one step further, its own.
const keptAncestors = 8

// ancestor is what one configuration a ClassConfig descends from changed
// since its own base.
type ancestor struct {
	id, base uint64
	changed  map[string][]string
}

// derive makes cc a successor of prev: cc.Base is prev's ID and cc keeps
// prev among its ancestors. cc.ID must be set.
func (cc *ClassConfig) derive(prev *ClassConfig) {
	cc.Base = prev.ID
	from := max(0, len(prev.ancestors)-(keptAncestors-1))
	anc := make([]ancestor, 0, len(prev.ancestors[from:])+1)
	anc = append(anc, prev.ancestors[from:]...)
	cc.ancestors = append(anc, ancestor{id: prev.ID, base: prev.Base, changed: prev.Changed})
}

// ChangesSince returns, per type URL, the names whose resources differ
// between prev and c (added, changed or removed), when c descends from
// prev within keptAncestors+1 steps; false when it cannot tell. IDs are
// the generator's: prev must come from c's.
func (c *ClassConfig) ChangesSince(prev *ClassConfig) (map[string][]string, bool) {
	switch {
	case c == nil || prev == nil:
		return nil, false
	case c.Class != prev.Class:
		// A variant shares its base's history (class_variant.go), and
		// differs from it all the same.
		return nil, false
	case c.ID == prev.ID:
		return map[string][]string{}, true
	case c.Base == 0:
		return nil, false
	case c.Base == prev.ID:
		return c.Changed, true
	}
	steps := []map[string][]string{c.Changed}
	base := c.Base
	for i := len(c.ancestors) - 1; i >= 0 && base != prev.ID; i-- {
		a := c.ancestors[i]
		if a.id != base || a.base == 0 {
			return nil, false
		}
		steps = append(steps, a.changed)
		base = a.base
	}
	if base != prev.ID {
		return nil, false
	}
	out := map[string][]string{}
	for _, t := range TypeURLs {
		var names []string
		for _, s := range steps {
			names = append(names, s[t]...)
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		out[t] = slices.Compact(names)
	}
	return out, true
}

// DiffNames lists the names added, changed or removed from a to b (either
// may be nil).
func DiffNames(a, b *Set) []string {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		return slices.Clone(b.Names)
	case b == nil:
		return slices.Clone(a.Names)
	}
	return diffNames(a, b)
}

// A configuration's logs are what the next generation of its class
// follows (builder.go), and nothing else reads them but Groups, for a
// fresh stream's whole sets. Yet a configuration lives as long as a
// proxy still holds it: while a service change's pushes went on at M1,
// each of the 50 namespace classes' last three or four configurations
// were alive and their route logs with them, 40 KB each, 6.2 of the 124
// MB a collection found live mid-changes (edited, in
// test/load/results/f03d442/heap-midchanges-n.txt). A configuration
// replaced by a later generation of its class lets go of its logs
// (Retire).

// classLogs are a configuration's logs by type URL, until it is retired.
// A copy of a configuration that keeps its logs (UpdateEndpoints, a
// recovered generation) has a holder of its own.
type classLogs struct {
	m atomic.Pointer[map[string]*buildLog]
}

func newClassLogs(m map[string]*buildLog) *classLogs {
	l := &classLogs{}
	l.m.Store(&m)
	return l
}

// of returns the log of type t, nil when there is none or the logs were
// let go.
func (l *classLogs) of(t string) *buildLog {
	if l == nil {
		return nil
	}
	if m := l.m.Load(); m != nil {
		return (*m)[t]
	}
	return nil
}

// all returns the logs, nil when they were let go.
func (l *classLogs) all() map[string]*buildLog {
	if l == nil {
		return nil
	}
	if m := l.m.Load(); m != nil {
		return *m
	}
	return nil
}

// Retire lets go of c's logs: a later configuration of its class
// replaced it, and it will not be a generation's previous configuration
// again. Should it be all the same, that generation builds its sets
// without following a log: the same sets, more slowly. Proxies still
// served c are served it as before; a fresh stream given c is sent its
// sets whole without Groups.
func (c *ClassConfig) Retire() {
	if c != nil && c.logs != nil {
		c.logs.m.Store(nil)
	}
}
