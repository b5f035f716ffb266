package gen

import (
	"slices"
	"weak"

	"github.com/meshplane/discovery/pkg/model"
)

// changes are the objects that differ between two Worlds, as recorded
// reads are asked about them: by the planner (Reads.Touches, one change
// at a time) and by reuse (Reads.stands, every change since the reused
// configuration's World). Both ask the same question of the same reads.
type changes struct {
	old, cur *model.World
	keys     []model.Key
	// except is a key of keys that these changes leave out, when
	// excepting is set (changes.without): has, hasKind, hasIn and the
	// resolved objects pass it over.
	except    model.Key
	excepting bool
	mesh      bool
	// mask has the kindBit of every changed kind (Reads.skips).
	mask uint64
	// unknown is set when what changed is not known (the change log no
	// longer reaches back): every read is touched.
	unknown bool
	// set, kinds and inNS index keys when there are many; kinds and inNS
	// count them.
	set   map[model.Key]bool
	kinds map[model.Kind]int32
	inNS  map[kindNS]int32

	*resolution
}

// resolution is the changed objects in old ([0]) and cur ([1]), and the
// hostnames of the changed services, found on first need; changes that
// differ by a key no object stands for share it.
type resolution struct {
	resolved bool
	hosts    []string
	hostSet  map[string]bool // hosts, when there are many
	svcs     [2][]*model.Service
	cfgs     [2][]*model.Config
	views    [2]*view
}

// indexAbove is the number of keys from which lookups use maps.
const indexAbove = 8

// changesOf is the set of changes keys that made cur out of old.
func changesOf(old, cur *model.World, keys []model.Key) *changes {
	cs := &changes{old: old, cur: cur, keys: keys, resolution: &resolution{}}
	cs.mesh = slices.Contains(keys, model.MeshKey)
	for _, k := range keys {
		cs.mask |= kindBit(k.Kind)
	}
	if len(keys) > indexAbove {
		cs.set = make(map[model.Key]bool, len(keys))
		cs.kinds = map[model.Kind]int32{}
		cs.inNS = map[kindNS]int32{}
		for _, k := range keys {
			cs.set[k] = true
			cs.kinds[k.Kind]++
			cs.inNS[kindNS{k.Kind, k.Namespace}]++
		}
	}
	return cs
}

// changesSince is every change that made cur out of old's World, as the
// World's change log knows it; when it does not, every read counts as
// touched.
func changesSince(old *view, cur *model.World) *changes {
	keys, ok := cur.ChangesSince(old.w)
	cs := changesOf(old.w, cur, keys)
	if cs.unknown = !ok; cs.unknown {
		cs.mask = ^uint64(0)
	}
	return cs
}

// without is cs leaving k out: what changed but k. It shares cs's
// indexes, and its resolved objects when k stands for none (an
// endpoints key), so that asking whether a unit stands but for its own
// endpoints (ClassConfig.standsAfterEndpoints) allocates one struct, not
// a copy of every key and its indexes.
func (cs *changes) without(k model.Key) *changes {
	if cs.unknown || !cs.has(k) {
		return cs
	}
	if cs.excepting {
		rest := make([]model.Key, 0, len(cs.keys))
		for _, o := range cs.keys {
			if o != k && o != cs.except {
				rest = append(rest, o)
			}
		}
		return changesOf(cs.old, cs.cur, rest)
	}
	o := *cs
	o.except, o.excepting = k, true
	o.mesh = cs.mesh && k != model.MeshKey
	if standsForObject(cs.old, k) || standsForObject(cs.cur, k) {
		o.resolution = &resolution{}
	}
	return &o
}

// standsForObject reports whether k names an object resolve finds in w.
func standsForObject(w *model.World, k model.Key) bool {
	if w == nil {
		return false
	}
	if k.Kind == model.KindService {
		return w.Service(k.Namespace, k.Name) != nil
	}
	return w.Config(k.Kind, k.Namespace, k.Name) != nil
}

// left reports whether k is one of the keys cs has (its except is not).
func (cs *changes) left(k model.Key) bool {
	return !cs.excepting || k != cs.except
}

func (cs *changes) has(k model.Key) bool {
	if !cs.left(k) {
		return false
	}
	if cs.set != nil {
		return cs.set[k]
	}
	return slices.Contains(cs.keys, k)
}

func (cs *changes) hasKind(kind model.Kind) bool {
	if cs.kinds != nil {
		n := cs.kinds[kind]
		if cs.excepting && cs.except.Kind == kind {
			n--
		}
		return n > 0
	}
	for _, k := range cs.keys {
		if k.Kind == kind && cs.left(k) {
			return true
		}
	}
	return false
}

