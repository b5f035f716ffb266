package server

import (
	"fmt"
	"slices"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Codec returns the gRPC codec for the xDS server: gRPC's proto codec,
// except that xDS responses are written without copying their resources.
//
// Every resource is marshalled once per class (gen.Resource) and shared by
// the class's proxies. gRPC's proto codec would copy all of them into one
// new buffer per response: at 1,000 proxies connecting that was a fifth of
// the server's CPU and, while slow readers held their responses, a
// gigabyte of send buffers (BENCHMARKS.md). This codec encodes the
// response's envelope and each resource's few header bytes, and hands gRPC
// the resources' own bytes as further buffers of the same message. The
// bytes on the wire are a valid encoding of the same message (a repeated
// field's elements may follow the envelope's other fields: protobuf parsers
// accept fields in any order).
//
// Use it with grpc.ForceServerCodecV2. A delta request's resource names
// are views of one block, or of the request's own copy
// (unmarshalDeltaRequest), or, for a subscription to exactly a set of
// names the stream's pool holds, that set's list (matchShared); every
// other message goes through gRPC's proto codec unchanged.
func Codec() encoding.CodecV2 {
	return xdsCodec{fallback: encoding.GetCodecV2(grpcproto.Name)}
}

type xdsCodec struct{ fallback encoding.CodecV2 }

func (xdsCodec) Name() string { return grpcproto.Name }

func (c xdsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *deltaRequestBytes:
		if len(data) > 1 {
			// Kept as received, for decodeDelta to match against the
			// stream's shared names first (matchShared).
			data.Ref()
			m.data = slices.Clone(data)
			return nil
		}
		m.buf, m.own = oneBuffer(data)
		return nil
	case *discovery.DeltaDiscoveryRequest:
		buf, own := oneBuffer(data)
		defer buf.Free()
		return unmarshalDeltaRequest(buf.ReadOnlyData(), m, own)
	}
	return c.fallback.Unmarshal(data, v)
}

// oneBuffer returns a request's bytes in one buffer: its only one (gRPC's
// read buffer, referenced), else a copy that is not pooled, which is the
// request's own (own): its names are views of it rather than copied again
// (unmarshalDeltaRequest). Requests in several buffers are mostly a new
// stream's subscriptions to its routes and endpoints (2,000 names each at
// M1) and its first, with the node; a subscription to exactly a set the
// pool holds is not copied at all (matchShared, tried first by
// decodeDelta), so what is copied here is the rest. Copied into buffers
// of gRPC's pool and freed after decoding, they left the pool holding 2
// MB that the collections at the end of M1's connect found live (a
// sync.Pool keeps what it is given through the next collection). Copied
// into memory of their own (before matchShared), M1's connect allocated
// 105 MB more, and the peak RSS was lower: 280-297 MiB in ten runs with
// an 8 MiB response budget, 284-304 in five without the copy
// (BENCHMARKS.md, "Write buffers held across a push").
func oneBuffer(data mem.BufferSlice) (buf mem.Buffer, own bool) {
	if len(data) == 1 {
		data[0].Ref()
		return data[0], false
	}
	return mem.SliceBuffer(data.Materialize()), true
}

// deltaRequestBytes receives a delta request undecoded: its bytes, in
// gRPC's buffers that the receiver frees (decodeDelta): buf when they are
// one, data when several. Under another codec (a server that did not
// force this one) it is the request it embeds, which that codec decodes
// as usual.
type deltaRequestBytes struct {
	*discovery.DeltaDiscoveryRequest
	buf  mem.Buffer
	own  bool // buf is the request's own copy (oneBuffer)
	data mem.BufferSlice
}

func (c xdsCodec) Marshal(v any) (mem.BufferSlice, error) {
	var w sliceWriter
	var err error
	switch m := v.(type) {
	case *discovery.DiscoveryResponse:
		err = w.sotw(m)
	case *discovery.DeltaDiscoveryResponse:
		w.budget = responseBudget.Load()
		err = w.delta(m, nil, nil, nil)
	case *deltaWire:
		w.budget = responseBudget.Load()
		err = w.delta(m.resp, m.whole, m.view, m.send)
	default:
		return c.fallback.Marshal(v)
	}
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return w.done(), nil
}

