package server

import (
	"cmp"
	"runtime"
	"sync"
	"time"
	"weak"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// A stream's first response for a type, when it is sent every resource
// of its class's set: the set's resources written once, as the resources
// field of a delta response, and shared by every stream that is sent
// the whole set.
//
// At M1 (1,000 proxies in 50 namespace classes) every proxy's first
// clusters, endpoints and routes are the same 6,000 resources: the 50
// classes' sets are equal, and share their Versions (gen.versionsPool).
// Looking each one up by name and writing its name, version and type
// header for every proxy was a fifth of the server's CPU while 1,000
// proxies connected, and a megabyte of headers allocated per proxy
// (BENCHMARKS.md, "A stream's first response shares its class's
// encoding"). A variant's listeners (a view of its base's) differ per
// proxy and are still written one by one.

// wholeSet is a set's resources encoded as consecutive resources fields
// of a DeltaDiscoveryResponse: in name order (b), or group after group
// (parts; see groupWires).
type wholeSet struct {
	b     []byte
	parts [][]byte
	names []string // the set's: the observer's list
	size  int      // the resources' marshaled bytes, for the size metric
}

// wholeOf returns the encoding of s, a builder's set: made once for the
// sets of its Versions while streams are being sent it (gen.Memo). When
// groups gives the set's groups (gen.ClassConfig.Groups), it is composed
// of their encodings (groupWires); else written in one buffer.
func wholeOf(s *gen.Set, groups func() [][]*gen.Resource) *wholeSet {
	return gen.Memo(s.Versions(), func() *wholeSet {
		if groups != nil {
			if gs := groups(); gs != nil {
				return composeWhole(s, gs)
			}
		}
		return encodeWhole(s)
	})
}

// composedTypes are the types whose sets are composed of their groups'
// encodings. The routes of the namespaces' classes at M1 are 50 sets of
// 2,000 that differ by the routes of one or two namespaces' services (a
// service's short name is its own namespace's): encoded one by one, 1.1
// MB each, they were dropped by every collection that found no response
// being written with them and made again, 0.9 of 19 CPU s and 0.8 of 4.1
// GB allocated while 1,000 proxies connected. Composed, each unit's
// routes are encoded once for every class that took the unit. Clusters
// and endpoints are one set for all those classes: one buffer serves
// them all.
var composedTypes = map[string]bool{gen.RouteType: true}

func composeWhole(s *gen.Set, groups [][]*gen.Resource) *wholeSet {
	ws := &wholeSet{parts: make([][]byte, len(groups)), names: s.Names, size: s.Size()}
	for i, g := range groups {
		ws.parts[i] = groupEncodings.of(s.TypeURL, g)
	}
	return ws
}

// groupWires holds the encodings of groups of resources (the slices a
// class's builder was given: a unit's routes) while streams are being
// sent them. An entry is made for a slice's backing array, and dropped
// when the array is collected (runtime.AddCleanup); its encoding is
// dropped sooner, once no stream asked for it for groupWiresIdle. A
// group's slice never changes once given to a builder (gen's reuseAll).
//
// Held for the group's life, the encodings of M1's route groups were
// 8.5 MB of the heap through every change after the proxies had
// connected (a stream's first response is the only one that reads
// them), which the collector's goal doubled. Made again, a class's
// routes cost one encoding (1.1 MB, some milliseconds), once per
// idle period, however many proxies of the class connect in it.
type groupWires struct {
	mu       sync.Mutex
	m        map[groupKey]*groupWire
	idle     time.Duration // groupWiresIdle; shorter in tests
	sweeping bool          // a sweep is due (time.AfterFunc)
}

type groupKey struct {
	first weak.Pointer[*gen.Resource]
	n     int
}

// groupWire is a group's entry: its encoding, nil once dropped for
// disuse (the entry stays for its cleanup, registered once).
type groupWire struct {
	b    []byte
	used bool // asked for since the last sweep
}

// groupWiresIdle is how long a group's encoding stays unused before it is
// dropped: a sweep every period clears the encodings asked for in the
// last one, and drops the others, so an encoding goes between one and
// two periods after its last use.
const groupWiresIdle = 10 * time.Second

var groupEncodings = groupWires{m: map[groupKey]*groupWire{}, idle: groupWiresIdle}

// of returns the encoding of group rs of type typeURL, made once while
// rs lives and streams keep asking for it.
func (g *groupWires) of(typeURL string, rs []*gen.Resource) []byte {
	k := groupKey{weak.Make(&rs[0]), len(rs)}
	g.mu.Lock()
	if e := g.m[k]; e != nil && e.b != nil {
		e.used = true
		g.mu.Unlock()
		return e.b
	}
	g.mu.Unlock()
	n := 0
	for _, r := range rs {
		n += 32 + len(r.Name) + len(r.Hash) + len(typeURL) + r.Size()
	}
	bw := byteWriter{typeURL: typeURL, b: make([]byte, 0, n)}
	for _, r := range rs {
		bw.Resource(r.Name, r.Hash, "", r.Size())
		r.WriteWire(&bw)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.m[k]
	switch {
	case e == nil:
		e = &groupWire{}
		g.m[k] = e
		runtime.AddCleanup(&rs[0], g.forget, k)
	case e.b != nil:
		e.used = true
		return e.b
	}
	e.b, e.used = bw.b, true
	if !g.sweeping {
		g.sweeping = true
		time.AfterFunc(g.idle, g.sweep)
	}
	return bw.b
}

// sweep drops the encodings nobody asked for since the last sweep, and
// comes again while some are held.
func (g *groupWires) sweep() {
	g.mu.Lock()
	defer g.mu.Unlock()
	held := 0
	for _, e := range g.m {
		switch {
		case e.b == nil:
		case e.used:
			e.used = false
			held++
		default:
			e.b = nil
		}
	}
	g.sweeping = held > 0
	if g.sweeping {
		time.AfterFunc(g.idle, g.sweep)
	}
}

func (g *groupWires) forget(k groupKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, k)
}

// len is how many groups' encodings are held (for tests).
func (g *groupWires) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, e := range g.m {
		if e.b != nil {
			n++
		}
	}
	return n
}

