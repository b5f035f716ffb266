package gen

import "slices"

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
