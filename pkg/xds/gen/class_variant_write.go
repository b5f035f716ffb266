package gen

import (
	"encoding/binary"

	"google.golang.org/protobuf/encoding/protowire"
)

// A variant's listener written from its plan (class_variant_wire.go):
// the base listener's bytes between the spans, the new lengths, the
// rewritten tracings and values; made whole (apply), in parts
// (write), or only counted (shape).

// sizes returns, by span id, each span's value size with t's values;
// blobs are the blobs rewritten.
func (p *retagPlan) sizes(t retag, blobs [][]byte) []int {
	return p.sizesInto(nil, t, blobs)
}

// sizesInto is sizes, in out's array when it is large enough.
func (p *retagPlan) sizesInto(out []int, t retag, blobs [][]byte) []int {
	if cap(out) < p.count {
		out = make([]int, p.count)
	}
	out = out[:p.count]
	var size func(s *span) int
	size = func(s *span) int {
		n := s.end - s.start
		switch {
		case s.blob >= 0:
			n = len(blobs[s.blob])
		case s.children == nil:
			n = len(t.toBytes[s.tag])
		}
		for _, c := range s.children {
			cn := size(c)
			n += (c.lenAt - c.hdr) + protowire.SizeVarint(uint64(cn)) + cn - (c.end - c.hdr)
		}
		out[s.id] = n
		return n
	}
	for _, s := range p.spans {
		size(s)
	}
	return out
}

// size is the size of the message b with t's values, its blobs
// rewritten as blobs.
func (p *retagPlan) size(b []byte, t retag, blobs [][]byte) int {
	return p.sized(b, p.sizes(t, blobs))
}

func (p *retagPlan) sized(b []byte, sz []int) int {
	n := len(b)
	for _, s := range p.spans {
		n += (s.lenAt - s.hdr) + protowire.SizeVarint(uint64(sz[s.id])) + sz[s.id] - (s.end - s.hdr)
	}
	return n
}

// apply is the message b with t's values, its blobs rewritten as blobs.
func (p *retagPlan) apply(b []byte, t retag, blobs [][]byte) []byte {
	sz := p.sizes(t, blobs)
	out := &appender{b: make([]byte, 0, p.sized(b, sz))}
	p.write(out, b, t, blobs, sz)
	return out.b
}

// write writes base listener b with t's values and blobs to w, in parts:
// b's own bytes between the spans, the new lengths, the rewritten
// tracings and values. sz is p.sizes(t, blobs).
func (p *retagPlan) write(w WireWriter, b []byte, t retag, blobs [][]byte, sz []int) {
	pw := &planWriter{w: w, t: &t}
	pw.write(p, b, blobs, sz)
}

// write writes base listener b by plan p, as retagPlan.write does, with
// pw's writer and values.
func (pw *planWriter) write(p *retagPlan, b []byte, blobs [][]byte, sz []int) {
	pw.b, pw.blobs, pw.sz = b, blobs, sz
	pw.emit(p.spans, 0, len(b))
}

// planWriter is what retagPlan.write writes with, passed down its spans;
// one writes a view's listeners one after the other (retagView.writeAll):
// a recursive closure per listener was two heap allocations per listener
// written, four million while 1,000 proxies connected at M1.
type planWriter struct {
	w      WireWriter
	b      []byte
	t      *retag
	blobs  [][]byte
	sz     []int
	varint [binary.MaxVarintLen64]byte
}

func (pw *planWriter) emit(spans []*span, start, end int) {
	pos := start
	for _, s := range spans {
		if pos < s.lenAt {
			// A span's length follows its parent's at once, or its
			// sibling's value (a third of the parts at M1).
			pw.w.Share(pw.b[pos:s.lenAt])
		}
		pw.w.Copy(protowire.AppendVarint(pw.varint[:0], uint64(pw.sz[s.id])))
		switch {
		case s.blob >= 0:
			pw.w.Share(pw.blobs[s.blob])
		case s.children == nil:
			pw.w.Share(pw.t.toBytes[s.tag])
		default:
			pw.emit(s.children, s.start, s.end)
		}
		pos = s.end
	}
	if pos < end {
		pw.w.Share(pw.b[pos:end])
	}
}

// shape counts, without writing or sizing anything, what write would
// write: the bytes of the parts shorter than small, with 5 for each new
// length (lengths here are under 2^35), and the parts as long or longer.
func (p *retagPlan) shape(b []byte, t *retagTable, small int) (copied, shared int) {
	part := func(n int) {
		if n < small {
			copied += n
		} else {
			shared++
		}
	}
	var walk func(spans []*span, start, end int)
	walk = func(spans []*span, start, end int) {
		pos := start
		for _, s := range spans {
			part(s.lenAt - pos)
			copied += 5
			switch {
			case s.blob >= 0:
				part(len(t.blobs[p.blobs[s.blob].plan]))
			case s.children == nil:
				part(len(t.rt.toBytes[s.tag]))
			default:
				walk(s.children, s.start, s.end)
			}
			pos = s.end
		}
		part(end - pos)
	}
	walk(p.spans, 0, len(b))
	return copied, shared
}

// appender is a WireWriter that copies every part into b.
type appender struct{ b []byte }

func (a *appender) Copy(b []byte)  { a.b = append(a.b, b...) }
func (a *appender) Share(b []byte) { a.b = append(a.b, b...) }
