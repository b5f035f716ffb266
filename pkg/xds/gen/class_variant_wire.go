package gen

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// A variant's listeners on the wire (class_variant.go): where a base
// listener's service tags are, and the listener with other values.

// retag rewrites the service tags of listeners' connection managers
// from one proxy's values to another's.
type retag struct {
	from, to map[string]string
	// toBytes is to's values, converted once.
	toBytes map[string][]byte
	// suffix ends the version of every listener rewritten to to
	// (version).
	suffix string
}

func newRetag(from, to map[string]string) retag {
	tb := make(map[string][]byte, len(to))
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(to)) {
		tb[k] = []byte(to[k])
		h.Write([]byte{0})
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(to[k]))
	}
	return retag{from: from, to: to, toBytes: tb, suffix: "." + hex.EncodeToString(h.Sum(nil)[:6])}
}

// dryRunMark is a tag generation puts beside the service tags and only
// then (tracingTags): its absence says a connection manager's tags are
// not Istio's, whatever their names.
const dryRunMark = "istio.authorization.dry_run.allow_policy.name"

var (
	fieldFilters      = fieldNum(&listenerv3.FilterChain{}, "filters")
	fieldTypedConfig  = fieldNum(&listenerv3.Filter{}, "typed_config")
	fieldAnyType      = fieldNum(&anypb.Any{}, "type_url")
	fieldAnyValue     = fieldNum(&anypb.Any{}, "value")
	fieldHCMTracing   = fieldNum(&hcmv3.HttpConnectionManager{}, "tracing")
	fieldCustomTags   = fieldNum(&hcmv3.HttpConnectionManager_Tracing{}, "custom_tags")
	fieldTagName      = fieldNum(&tracingv3.CustomTag{}, "tag")
	fieldTagLiteral   = fieldNum(&tracingv3.CustomTag{}, "literal")
	fieldLiteralValue = fieldNum(&tracingv3.CustomTag_Literal{}, "value")
	hcmTypeURL        = "type.googleapis.com/" + string(proto.MessageName(&hcmv3.HttpConnectionManager{}))
)