// inlineBelow is the size under which a resource's bytes are copied into
// the header buffer rather than referenced: a buffer per tiny resource
// costs more than the copy.
const inlineBelow = 256

// resourceHeader bounds the bytes of a resources field's header
// (appendResourceHeader) beyond its type URL, name and version: six tags
// and six lengths, those of the message, the Any and the value under
// 2^21 (three bytes each), those of the strings under 2^14 (two). Longer
// ones grow the buffer. A view written
// whole (gen.Set.WriteAll) sizes its buffer by it and the exact names and
// versions: it reserved 160 bytes per listener for them, twice what they
// are at M1 (a quarter of a megabyte per proxy's listeners).
const resourceHeader = 21

// sliceWriter builds a message as header bytes interleaved with shared
// resource bytes.
type sliceWriter struct {
	out mem.BufferSlice
	buf []byte
	// parts backs out's buffers: a pointer into it makes a mem.Buffer
	// without an allocation per resource. Sized before use, never grown
	// in place (a lazy resource's parts may start a new one).
	parts []part
	// m, when set, is the pooled memory buf, parts and out came from
	// (codec_pool.go).
	m *pooledMessage
	// budget, when set, is what a pooled message takes its memory from
	// (codec_budget.go): a delta response's. A state-of-the-world
	// response's resources are made before it is marshalled (its
	// listeners with their own values, a few MB per proxy at M1), and
	// waiting for the budget held them longer than it bounded: peak RSS
	// 5.8-6.3 against 5.0-5.1 GB at M1 with --sotw.
	budget *sendBudget
	// reserved is how many buffers start sized the lists for.
	reserved int
	// typeURL is the response's, for Resource.
	typeURL string
}

// start sizes the writer for a message of n header bytes, beginning with
// head, and of buffers buffers; a large one's memory comes from the pool.
func (w *sliceWriter) start(head []byte, n, buffers int) {
	w.reserved = buffers
	if w.m = getMessage(n, buffers, w.budget); w.m != nil {
		w.buf = append(w.m.buf[:0], head...)
		w.parts, w.out = w.m.parts[:0], w.m.out[:0]
		return
	}
	w.buf = append(make([]byte, 0, n), head...)
	w.parts = make([]part, 0, buffers)
	w.out = make(mem.BufferSlice, 0, buffers)
}

// buffersFor is how many buffers a message takes that shares separate
// parts (a resource's bytes: the header bytes before each are a buffer
// of their own) and adjacent ones (a composed set's groups: one buffer
// each), and ends with header bytes.
func buffersFor(separate, adjacent int) int { return 2*separate + adjacent + 2 }

func (w *sliceWriter) push(b []byte) {
	w.parts = append(w.parts, part{SliceBuffer: b, m: w.m})
	w.out = append(w.out, &w.parts[len(w.parts)-1])
}

// share appends b to the message without copying it.
func (w *sliceWriter) share(b []byte) {
	if len(b) < inlineBelow {
		w.buf = append(w.buf, b...)
		return
	}
	if len(w.buf) > 0 {
		// The rest of the header buffer's capacity goes on being used.
		w.push(w.buf[:len(w.buf):len(w.buf)])
		w.buf = w.buf[len(w.buf):]
	}
	w.push(b)
}

// done returns the message. A pooled one holds a reference per buffer,
// which gRPC's frees give back.
func (w *sliceWriter) done() mem.BufferSlice {
	if len(w.buf) > 0 {
		w.push(w.buf)
	}
	if w.m != nil {
		w.m.refs.Store(int64(len(w.out)))
	}
	return w.out
}

var (
	sotwResources        = fieldNumber(&discovery.DiscoveryResponse{}, "resources")
	deltaResources       = fieldNumber(&discovery.DeltaDiscoveryResponse{}, "resources")
	resourceAny          = fieldNumber(&discovery.Resource{}, "resource")
	resourceNameField    = fieldNumber(&discovery.Resource{}, "name")
	resourceVersionField = fieldNumber(&discovery.Resource{}, "version")
	anyValue             = fieldNumber(&anypb.Any{}, "value")
	anyTypeURL           = fieldNumber(&anypb.Any{}, "type_url")
)

