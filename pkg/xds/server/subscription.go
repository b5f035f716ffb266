package server

import (
	"hash/maphash"
	"iter"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// What a delta stream subscribes to, per type. go-control-plane's delta
// server kept a map of every subscribed name per stream and type: about
// 4,000 names per proxy at M1 (the routes and endpoints of 2,000 service
// ports), 184 MB of the connect heap at 1,000 proxies, the largest single
// holder (test/load/results/ead7992/m1-connect-heap-ead7992.txt). Proxies
// of a class subscribe to the same names, so here a stream's names are a
// set shared through a pool (sharedNames, by content) plus the few names
// it added or dropped since (nameSet.plus, nameSet.minus).

// wildcardName is the name that subscribes to (or, unsubscribed, leaves)
// every resource of a type.
const wildcardName = "*"

// deltaSub is one delta stream's subscription to one type, with the same
// meaning as go-control-plane's stream.Subscription (whose rules
// deltastream_test.go holds it to): the wildcard state, Envoy's legacy
// wildcard (an empty first request subscribes to everything until a name
// is given), the names asked for, and the versions the stream holds
// (returned; see delta.go for how it overrides the stream's base).
// It is changed only with the conn's mu held.
type deltaSub struct {
	wildcard bool
	legacy   bool
	names    nameSet
	returned map[string]string
}

// newDeltaSub starts a type's subscription from its first request.
func newDeltaSub(pool *namePool, req *discovery.DeltaDiscoveryRequest, legacyAllowed bool) *deltaSub {
	sub := req.GetResourceNamesSubscribe()
	s := &deltaSub{
		wildcard: len(sub) == 0 && legacyAllowed,
		legacy:   legacyAllowed,
		// The versions a resumed stream says it holds; a copy, as the map
		// is written in place (delta.go).
		returned: maps.Clone(req.GetInitialResourceVersions()),
	}
	if s.returned == nil {
		s.returned = map[string]string{}
	}
	s.update(pool, sub, req.GetResourceNamesUnsubscribe())
	return s
}

// update applies a request's subscribed and unsubscribed names, by the
// rules of the xDS protocol as go-control-plane applies them.
func (s *deltaSub) update(pool *namePool, sub, unsub []string) {
	if s.legacy {
		// Only a request that names something (the wildcard included)
		// ends the legacy wildcard; unsubscribing does not.
		if len(sub) == 0 {
			return
		}
		s.legacy = false
	}
	if s.names.adopt(pool, sub) {
		sub = nil
	}
	for _, n := range sub {
		if n == wildcardName {
			s.wildcard = true
			continue
		}
		s.names.add(n)
	}
	for _, n := range unsub {
		if n == wildcardName {
			s.wildcard = false
			continue
		}
		if s.wildcard && s.names.has(n) {
			// Still held through the wildcard: the protocol wants the
			// resource sent again (or its removal), so the stream is
			// taken to hold no version of it.
			s.returned[n] = ""
		} else {
			delete(s.returned, n)
		}
		s.names.remove(n)
	}
	s.names.settle(pool)
}

// nameSet is a set of names: a shared set, less minus, plus plus. plus
// and minus stay small; settle folds them into a shared set once they are
// not.
type nameSet struct {
	shared      *sharedNames // nil: empty
	plus, minus map[string]struct{}
}

func (s *nameSet) has(n string) bool {
	if _, ok := s.plus[n]; ok {
		return true
	}
	if !s.shared.has(n) {
		return false
	}
	_, gone := s.minus[n]
	return !gone
}

func (s *nameSet) len() int {
	return s.shared.len() - len(s.minus) + len(s.plus)
}

// all yields every name once, in no order.
func (s *nameSet) all() iter.Seq[string] {
	return func(yield func(string) bool) {
		if s.shared != nil {
			for n := range s.shared.m {
				if _, gone := s.minus[n]; !gone && !yield(n) {
					return
				}
			}
		}
		for n := range s.plus {
			if !yield(n) {
				return
			}
		}
	}
}

// adopt makes the empty set s the pool's shared set of names, when the
// pool holds one with exactly those names (the wildcard not among them),
// and reports whether it did. A proxy's first request for routes or
// endpoints names thousands of them, as every proxy of its class does:
// adding them one by one built a map per stream and type only for settle
// to find the set the pool held already (413 MB allocated and 0.8 CPU s
// while 1,000 proxies connected at M1).
func (s *nameSet) adopt(pool *namePool, names []string) bool {
	if s.shared != nil || len(s.plus)+len(s.minus) > 0 || len(names) <= foldAbove {
		return false
	}
	cand := pool.find(names)
	if cand == nil {
		return false
	}
	s.shared = cand
	return true
}

func (s *nameSet) add(n string) {
	if s.shared.has(n) {
		delete(s.minus, n)
		return
	}
	if s.plus == nil {
		s.plus = map[string]struct{}{}
	}
	s.plus[n] = struct{}{}
}

func (s *nameSet) remove(n string) {
	if !s.shared.has(n) {
		delete(s.plus, n)
		return
	}
	if s.minus == nil {
		s.minus = map[string]struct{}{}
	}
	s.minus[n] = struct{}{}
}

// foldAbove is how many names plus and minus hold, beyond a sixteenth
// of the set, before settle folds them into a shared set. A service added
// adds a name or two per type to each proxy: thirty-odd services pass
// before a proxy's set is rebuilt, and proxies that made the same changes
// find the rebuilt set in the pool.
const foldAbove = 32

// settle folds plus and minus into a shared set once they outgrow
// foldAbove.
func (s *nameSet) settle(pool *namePool) {
	changed := len(s.plus) + len(s.minus)
	if changed <= foldAbove+s.len()/16 {
		return
	}
	s.shared = pool.fold(s)
	s.plus, s.minus = nil, nil
}

// sharedNames is an immutable set of names that any number of streams
// refer to. hash is the sum of its names' hashes under the pool's seed,
// so a set's hash follows from another's and the names that differ.
type sharedNames struct {
	// m numbers the names 0 to len-1 (find tells a list of names that
	// repeats one from the set's); names lists them in that order, and
	// is what a request that names exactly them is given
	// (codec_request_shared.go). Neither is written after the set is made.
	m     map[string]int32
	names []string
	hash  uint64
	// cover is what covers last found (delta_whole.go).
	cover atomic.Pointer[coverMemo]
}

func (s *sharedNames) has(n string) bool {
	if s == nil {
		return false
	}
	_, ok := s.m[n]
	return ok
}

func (s *sharedNames) len() int {
	if s == nil {
		return 0
	}
	return len(s.m)
}

// namePool finds shared name sets by content. It refers to them weakly: a
// set no stream uses any more is collected, and its entry with it.
type namePool struct {
	seed maphash.Seed
	mu   sync.Mutex
	sets map[uint64]weak.Pointer[sharedNames]
	// lists finds a set by the address of its names' array: a request
	// given a set's names (matchShared) is adopted without hashing them
	// again. A live set keeps its array, so an address found with a
	// live set is that set's.
	lists map[*string]weak.Pointer[sharedNames]
}

func newNamePool() *namePool {
	return &namePool{seed: maphash.MakeSeed(), sets: map[uint64]weak.Pointer[sharedNames]{}, lists: map[*string]weak.Pointer[sharedNames]{}}
}

func (p *namePool) hashOf(n string) uint64 { return maphash.String(p.seed, n) }

// fold returns the shared set of s's names: one the pool holds when it
// has the same names, else a new one it then holds. The hash finds the
// candidate in time proportional to plus and minus; the names are then
// compared, so two sets whose hashes collide are never confused.
func (p *namePool) fold(s *nameSet) *sharedNames {
	var h uint64
	if s.shared != nil {
		h = s.shared.hash
	}
	for n := range s.plus {
		h += p.hashOf(n)
	}
	for n := range s.minus {
		h -= p.hashOf(n)
	}
	p.mu.Lock()
	cand := p.sets[h].Value()
	p.mu.Unlock()
	if cand != nil && sameNames(cand, s) {
		return cand
	}
	m, names := make(map[string]int32, s.len()), make([]string, 0, s.len())
	for n := range s.all() {
		m[n] = int32(len(m))
		names = append(names, n)
	}
	out := &sharedNames{m: m, names: names, hash: h}
	w := weak.Make(out)
	p.mu.Lock()
	p.sets[h] = w
	var first *string
	if len(names) > 0 {
		first = &names[0]
		p.lists[first] = w
	}
	p.mu.Unlock()
	runtime.AddCleanup(out, p.forget, setKeys{h, first})
	return out
}

// setKeys are a set's entries in the pool.
type setKeys struct {
	hash  uint64
	first *string
}

// find returns the shared set of exactly names, if the pool holds one;
// names holding the wildcard or a name twice have none. The hash finds
// the candidate; the names are then checked one by one against it, each
// a name of the set not seen before.
func (p *namePool) find(names []string) *sharedNames {
	if cand := p.listed(names); cand != nil {
		return cand
	}
	var h uint64
	for _, n := range names {
		h += p.hashOf(n)
	}
	p.mu.Lock()
	cand := p.sets[h].Value()
	p.mu.Unlock()
	if cand == nil || len(cand.m) != len(names) {
		return nil
	}
	seen := make([]uint64, (len(names)+63)/64)
	for _, n := range names {
		i, ok := cand.m[n]
		if !ok || seen[i/64]&(1<<(i%64)) != 0 {
			return nil
		}
		seen[i/64] |= 1 << (i % 64)
	}
	// len(names) distinct names of the set, which has as many.
	return cand
}

// listed returns the set whose list of names names is, if any.
func (p *namePool) listed(names []string) *sharedNames {
	if len(names) == 0 {
		return nil
	}
	p.mu.Lock()
	cand := p.lists[&names[0]].Value()
	p.mu.Unlock()
	if cand == nil || len(cand.names) != len(names) {
		return nil
	}
	return cand
}

// forget drops the entries of a collected set, unless a live set has
// taken their place.
func (p *namePool) forget(k setKeys) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.sets[k.hash]; ok && w.Value() == nil {
		delete(p.sets, k.hash)
	}
	if w, ok := p.lists[k.first]; ok && k.first != nil && w.Value() == nil {
		delete(p.lists, k.first)
	}
}

// size is how many sets the pool refers to (for tests and /debug).
func (p *namePool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sets)
}

// sameNames reports whether cand holds exactly s's names.
func sameNames(cand *sharedNames, s *nameSet) bool {
	if cand.len() != s.len() {
		return false
	}
	// cand holds as many names as s: it is s if it holds each of s's.
	for n := range s.all() {
		if !cand.has(n) {
			return false
		}
	}
	return true
}
