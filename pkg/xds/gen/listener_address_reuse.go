package gen

import (
	"bytes"
	"hash/maphash"
	"slices"
)

// What the split of a port listener (listener_address.go) takes from the
// previous generation's split of the same port: after a service is added
// only its chain is new, so every other chain's reading and every other
// address listener stands.

// addrParts is what one address listener was built from.
type addrParts struct {
	res     *Resource
	chains  [][]byte
	withDef bool
}

// chainReading is what group read from a chain's match.
type chainReading struct {
	raw        []byte
	addrs      []string
	all, other bool
	// byPort says the chain matches by destination port.
	byPort bool
}

// sameFrame reports whether pl repeats in its address listeners what
// sp's did.
func (sp *addressSplit) sameFrame(pl *portListener) bool {
	return sp != nil && sp.port == pl.port && bytes.Equal(sp.def, pl.def) && slices.EqualFunc(sp.shared, pl.shared, bytes.Equal)
}

// chainSeed hashes the chains group has read.
var chainSeed = maphash.MakeSeed()

// servedSet is the served listener set of rs, patched from prev's when
// prev has one (a service added adds a listener or two to some 2,000),
// and the names changed since prev's (nil without prev).
func servedSet(prev *ClassConfig, rs map[string]*Resource) (*Set, []string) {
	if prev == nil {
		return NewSet(ListenerType, rs), nil
	}
	if old := prev.Sets[ListenerType]; old != nil {
		if ls, c := setPatched(ListenerType, old, rs); ls != nil {
			return ls, c
		}
	}
	ls := NewSet(ListenerType, rs)
	return ls, DiffNames(prev.Sets[ListenerType], ls)
}