func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("%T has no field %s", m, name))
	}
	return fd.Number()
}

// without marshals m with field skip left out, reading m only.
func without(m proto.Message, skip protowire.Number) ([]byte, error) {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != skip {
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return proto.MarshalOptions{}.Marshal(dst.Interface())
}

func (w *sliceWriter) sotw(m *discovery.DiscoveryResponse) error {
	head, err := without(m, sotwResources)
	if err != nil {
		return err
	}
	n := len(head)
	for _, a := range m.GetResources() {
		n += 16 + len(a.GetTypeUrl()) + inlined(a)
	}
	w.start(head, n, buffersFor(len(m.GetResources()), 0))
	for _, a := range m.GetResources() {
		if err := w.anyField(sotwResources, a); err != nil {
			return err
		}
	}
	return nil
}

// deltaWire is a delta response and further resources of its type, the
// generator's, written after its own (resourcesResponse). Only this codec
// can marshal it.
type deltaWire struct {
	resp *discovery.DeltaDiscoveryResponse
	// whole, when set, is written first: a class's set, encoded once
	// (delta_whole.go); or view, a variant's listeners, written whole.
	whole *wholeSet
	view  *gen.Set
	send  []*gen.Resource
}

func (w *sliceWriter) delta(m *discovery.DeltaDiscoveryResponse, whole *wholeSet, view *gen.Set, send []*gen.Resource) error {
	head, err := without(m, deltaResources)
	if err != nil {
		return err
	}
	typeURL := m.GetTypeUrl()
	n := len(head)
	for _, r := range m.GetResources() {
		n += 32 + len(r.GetName()) + len(r.GetVersion()) + len(r.GetResource().GetTypeUrl()) + inlined(r.GetResource())
	}
	// It reserved twice what a view and a composed set take, 0.3 MB per
	// proxy's listeners at M1 (BENCHMARKS.md).
	separate, adjacent := len(m.GetResources())+len(send)+1, 0
	for _, r := range send {
		n += 32 + len(r.Name) + len(r.Hash) + len(typeURL) + len(r.Any.GetTypeUrl())
		switch {
		case r.Lazy():
			// Written in parts (resource): counted as they will be, or
			// the lists grow after a whole set's thousands of buffers,
			// a copy of them per message (a variant's own inbound
			// listener: 0.6 MB per proxy at M1's connect).
			copied, shared := r.WireShape(inlineBelow)
			n += copied
			separate += shared
		case r.Size() < inlineBelow:
			n += r.Size()
		}
	}
	if whole != nil {
		adjacent = len(whole.parts)
	}
	if view != nil {
		// Each listener's header, and the parts gen.Set.WriteAll copies
		// and shares, counted once per view: growing the buffers as the
		// parts came was a fifth of writing a view.
		copied, shared, heads := view.WholeShape(inlineBelow)
		n += view.Len()*(resourceHeader+len(typeURL)) + heads + copied
		separate += shared
	}
	w.start(head, n, buffersFor(separate, adjacent))
	for _, r := range m.GetResources() {
		if err := w.protoResource(r); err != nil {
			return err
		}
	}
	if whole != nil {
		w.share(whole.b)
		for _, p := range whole.parts {
			w.share(p)
		}
	}
	if view != nil {
		w.typeURL = typeURL
		view.WriteAll(w)
	}
	for _, r := range send {
		w.resource(typeURL, r)
	}
	return nil
}

// protoResource appends r as the delta response's resources field.
func (w *sliceWriter) protoResource(r *discovery.Resource) error {
	if !plainResource(r) {
		// Rare: marshal the resource whole.
		b, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		w.buf = protowire.AppendTag(w.buf, deltaResources, protowire.BytesType)
		w.buf = protowire.AppendBytes(w.buf, b)
		return nil
	}
	a := r.GetResource()
	size := stringField(resourceVersionField, r.GetVersion()) + stringField(resourceNameField, r.GetName())
	if a != nil {
		size += protowire.SizeTag(resourceAny) + protowire.SizeBytes(anySize(a))
	}
	w.buf = protowire.AppendTag(w.buf, deltaResources, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(size))
	w.buf = appendString(w.buf, resourceVersionField, r.GetVersion())
	w.buf = appendString(w.buf, resourceNameField, r.GetName())
	if a != nil {
		return w.anyField(resourceAny, a)
	}
	return nil
}

// resource appends r as the delta response's resources field: a
// discovery.Resource of its name, version (Hash) and bytes, the bytes
// shared, or, for a lazy resource (of the response's type, typeURL),
// written from the parts they are made of: the buffers of its parts grow
// the message by a few per rewritten span, not by a copy of the resource.
func (w *sliceWriter) resource(typeURL string, r *gen.Resource) {
	if !r.Lazy() {
		typeURL = r.Any.GetTypeUrl()
	}
	w.buf = appendResourceHeader(w.buf, typeURL, r.Name, r.Hash, "", r.Size())
	if !r.Lazy() {
		w.share(r.Any.GetValue())
		return
	}
	// The parts are counted first (from the plan, making nothing), so
	// that the header buffer and the buffer list grow once: a port
	// listener of 1,000 chains is some thousands of parts, and growing
	// by doubling as they came was most of what a service change
	// allocated.
	copied, shared := r.WireShape(inlineBelow)
	w.buf = slices.Grow(w.buf, copied)
	if free := cap(w.parts) - len(w.parts); free < 2*shared {
		// Pushed buffers point into w.parts: the old array stays
		// theirs, a new one takes the rest.
		w.parts = make([]part, 0, 2*shared+cap(w.parts))
		w.out = slices.Grow(w.out, 2*shared)
	}
	r.WriteWire(w)
}

// Copy, Share and Resource make sliceWriter a gen.SetWriter.
func (w *sliceWriter) Copy(b []byte)  { w.buf = append(w.buf, b...) }
func (w *sliceWriter) Share(b []byte) { w.share(b) }
func (w *sliceWriter) Resource(name, version, suffix string, size int) {
	w.buf = appendResourceHeader(w.buf, w.typeURL, name, version, suffix, size)
}

// plainResource reports whether r has nothing but a name, a version and a
// resource: the resources this server sends. Those are written directly,
// as reflection per resource would cost more than the copy it saves.
func plainResource(r *discovery.Resource) bool {
	return len(r.GetAliases()) == 0 && r.GetTtl() == nil && r.GetCacheControl() == nil && r.GetMetadata() == nil &&
		r.GetResourceName() == nil && len(r.ProtoReflect().GetUnknown()) == 0 &&
		(r.GetResource() == nil || len(r.GetResource().ProtoReflect().GetUnknown()) == 0)
}

// inlined is how many bytes of a's value are copied rather than shared.
func inlined(a *anypb.Any) int {
	if n := len(a.GetValue()); n < inlineBelow {
		return n
	}
	return 0
}

// stringField is the encoded size of a proto3 string field (0 if empty).
func stringField(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// anySize is the encoded size of an Any without unknown fields.
func anySize(a *anypb.Any) int {
	n := stringField(anyTypeURL, a.GetTypeUrl())
	if v := len(a.GetValue()); v > 0 {
		n += protowire.SizeTag(anyValue) + protowire.SizeBytes(v)
	}
	return n
}

// anyField appends a as field num, sharing its value's bytes.
func (w *sliceWriter) anyField(num protowire.Number, a *anypb.Any) error {
	if len(a.ProtoReflect().GetUnknown()) > 0 {
		b, err := proto.Marshal(a)
		if err != nil {
			return err
		}
		w.buf = protowire.AppendTag(w.buf, num, protowire.BytesType)
		w.buf = protowire.AppendBytes(w.buf, b)
		return nil
	}
	w.buf = protowire.AppendTag(w.buf, num, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(anySize(a)))
	w.buf = appendString(w.buf, anyTypeURL, a.GetTypeUrl())
	if v := a.GetValue(); len(v) > 0 {
		w.buf = protowire.AppendTag(w.buf, anyValue, protowire.BytesType)
		w.buf = protowire.AppendVarint(w.buf, uint64(len(v)))
		w.share(v)
	}
	return nil
}
