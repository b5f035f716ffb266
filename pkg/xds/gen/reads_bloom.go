package gen

import (
	"hash/maphash"
	"slices"

	"github.com/meshplane/discovery/pkg/model"
)

// A unit's reads, summed up as a Bloom filter: two bits per thing read
// (an object, a kind, a kind in a namespace, a hostname, a selection
// asked of the scope by host). A generation lists what changed as the
// same tokens (changeBloom); a unit whose filter lacks a bit of each
// stands without its reads being walked. A token whose bits are all
// there proves nothing: Reads.stands decides then (one unit in 50 at M1
// after a VirtualService edit). Walking a thousand units' reads, scattered
// over the heap, for one VirtualService edit was a fifth of each class's
// regeneration.
//
// Sound because every way stands can fail puts a bit of the same token
// in both: changes.touches fails on a read key, kind, namespace or host
// the changes have (their tokens); a rule's list on a change of its kind
// (the kind's token: a superset); a scope read on an answer the new
// scope gives otherwise, and the answers a unit recorded are those of
// the previous scope, which it was built with or judged to stand against:
// the scope's maps are compared, and the hosts whose answer differs give
// the tokens (Scope.changedAnswers). Scope questions not answered from
// those maps, reads of everything (Reads.all) and unsealed reads make a
// unit always asked (readBloom.always).
type readBloom struct {
	bits [4]uint64
	// always makes the unit asked whatever changed.
	always bool
}

var bloomSeed = maphash.MakeSeed()

const (
	tokKey byte = iota + 1
	tokKind
	tokNS
	tokHost
	tokScope
)

func readToken(t byte, a, b, c string) uint64 {
	var h maphash.Hash
	h.SetSeed(bloomSeed)
	h.WriteByte(t)
	h.WriteString(a)
	h.WriteByte(0)
	h.WriteString(b)
	h.WriteByte(0)
	h.WriteString(c)
	return h.Sum64()
}

// add sets the token h's two bits.
func (b *readBloom) add(h uint64) {
	b.bits[(h>>6)&3] |= 1 << (h & 63)
	b.bits[(h>>14)&3] |= 1 << ((h >> 8) & 63)
}

// has reports whether the token h may have been added.
func (b *readBloom) has(h uint64) bool {
	return b.bits[(h>>6)&3]&(1<<(h&63)) != 0 && b.bits[(h>>14)&3]&(1<<((h>>8)&63)) != 0
}

// changeTokens are the tokens of what changed (changeBloom).
type changeTokens []uint64

// meets reports whether b may have one of the tokens ts.
func (b *readBloom) meets(ts changeTokens) bool {
	if b.always {
		return true
	}
	for _, h := range ts {
		if b.has(h) {
			return true
		}
	}
	return false
}

// addReads adds what r and its parts read.
func (b *readBloom) addReads(r *Reads) {
	r.walk(func(o *Reads) bool {
		if o.all || !o.sealed {
			b.always = true
			return true
		}
		for _, k := range o.keys {
			b.add(readToken(tokKey, string(k.Kind), k.Namespace, k.Name))
		}
		for _, k := range o.kinds {
			b.add(readToken(tokKind, string(k), "", ""))
		}
		for _, l := range o.lists {
			b.add(readToken(tokKind, string(l.kind), "", ""))
		}
		for _, kn := range o.inNS {
			b.add(readToken(tokNS, string(kn.kind), kn.ns, ""))
		}
		for _, h := range o.hosts {
			b.add(readToken(tokHost, h, "", ""))
		}
		for i := range o.scoped {
			switch sr := &o.scoped[i]; sr.q {
			case qVirtualServices, qDestinationRule, qAliases:
				b.add(readToken(tokScope, string(rune(sr.q)), sr.host, ""))
			case qProxyNamespace:
				// A class's namespace never changes: the answer holds
				// for every generation of the class the unit is judged
				// in (a unit taken from a sibling was judged to hold
				// when taken).
			default:
				b.always = true
				return true
			}
		}
		return false
	})
}

// summarize sets u's filter from its reads.
func (u *unit) summarize() {
	u.bloom = readBloom{}
	u.bloom.addReads(u.reads)
	u.bloom.addReads(u.clusterReads)
}

// changeBloom lists the tokens of cs, the changes since prev's World, and
// of the answers sc gives otherwise than prev, the scope the units to
// reuse were built or judged with.
func changeBloom(cs *changes, prev, sc *Scope) changeTokens {
	var ts changeTokens
	for _, k := range cs.keys {
		ts = append(ts, readToken(tokKey, string(k.Kind), k.Namespace, k.Name),
			readToken(tokKind, string(k.Kind), "", ""), readToken(tokNS, string(k.Kind), k.Namespace, ""))
	}
	cs.resolve()
	for _, h := range cs.hosts {
		ts = append(ts, readToken(tokHost, h, "", ""))
	}
	sc.changedAnswers(prev, func(q scopeQuestion, host string) {
		ts = append(ts, readToken(tokScope, string(rune(q)), host, ""))
	})
	slices.Sort(ts)
	return slices.Compact(ts)
}

// changedAnswers calls f with each question sc answers from its maps
// otherwise than prev does (Scope.answers).
func (sc *Scope) changedAnswers(prev *Scope, f func(scopeQuestion, string)) {
	diff(sc.vs, prev.vs, slices.Equal, func(h string) { f(qVirtualServices, h) })
	diff(sc.dr, prev.dr, func(a, b *model.Config) bool { return a == b }, func(h string) { f(qDestinationRule, h) })
	diff(sc.aliases, prev.aliases, slices.Equal, func(h string) { f(qAliases, h) })
}

// diff calls f with each key whose value differs between a and b (equal
// deciding), one missing counting as the zero value.
func diff[V any](a, b map[string]V, equal func(V, V) bool, f func(string)) {
	for k, v := range a {
		if !equal(v, b[k]) {
			f(k)
		}
	}
	var zero V
	for k, v := range b {
		if _, ok := a[k]; !ok && !equal(zero, v) {
			f(k)
		}
	}
}
