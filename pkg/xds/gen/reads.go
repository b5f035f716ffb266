package gen

import (
	"slices"
	"sync"

	"github.com/meshplane/discovery/pkg/model"
)

// Reads is what one generated configuration read of its World: the
// objects it looked up by name (found or not, so that creating one is a
// change to it), the service hostnames it looked up, the kinds it read in
// one namespace, and the sets it listed with the rule that chose their
// members. Generation records it as it reads (view); the planner asks
// Touches whether a change can alter the configuration, and pushes
// nobody else (istiod's DependentConfigs, in this project's shape: the
// dependencies are not declared beside the code that reads, they are what
// it read).
//
// Recording appends to short slices (a unit reads a handful of objects,
// often the same one several times); a class's Reads is a tree of its
// units' (shared with the previous generation where a unit is reused),
// which Touches scans.
//
// A Reads is written by one generation and only read after.
type Reads struct {
	mesh  bool
	keys  []model.Key
	hosts []string
	inNS  []kindNS
	kinds []model.Kind
	// used are the Istio configs generation took (looked up, or chosen by
	// a rule): provenance, the configs a rejected resource came from.
	used []*model.Config
	// lists are reads of the members of a kind chosen by a rule: a change
	// of an object of that kind touches the reads when the rule chooses
	// it, before or after the change.
	lists []listRead
	// scoped are the selections taken from the class's scope, with their
	// answers (reads_scope.go): reuse asks them again of the new scope.
	scoped []scopeRead
	// sealed is set when generation is done: rules the planner calls
	// afterwards read through the generation's views, and record nothing.
	sealed bool
	// mask has the bits (kindBit) of every kind r and its parts read, and
	// scopedBit if they read the scope: a walk skips a part whose mask
	// cannot meet what it looks for. Set by seal; zero (unknown) before.
	mask uint64
	// all is set for a configuration whose generation failed part way:
	// what it read is not known, so every change touches it.
	all bool
	// parts are the reads of the units this one is made of (a reused
	// unit's are shared, not copied).
	parts []*Reads
}

// readsAll touches every change (Reads.all).
var readsAll = &Reads{all: true, sealed: true}

type kindNS struct {
	kind model.Kind
	ns   string
}

// listRead is a read of the configs (or, for KindService, the services)
// of kind that match chose. A rule is called with an unrecorded view of
// the World that holds the object.
type listRead struct {
	kind    model.Kind
	config  func(*view, *model.Config) bool
	service func(*view, *model.Service) bool
}

func newReads() *Reads { return &Reads{} }

// seal ends r's recording and sets its mask. Its parts are sealed
// first (a part is sealed before it is added, or with r).
func (r *Reads) seal() {
	if r == nil || r.sealed {
		return
	}
	r.sealed = true
	m := uint64(0)
	if r.all {
		m = ^uint64(0)
	}
	if r.mesh {
		m |= kindBit(model.KindMeshConfig)
	}
	if len(r.hosts) > 0 {
		m |= kindBit(model.KindService)
	}
	if len(r.scoped) > 0 {
		m |= scopedBit
	}
	for _, k := range r.keys {
		m |= kindBit(k.Kind)
	}
	for _, k := range r.kinds {
		m |= kindBit(k)
	}
	for _, k := range r.inNS {
		m |= kindBit(k.kind)
	}
	for _, l := range r.lists {
		m |= kindBit(l.kind)
	}
	for _, p := range r.parts {
		p.seal()
		if p.mask == 0 {
			m = ^uint64(0) // a part without a mask: unknown
		}
		m |= p.mask
	}
	if m == 0 {
		m = emptyBit // read nothing: known, and meets nothing
	}
	r.mask = m
}

// Bits of Reads.mask: one per kind (kindBit), and two of their own.
const (
	scopedBit = uint64(1) << 63
	emptyBit  = uint64(1) << 62
	otherBit  = uint64(1) << 61 // the kinds past the first 61
)

var kindBits = struct {
	sync.Mutex
	m map[model.Kind]uint64
}{m: map[model.Kind]uint64{}}

// kindBit is kind's bit in a mask; the kinds seen after the first 61
// share otherBit.
func kindBit(kind model.Kind) uint64 {
	kindBits.Lock()
	defer kindBits.Unlock()
	b, ok := kindBits.m[kind]
	if !ok {
		b = otherBit
		if n := len(kindBits.m); n < 61 {
			b = uint64(1) << n
		}
		kindBits.m[kind] = b
	}
	return b
}

// skips reports whether nothing r and its parts read can meet want (bits
// of a mask): then a walk need not look into r.
func (r *Reads) skips(want uint64) bool {
	return r.mask != 0 && r.mask&want == 0
}

func (r *Reads) recording() bool { return r != nil && !r.sealed }