func fieldNum(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// A retag plan is where a marshaled listener's service tags are: the
// length-delimited fields on the way to each connection manager's
// tracing (chain, filter, Any, connection manager) and the tracing
// itself, one of a few distinct blobs (every connection manager of a
// listener built under one telemetry has the same tracing bytes), each
// with the places of its tags' values. It is found once per base
// listener (retagPlanOf); a variant's size is then a sum over it, and its
// bytes one copy of the base's with each tracing rewritten once and the
// lengths above it written anew, with no parsing.
type retagPlan struct {
	// from are the values the plan was found with.
	from  map[string]string
	spans []*span
	count int
	// blobs are the distinct tracings (children of nothing: their plans'
	// spans are the tags' values, at offsets within the blob).
	blobs []blob
	index map[string]int
	// seq numbers a tracing's plan (tracingPlan), which the key of a
	// listener's plan names (planPool).
	seq uint64
}

// planSeq numbers the tracings' plans.
var planSeq atomic.Uint64

type blob struct {
	b    []byte
	plan *retagPlan
}

// span is one length-delimited field of the marshaled message: its tag
// at hdr, its length at lenAt, its value at [start, end). A leaf is a
// tracing (blob is its index) or, in a blob's plan, a literal's value
// of the service tag named tag (blob is -1).
type span struct {
	hdr, lenAt, start, end int
	id, blob               int
	tag                    string
	children               []*span
}

// retagPlanOf returns r's plan for the representative's values from,
// found once and kept with r.
func retagPlanOf(r *Resource, from map[string]string) (*retagPlan, error) {
	if p := r.plan.Load(); p != nil && maps.Equal(p.from, from) {
		return p, nil
	}
	p := &retagPlan{from: from, index: map[string]int{}}
	spans, err := p.listener(r.Wire().GetValue())
	if err != nil {
		return nil, err
	}
	p.spans, p.index = spans, nil
	if len(spans) > 0 {
		// A plan without spans names no tracing, and so no values:
		// pooled, it would be found with other values than r's.
		p = plans.intern(p)
	}
	r.plan.Store(p)
	return p, nil
}

// plans shares the plans of listeners laid out alike. A plan is
// offsets and the tracings it rewrites, not bytes: listeners whose
// fields have the same lengths on the way to the same tracing have the
// same plan. At M1 per address the 50 namespace classes' 100,000
// address listeners each had a plan of its own, 61 MB (about 600 B
// each) of the 626 MB of heap after the changes, where the addresses
// and names of a few lengths make a few hundred layouts. Held weakly
// and swept as it grows, as the resource pool (resource.go).
var plans = planPool{m: newWeakMap[string, retagPlan](4096)}

type planPool struct {
	mu sync.Mutex
	m  weakMap[string, retagPlan]
}

// intern returns the plan in use laid out as p, pooling p if there is
// none. A pooled plan keeps copies of its tracings' bytes, not slices
// of the listener it was found in.
func (pp *planPool) intern(p *retagPlan) *retagPlan {
	k := p.key()
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if old := pp.m.get(string(k)); old != nil {
		return old
	}
	for i := range p.blobs {
		p.blobs[i].b = bytes.Clone(p.blobs[i].b)
	}
	pp.m.put(string(k), p)
	return p
}

// key identifies what p's walks read: its spans and the plans of its
// tracings, by number. A tracing's plan stands for its bytes and the
// values it was found with: tracingPlanOf finds one per both.
func (p *retagPlan) key() []byte {
	b := make([]byte, 0, 12*p.count+4*len(p.blobs)+8)
	var walk func(spans []*span)
	walk = func(spans []*span) {
		b = protowire.AppendVarint(b, uint64(len(spans)))
		for _, s := range spans {
			b = protowire.AppendVarint(b, uint64(s.hdr))
			b = protowire.AppendVarint(b, uint64(s.lenAt))
			b = protowire.AppendVarint(b, uint64(s.start))
			b = protowire.AppendVarint(b, uint64(s.end))
			b = protowire.AppendVarint(b, uint64(s.id))
			b = protowire.AppendVarint(b, uint64(s.blob+1))
			b = protowire.AppendString(b, s.tag)
			walk(s.children)
		}
	}
	walk(p.spans)
	for _, bl := range p.blobs {
		b = protowire.AppendVarint(b, bl.plan.seq)
	}
	return b
}

// fields returns the spans of m's length-delimited fields (m starting
// at off) for which fn returns one; fn fills in what is under the field,
// fields where it is.
func (p *retagPlan) fields(m []byte, off int, fn func(protowire.Number, []byte, int) (*span, error)) ([]*span, error) {
	var out []*span
	for i := 0; i < len(m); {
		num, typ, n := protowire.ConsumeTag(m[i:])
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		size := protowire.ConsumeFieldValue(num, typ, m[i+n:])
		if size < 0 {
			return nil, protowire.ParseError(size)
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(m[i+n:])
			start := off + i + n + size - len(v)
			sp, err := fn(num, v, start)
			if err != nil {
				return nil, err
			}
			if sp != nil {
				sp.hdr, sp.lenAt, sp.start, sp.end, sp.id = off+i, off+i+n, start, start+len(v), p.count
				p.count++
				out = append(out, sp)
			}
		}
		i += n + size
	}
	return out, nil
}

// under makes a span of the spans fn finds inside a field, if any.
func under(v []byte, off int, fn func([]byte, int) ([]*span, error)) (*span, error) {
	s, err := fn(v, off)
	if err != nil || len(s) == 0 {
		return nil, err
	}
	return &span{blob: -1, children: s}, nil
}

func (p *retagPlan) listener(b []byte) ([]*span, error) {
	return p.fields(b, 0, func(n protowire.Number, v []byte, off int) (*span, error) {
		if n != fieldChains && n != fieldDefaultChain {
			return nil, nil
		}
		return under(v, off, p.chain)
	})
}

func (p *retagPlan) chain(c []byte, off int) ([]*span, error) {
	return p.fields(c, off, func(n protowire.Number, v []byte, off int) (*span, error) {
		if n != fieldFilters {
			return nil, nil
		}
		return under(v, off, func(f []byte, off int) ([]*span, error) {
			return p.fields(f, off, func(n protowire.Number, v []byte, off int) (*span, error) {
				if n != fieldTypedConfig {
					return nil, nil
				}
				return under(v, off, p.typedConfig)
			})
		})
	})
}

// typedConfig finds the spans of a filter's Any if it holds a connection
// manager.
func (p *retagPlan) typedConfig(a []byte, off int) ([]*span, error) {
	var typeURL string
	if err := eachField(a, func(n protowire.Number, v []byte) error {
		if n == fieldAnyType {
			typeURL = string(v)
		}
		return nil
	}); err != nil || typeURL != hcmTypeURL {
		return nil, err
	}
	return p.fields(a, off, func(n protowire.Number, v []byte, off int) (*span, error) {
		if n != fieldAnyValue {
			return nil, nil
		}
		return under(v, off, func(h []byte, off int) ([]*span, error) {
			return p.fields(h, off, func(n protowire.Number, v []byte, _ int) (*span, error) {
				if n != fieldHCMTracing {
					return nil, nil
				}
				return p.tracing(v)
			})
		})
	})
}

// tracing returns the leaf of a connection manager's tracing, if it has
// service tags (istioTags).
func (p *retagPlan) tracing(tr []byte) (*span, error) {
	if i, ok := p.index[string(tr)]; ok {
		return &span{blob: i}, nil
	}
	sub, err := tracingPlanOf(tr, p.from, p.tracingPlan)
	if sub == nil || err != nil {
		return nil, err
	}
	p.index[string(tr)] = len(p.blobs)
	p.blobs = append(p.blobs, blob{b: tr, plan: sub})
	return &span{blob: len(p.blobs) - 1}, nil
}

// tracingPlans are the plans of the tracings seen, by their bytes and the
// representative's values: a base's listeners share a few tracings
// (every connection manager built under one telemetry has the same), and
// a plan per listener was most of the plans' memory (100 MB at M1 per
// address). Bounded: emptied when it grows past tracingPlansMax, as
// after many telemetry changes.
var tracingPlans = struct {
	sync.Mutex
	m map[string]tracingPlanned
}{m: map[string]tracingPlanned{}}

const tracingPlansMax = 4096

type tracingPlanned struct {
	sub *retagPlan
	err error
}

// tracingPlanOf returns build's plan of tr for the values from, found once.
func tracingPlanOf(tr []byte, from map[string]string, build func([]byte) (*retagPlan, error)) (*retagPlan, error) {
	var key strings.Builder
	key.Write(tr)
	for _, k := range slices.Sorted(maps.Keys(from)) {
		key.WriteByte(0)
		key.WriteString(k)
		key.WriteByte(0)
		key.WriteString(from[k])
	}
	k := key.String()
	tracingPlans.Lock()
	got, ok := tracingPlans.m[k]
	tracingPlans.Unlock()
	if ok {
		return got.sub, got.err
	}
	sub, err := build(tr)
	tracingPlans.Lock()
	if len(tracingPlans.m) >= tracingPlansMax {
		clear(tracingPlans.m)
	}
	tracingPlans.m[k] = tracingPlanned{sub: sub, err: err}
	tracingPlans.Unlock()
	return sub, err
}

// tracingPlan is the plan of a tracing's service tags' values, nil when
// it has none (istioTags).
func (p *retagPlan) tracingPlan(tr []byte) (*retagPlan, error) {
	if ok, err := p.istioTags(tr); !ok || err != nil {
		return nil, err
	}
	sub := &retagPlan{from: p.from, seq: planSeq.Add(1)}
	spans, err := sub.fields(tr, 0, func(n protowire.Number, v []byte, off int) (*span, error) {
		if n != fieldCustomTags {
			return nil, nil
		}
		name, _, _, _ := customTag(v)
		if _, ok := p.from[name]; !ok {
			return nil, nil
		}
		return under(v, off, func(t []byte, off int) ([]*span, error) {
			return sub.fields(t, off, func(n protowire.Number, v []byte, off int) (*span, error) {
				if n != fieldTagLiteral {
					return nil, nil
				}
				return under(v, off, func(l []byte, off int) ([]*span, error) {
					return sub.fields(l, off, func(n protowire.Number, _ []byte, _ int) (*span, error) {
						if n != fieldLiteralValue {
							return nil, nil
						}
						return &span{blob: -1, tag: name}, nil
					})
				})
			})
		})
	})
	if err != nil {
		return nil, err
	}
	sub.spans = spans
	return sub, nil
}

// istioTags reports whether a tracing has Istio's service tags, each
// there once, a literal of the representative's value, beside the
// dry-run tags; errNotVariant when it has them otherwise. Without the
// dry-run tags it has none: a custom tag of a service tag's name is then
// the user's, the same for every proxy.
func (p *retagPlan) istioTags(tr []byte) (bool, error) {
	seen := map[string]int{}
	marked, mismatch := false, false
	err := eachField(tr, func(n protowire.Number, v []byte) error {
		if n != fieldCustomTags {
			return nil
		}
		name, lit, isLit, err := customTag(v)
		if err != nil {
			return err
		}
		if name == dryRunMark {
			marked = true
		}
		if want, ok := p.from[name]; ok {
			seen[name]++
			if !isLit || lit != want {
				mismatch = true
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return false, err
	case !marked:
		return false, nil
	case mismatch:
		return false, errNotVariant
	}
	for name := range p.from {
		if seen[name] != 1 {
			return false, errNotVariant
		}
	}
	return true, nil
}

// customTag reads a marshaled CustomTag's name and, if it is a literal,
// its value.
func customTag(b []byte) (name, literal string, isLiteral bool, err error) {
	err = eachField(b, func(n protowire.Number, v []byte) error {
		switch n {
		case fieldTagName:
			name = string(v)
		case fieldTagLiteral:
			isLiteral = true
			return eachField(v, func(n protowire.Number, v []byte) error {
				if n == fieldLiteralValue {
					literal = string(v)
				}
				return nil
			})
		}
		return nil
	})
	return name, literal, isLiteral, err
}

// eachField calls fn with each length-delimited field of the marshaled
// message m.
func eachField(m []byte, fn func(protowire.Number, []byte) error) error {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return protowire.ParseError(n)
		}
		size := protowire.ConsumeFieldValue(num, typ, m[n:])
		if size < 0 {
			return protowire.ParseError(size)
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(m[n:])
			if err := fn(num, v); err != nil {
				return err
			}
		}
		m = m[n+size:]
	}
	return nil
}

// version is the version of base's listener rewritten: base's version
// and a hash of the values written (48 bits: variants of one base and
// version differ in it), not a hash of the bytes (hashing every
// rewritten listener would read 4 MB per workload and change at M1).
// A variant's set keeps no version of its own for such listeners
// (retagView.versions). Equal listeners made from different bases or values get
// different versions: at worst a proxy is sent again what it has.
func (t retag) version(base *Resource) string {
	return base.Hash + t.suffix
}