// entries is how many groups have an entry, held or dropped (for tests).
func (g *groupWires) entries() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}

// encodeWhole writes s whole into one buffer.
func encodeWhole(s *gen.Set) *wholeSet {
	n := 0
	for _, r := range s.All() {
		n += 32 + len(r.Name) + len(r.Hash) + len(s.TypeURL) + r.Size()
	}
	bw := byteWriter{typeURL: s.TypeURL, b: make([]byte, 0, n)}
	s.WriteAll(&bw)
	return &wholeSet{b: bw.b, names: s.Names, size: s.Size()}
}

// byteWriter is a gen.SetWriter into one buffer.
type byteWriter struct {
	typeURL string
	b       []byte
}

func (w *byteWriter) Copy(b []byte)  { w.b = append(w.b, b...) }
func (w *byteWriter) Share(b []byte) { w.b = append(w.b, b...) }
func (w *byteWriter) Resource(name, version, suffix string, size int) {
	w.b = appendResourceHeader(w.b, w.typeURL, name, version, suffix, size)
}

// appendResourceHeader appends the start of a resources field: its tag
// and length, the discovery.Resource's version (version+suffix) and
// name, and the Any's header (of typeURL) up to its value's length, a
// value of size bytes. The value follows it.
func appendResourceHeader(b []byte, typeURL, name, version, suffix string, size int) []byte {
	anyLen := stringField(anyTypeURL, typeURL) + protowire.SizeTag(anyValue) + protowire.SizeBytes(size)
	vlen := len(version) + len(suffix)
	n := protowire.SizeTag(resourceAny) + protowire.SizeBytes(anyLen) + stringField(resourceNameField, name)
	if vlen > 0 {
		n += protowire.SizeTag(resourceVersionField) + protowire.SizeBytes(vlen)
	}
	b = protowire.AppendTag(b, deltaResources, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if vlen > 0 {
		b = protowire.AppendTag(b, resourceVersionField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(vlen))
		b = append(append(b, version...), suffix...)
	}
	b = appendString(b, resourceNameField, name)
	b = protowire.AppendTag(b, resourceAny, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anyLen))
	b = appendString(b, anyTypeURL, typeURL)
	b = protowire.AppendTag(b, anyValue, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(size))
}

// wholeOrDiff returns what respondDelta sends w's stream: for a
// stream's first response (nothing held, compared in full) its class's
// set whole with the proxy's own resources (send), when that is what it
// is sent (sent); else what deltaDiff finds name by name.
func (c *conn) wholeOrDiff(w *deltaWatch, dirty []string, returned map[string]string) (wh whole, sent bool, send []*gen.Resource, removed []string) {
	t := w.req.GetTypeUrl()
	if dirty == nil && !c.of(t).base.set() && len(returned) == 0 {
		if wh, sent = c.wholeFor(t, w.sub); sent {
			send = make([]*gen.Resource, 0, len(wh.own))
			for _, n := range wh.own {
				send = append(send, c.cfg.Own[t].Get(n))
			}
			return wh, true, send, nil
		}
	}
	send, removed = c.deltaDiff(w, dirty, returned)
	return whole{}, false, send, removed
}