// appendNew appends v unless one of the last few elements is v already.
func appendNew[T comparable](l []T, v T) []T {
	for i := len(l) - 1; i >= 0 && i >= len(l)-4; i-- {
		if l[i] == v {
			return l
		}
	}
	return append(l, v)
}

func (r *Reads) key(k model.Key) {
	if !r.recording() {
		return
	}
	if k == model.MeshKey {
		r.mesh = true
		return
	}
	r.keys = appendNew(r.keys, k)
}

func (r *Reads) host(h string) {
	if r.recording() {
		r.hosts = appendNew(r.hosts, h)
	}
}

func (r *Reads) namespace(kind model.Kind, ns string) {
	if r.recording() {
		r.inNS = appendNew(r.inNS, kindNS{kind, ns})
	}
}

func (r *Reads) kind(kind model.Kind) {
	if r.recording() {
		r.kinds = appendNew(r.kinds, kind)
	}
}

func (r *Reads) use(c *model.Config) {
	if r.recording() && c != nil {
		r.used = appendNew(r.used, c)
	}
}

// usedConfigs are the configs r and its parts took, each once, in the
// order taken. It walks the parts every time: provenance is asked for
// rejected resources only, and during generation (a refusal), before r
// is sealed.
func (r *Reads) usedConfigs() []*model.Config {
	var out []*model.Config
	r.walk(func(o *Reads) bool {
		for _, c := range o.used {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
		return false
	})
	return out
}

func (r *Reads) list(l listRead) {
	if r.recording() {
		r.lists = append(r.lists, l)
	}
}

// add records everything o read as read by r too: a unit reused from a
// previous generation brings its reads along. o is shared, not copied: a
// VirtualService edit rebuilds a few units of a thousand, and copying the
// others' reads into the class's cost more than the edit itself.
func (r *Reads) add(o *Reads) {
	if r.recording() && o != nil && o != r {
		r.parts = append(r.parts, o)
	}
}

// walk calls f on r and its parts, depth first, until f returns true;
// it reports whether f did.
func (r *Reads) walk(f func(*Reads) bool) bool {
	if r == nil {
		return false
	}
	if f(r) {
		return true
	}
	for _, p := range r.parts {
		if p.walk(f) {
			return true
		}
	}
	return false
}

// Touches reports whether a change of k, which made cur out of old (the
// World the reads were made in, or one where every change since was
// judged not to touch them), can alter what was generated from the reads.
// It scans the recorded reads (a class's are a few thousand, in a tree of
// units); the planner asks once per class and change (push.Changes).
func (r *Reads) Touches(k model.Key, old, cur *model.World) bool {
	if r == nil {
		return false
	}
	return r.touchedBy(changesOf(old, cur, []model.Key{k}))
}

// touchedBy reports whether a change of cs touches r or one of its parts;
// parts whose kinds cs does not change are not looked into.
func (r *Reads) touchedBy(cs *changes) bool {
	if r == nil || r.skips(cs.mask) {
		return false
	}
	if cs.touches(r) {
		return true
	}
	for _, p := range r.parts {
		if p.touchedBy(cs) {
			return true
		}
	}
	return false
}

// stands reports whether what was generated from r may be reused in
// sc's generation: no change of cs touches r, and every selection r
// took from its class's scope is what sc answers (scopeRead). It is
// the planner's rule (Touches) applied to a unit: reuse and push
// targeting are one truth.
func (r *Reads) stands(sc *Scope, cs *changes) bool {
	if r == nil {
		return true
	}
	if r.skips(cs.mask | scopedBit) {
		return true
	}
	if cs.touches(r) || !r.scopeHolds(sc) {
		return false
	}
	for _, p := range r.parts {
		if !p.stands(sc, cs) {
			return false
		}
	}
	return true
}

// Kinds lists the kinds r read in any way, for the debug endpoints and
// tests.
func (r *Reads) Kinds() map[model.Kind]bool {
	out := map[model.Kind]bool{}
	r.walk(func(o *Reads) bool {
		if o.mesh {
			out[model.KindMeshConfig] = true
		}
		for _, k := range o.keys {
			out[k.Kind] = true
		}
		if len(o.hosts) > 0 {
			out[model.KindService] = true
		}
		for _, k := range o.inNS {
			out[k.kind] = true
		}
		for _, k := range o.kinds {
			out[k] = true
		}
		for _, l := range o.lists {
			out[l.kind] = true
		}
		return false
	})
	return out
}

// Len is the number of recorded reads, with repeats, for tests and
// memory accounting.
func (r *Reads) Len() int {
	n := 0
	r.walk(func(o *Reads) bool {
		n += len(o.keys) + len(o.hosts) + len(o.inNS) + len(o.kinds) + len(o.lists) + len(o.scoped)
		return false
	})
	return n
}
