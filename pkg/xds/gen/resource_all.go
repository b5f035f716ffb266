package gen

import (
	"encoding/binary"
	"maps"
	"slices"
)

// A set written whole, one resource after another (Set.WriteAll): a
// delta stream's first response for a type (pkg/xds/server) sends every
// resource of its class's set.

// SetWriter receives a set's resources in order.
type SetWriter interface {
	WireWriter
	// Resource begins the resource named name, of version
	// version+suffix and of size bytes: its bytes follow, in parts.
	Resource(name, version, suffix string, size int)
}

// planned is a base listener and its plan (nil: it has no service tags).
type planned struct {
	r    *Resource
	plan *retagPlan
}

// WriteAll writes every resource of s to w, in name order, each as
// Get, Hash and WriteWire give it. A view's listeners are written from
// their plans with the view's values, and no resource is made for them:
// a variant at M1 has 2,000 listeners per address, and making a lazy
// resource for each (its version, its size, a lookup by name) to write
// it once was a tenth of the server's CPU while proxies connected. A
// large listener (bigListener) is still made once per view, and shared.
func (s *Set) WriteAll(w SetWriter) {
	switch {
	case s == nil:
	case s.view != nil:
		s.view.writeAll(w)
	default:
		for _, r := range s.rs {
			w.Resource(r.Name, r.Hash, "", r.Size())
			r.WriteWire(w)
		}
	}
}

func (v *retagView) writeAll(w SetWriter) {
	rt := v.tab.rt
	var sz []int
	var blobs [][]byte
	pw := &planWriter{w: w, t: rt}
	for _, e := range v.info.ordered {
		r := e.r
		switch {
		case e.plan == nil:
			w.Resource(r.Name, r.Hash, "", r.Size())
			r.WriteWire(w)
		case r.Size() >= bigListener:
			m := v.get(r.Name)
			w.Resource(m.Name, m.Hash, "", m.Size())
			m.WriteWire(w)
		default:
			blobs = v.tab.into(blobs[:0], e.plan)
			sz = e.plan.sizesInto(sz[:0], *rt, blobs)
			b := r.Wire().GetValue()
			w.Resource(r.Name, r.Hash, rt.suffix, e.plan.sized(b, sz))
			pw.write(e.plan, b, blobs, sz)
		}
	}
}

// Size is the marshaled size of the set's resources, summed: a view's
// once, and kept.
func (s *Set) Size() int {
	switch {
	case s == nil:
		return 0
	case s.view != nil:
		return s.view.shapeOf(wholeSmall).size
	}
	n := 0
	for _, r := range s.rs {
		n += r.Size()
	}
	return n
}

// WholeShape bounds what WriteAll writes of a view, as
// Resource.WireShape does for one resource: the bytes in parts shorter
// than small (copied) and the parts as long or longer (shared), the
// resources' headers not counted; and heads, the bytes of the names and
// versions (with their suffixes) WriteAll gives SetWriter.Resource.
// Counted once per view for one small; zeros for a set that is not a
// view.
func (s *Set) WholeShape(small int) (copied, shared, heads int) {
	if s == nil || s.view == nil {
		return 0, 0, 0
	}
	sh := s.view.shapeOf(small)
	return sh.copied, sh.shared, sh.heads
}

// wholeSmall is the part size WholeShape is asked with (the server's
// codec's): Size counts the shape for it, so that one walk serves both.
const wholeSmall = 256

// shapeOf returns the view's shape for small: that of a view of the
// same listeners with values as long, or counted on first use.
func (v *retagView) shapeOf(small int) *viewShape {
	if sh := v.shape.Load(); sh != nil && sh.small == small {
		return sh
	}
	key := v.shapeKey(small)
	if sh, ok := v.info.shapes.Load(key); ok {
		v.shape.Store(sh.(*viewShape))
		return sh.(*viewShape)
	}
	sh := v.countShape(small)
	v.info.shapes.Store(key, sh)
	v.shape.Store(sh)
	return sh
}

// shapeKey is what a view's shape depends on besides its base's
// listeners: small, and the lengths of the values its listeners are
// written with (its tracings', its service tags', its version suffix).
func (v *retagView) shapeKey(small int) string {
	rt := v.tab.rt
	k := binary.AppendUvarint(nil, uint64(small))
	k = binary.AppendUvarint(k, uint64(len(rt.suffix)))
	for _, tag := range slices.Sorted(maps.Keys(rt.toBytes)) {
		k = append(binary.AppendUvarint(k, uint64(len(tag))), tag...)
		k = binary.AppendUvarint(k, uint64(len(rt.toBytes[tag])))
	}
	for _, b := range v.info.blobs {
		k = binary.AppendUvarint(k, uint64(len(v.tab.blobs[b.plan])))
	}
	return string(k)
}

// countShape counts the view's shape for small, listener by listener.
func (v *retagView) countShape(small int) *viewShape {
	rt := v.tab.rt
	var sz []int
	var blobs [][]byte
	sh := &viewShape{small: small}
	for _, e := range v.info.ordered {
		r := e.r
		var copied, shared int
		sh.heads += len(r.Name) + len(r.Hash)
		switch {
		case e.plan == nil:
			sh.size += r.Size()
			copied, shared = r.WireShape(small)
		case r.Size() >= bigListener:
			m := v.get(r.Name)
			sh.size += m.Size()
			sh.heads += len(m.Hash) - len(r.Hash)
			copied, shared = 0, 1
		default:
			sh.heads += len(rt.suffix)
			blobs = v.tab.into(blobs[:0], e.plan)
			sz = e.plan.sizesInto(sz[:0], *rt, blobs)
			b := r.Wire().GetValue()
			sh.size += e.plan.sized(b, sz)
			copied, shared = e.plan.shape(b, v.tab, small)
		}
		sh.copied += copied
		sh.shared += shared
	}
	return sh
}

// Groups returns the class's set of typeURL as the slices of resources
// its builder was given, in the order it was given them, when those are
// the set exactly: each resource of the set in one slice, and no other;
// nil when they are not (a set patched by EnvoyFilters or WasmPlugins, a
// name put in twice or taken out, endpoints updated since the class was
// generated, a view). A unit's slice is the same slice in every class
// that took the unit (class_sibling.go), so a caller may encode each
// slice once and compose the classes' sets from them (pkg/xds/server).
// It checks each resource against the set: call it once per set.
func (c *ClassConfig) Groups(typeURL string) [][]*Resource {
	set := c.Sets[typeURL]
	if c.variant != nil {
		// A variant keeps no log: its sets but the listeners are its
		// base's.
		if b := c.variant.base; b != nil && b.Sets[typeURL] == set {
			return b.Groups(typeURL)
		}
		return nil
	}
	log := c.logs.of(typeURL)
	if set == nil || set.view != nil || log == nil || log.rewrites || set != c.baseSet(typeURL) {
		return nil
	}
	out := make([][]*Resource, 0, len(log.ops))
	n := 0
	for _, op := range log.ops {
		if op.del != "" {
			return nil
		}
		for _, r := range op.rs {
			if h, ok := set.Hash(r.Name); !ok || h != r.Hash {
				return nil
			}
		}
		if len(op.rs) > 0 {
			out = append(out, op.rs)
			n += len(op.rs)
		}
	}
	// No name was put in twice (rewrites): the slices hold n distinct
	// names, each of the set's.
	if n != set.Len() {
		return nil
	}
	return out
}