// whole is what a fresh stream is sent of its class's set when it is
// sent all of it: the set's encoding, shared (set), or, for a view (a
// variant's listeners), the view, written for the stream from its
// base's plans (view); and own, the names of the proxy's own resources
// sent beside it.
type whole struct {
	set  *wholeSet
	view *gen.Set
	own  []string
}

// wholeFor returns what a fresh stream is sent of the class's set of
// type t when it is sent all of it; ok is false when the stream is to
// be sent something else, which deltaDiff then works out name by name.
//
// A wildcard stream is sent every resource; one that names resources
// is sent the whole set when its names are exactly the set's (the
// endpoints and routes its class's clusters and listeners reference).
// A name the proxy's own resources share with the class's is its own
// (ProxyConfig.Get): such a set is not sent whole.
func (c *conn) wholeFor(t string, sub *deltaSub) (wh whole, ok bool) {
	cls := c.cfg.Class.Sets[t]
	if cls.Len() == 0 {
		return wh, false
	}
	var own []string
	if s := c.cfg.Own[t]; s != nil {
		own = s.Names
	}
	for _, n := range own {
		if _, ok := cls.Hash(n); ok {
			return wh, false
		}
	}
	if !sub.wildcard {
		// Exactly the class's names: none of the proxy's own.
		own = nil
		if !sub.names.exactly(cls) {
			return wh, false
		}
	}
	wh.own = own
	if cls.IsView() {
		wh.view = cls
	} else {
		var groups func() [][]*gen.Resource
		if composedTypes[t] {
			class := c.cfg.Class
			groups = func() [][]*gen.Resource { return class.Groups(t) }
		}
		wh.set = wholeOf(cls, groups)
		c.s.recent.keep(wh.set)
	}
	return wh, true
}

// recentWholes holds the encodings last sent. An encoding is held
// weakly by its Versions (gen.Memo), and a collection that finds no
// response being written with it drops it: while 1,000 proxies
// connected at M1 the three sets' encodings were made again and again,
// 0.58 of 25 server CPU seconds in a profile. The last few are held
// here, their memory bounded by their count (one type's set each), and
// only while streams keep being sent them: an entry no stream was sent
// between two sweeps (groupWiresIdle apart) is let go. Held until other
// sets took their places, the last six of M1's connect (route sets
// composed of their groups' encodings) were 2.8-4.8 MB of the heap that
// every collection found live through all the changes that followed.
type recentWholes struct {
	mu       sync.Mutex
	ring     [6]*wholeSet
	used     [6]bool
	next     int
	sweeping bool
	idle     time.Duration // groupWiresIdle when zero; shorter in tests
}

func (r *recentWholes) keep(ws *wholeSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sweeping {
		r.sweeping = true
		time.AfterFunc(cmp.Or(r.idle, groupWiresIdle), r.sweep)
	}
	for i, w := range r.ring {
		if w == ws {
			r.used[i] = true
			return
		}
	}
	r.ring[r.next], r.used[r.next] = ws, true
	r.next = (r.next + 1) % len(r.ring)
}

// sweep lets go of the sets no stream was sent since the last sweep,
// and comes again while some are held.
func (r *recentWholes) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := false
	for i := range r.ring {
		if !r.used[i] {
			r.ring[i] = nil
		}
		held = held || r.ring[i] != nil
		r.used[i] = false
	}
	r.sweeping = held
	if held {
		time.AfterFunc(cmp.Or(r.idle, groupWiresIdle), r.sweep)
	}
}

// held is how many sets are held (for tests).
func (r *recentWholes) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.ring {
		if w != nil {
			n++
		}
	}
	return n
}

// exactly reports whether s holds the names of set and no others.
func (s *nameSet) exactly(set *gen.Set) bool {
	if len(s.plus) > 0 || len(s.minus) > 0 || s.shared == nil {
		return false
	}
	return s.shared.covers(set)
}

// coverMemo is what covers last found, for which Versions.
type coverMemo struct {
	v  weak.Pointer[gen.Versions]
	ok bool
}

// covers reports whether the names are exactly set's. The streams of a
// class share their names (namePool) and the classes' equal sets their
// Versions, so the answer is worked out once per pair and kept.
func (s *sharedNames) covers(set *gen.Set) bool {
	v := set.Versions()
	if m := s.cover.Load(); m != nil && m.v == weak.Make(v) {
		return m.ok
	}
	ok := len(s.m) == set.Len()
	for _, n := range set.Names {
		if !ok {
			break
		}
		_, ok = s.m[n]
	}
	s.cover.Store(&coverMemo{v: weak.Make(v), ok: ok})
	return ok
}