func (cs *changes) hasIn(kn kindNS) bool {
	if cs.inNS != nil {
		n := cs.inNS[kn]
		if cs.excepting && cs.except.Kind == kn.kind && cs.except.Namespace == kn.ns {
			n--
		}
		return n > 0
	}
	for _, k := range cs.keys {
		if k.Kind == kn.kind && k.Namespace == kn.ns && cs.left(k) {
			return true
		}
	}
	return false
}

// resolve finds the changed objects in both Worlds.
func (cs *changes) resolve() {
	if cs.resolved {
		return
	}
	cs.resolved = true
	for i, w := range []*model.World{cs.old, cs.cur} {
		if w == nil {
			continue
		}
		cs.views[i] = newView(w, nil)
		for _, k := range cs.keys {
			if !cs.left(k) {
				continue
			}
			if k.Kind == model.KindService {
				if s := w.Service(k.Namespace, k.Name); s != nil {
					cs.svcs[i] = append(cs.svcs[i], s)
					cs.hosts = append(cs.hosts, s.Hostname)
				}
			} else if c := w.Config(k.Kind, k.Namespace, k.Name); c != nil {
				cs.cfgs[i] = append(cs.cfgs[i], c)
			}
		}
	}
	if len(cs.hosts) > indexAbove {
		cs.hostSet = make(map[string]bool, len(cs.hosts))
		for _, h := range cs.hosts {
			cs.hostSet[h] = true
		}
	}
}

// touches reports whether the changes can alter what was generated from
// o's own reads (not its parts'): a change of an object o read, of a kind
// it read whole or in the namespace, of a service whose hostname it
// looked up, or of an object a rule it listed by chooses before or after.
func (cs *changes) touches(o *Reads) bool {
	if o.all || cs.unknown {
		return true
	}
	if o.mesh && cs.mesh {
		return true
	}
	for _, k := range o.keys {
		if cs.has(k) {
			return true
		}
	}
	for _, k := range o.kinds {
		if cs.hasKind(k) {
			return true
		}
	}
	for _, kn := range o.inNS {
		if cs.hasIn(kn) {
			return true
		}
	}
	if len(o.hosts) == 0 && len(o.lists) == 0 {
		return false
	}
	cs.resolve()
	for _, h := range o.hosts {
		if cs.hostSet != nil && cs.hostSet[h] || cs.hostSet == nil && slices.Contains(cs.hosts, h) {
			return true
		}
	}
	for _, l := range o.lists {
		for i := range cs.views {
			if l.kind == model.KindService {
				for _, s := range cs.svcs[i] {
					if l.service(cs.views[i], s) {
						return true
					}
				}
				continue
			}
			if l.config == nil {
				continue
			}
			for _, c := range cs.cfgs[i] {
				if c.Key.Kind == l.kind && l.config(cs.views[i], c) {
					return true
				}
			}
		}
	}
	return false
}

// standsBetween reports whether what was generated from r in at's World
// stands in w's: no change between the two, either way round, touches r.
// Shared parts of the configuration (class_parts.go) are asked by
// classes generating in older and newer Worlds alike.
func standsBetween(r *Reads, at, w *view) bool {
	if at.w == w.w {
		return true
	}
	var cs *changes
	if at.w.Version <= w.w.Version {
		cs = changesSince(at, w.w)
	} else {
		cs = changesSince(w, at.w)
	}
	return !r.touchedBy(cs)
}

// worldRef is the World a shared part was built in, without keeping it
// alive. A part judges whether it stands in a newer World from the
// changes since its own (standsBetween), which needs that World; held
// strongly, every part whose service last changed in a different World
// kept that World's copies of the Store's maps: under endpoint changes
// to one service after another, one World per service, a thousand at
// M1's size (BenchmarkEndpointChurn). The Worlds classes are generated
// in are held by the classes' configurations and the Store; a part whose
// World nothing else holds any more is built again once, in the World
// that asks for it, and shared from then on.
type worldRef struct {
	w       weak.Pointer[model.World]
	version uint64
}

func refOf(v *view) worldRef {
	return worldRef{w: weak.Make(v.w), version: v.w.Version}
}

// standsIn reports whether what was generated from r in the World of
// ref stands in w's; false when that World is gone.
func (ref worldRef) standsIn(r *Reads, w *view) bool {
	switch at := ref.w.Value(); at {
	case w.w:
		return true
	case nil:
		return false
	default:
		return standsBetween(r, newView(at, nil), w)
	}
}

// unchangedSince reports whether the object of k is the same in w as in
// its Store's World of version v; false when w's change log cannot tell.
func unchangedSince(w *model.World, k model.Key, v uint64) bool {
	changed, known := w.ChangedSince(k, v)
	return known && !changed
}
