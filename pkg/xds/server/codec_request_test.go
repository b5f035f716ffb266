package server

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// deltaRequestSeeds are encodings of delta requests: names subscribed and
// unsubscribed, interleaved with the other fields, none, one, empty
// ones, a name that is not UTF-8, a name field of the wrong type, and
// input cut short.
func deltaRequestSeeds(t testing.TB) [][]byte {
	meta, err := structpb.NewStruct(map[string]any{"ISTIO_VERSION": "1.32.0", "LABELS": map[string]any{"app": "reviews"}})
	if err != nil {
		t.Fatal(err)
	}
	full := &discovery.DeltaDiscoveryRequest{
		Node:                     &core.Node{Id: "sidecar~10.0.0.1~reviews-1.ns-0~ns-0.svc.cluster.local", Metadata: meta},
		TypeUrl:                  "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
		ResourceNamesSubscribe:   []string{"reviews.ns-0.svc.cluster.local:9080", "ratings.ns-0.svc.cluster.local:9080", "", "9080"},
		ResourceNamesUnsubscribe: []string{"details.ns-0.svc.cluster.local:9080", "x"},
		InitialResourceVersions:  map[string]string{"a": "1", "b": "2"},
		ResponseNonce:            "7",
	}
	var out [][]byte
	for _, m := range []*discovery.DeltaDiscoveryRequest{
		full,
		{TypeUrl: "t"},
		{TypeUrl: "t", ResourceNamesSubscribe: []string{"one"}},
		{ResourceNamesSubscribe: []string{"a", "b"}},
		{ResourceNamesUnsubscribe: []string{"a", "b", "c"}},
		{ResourceNamesSubscribe: []string{"", ""}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	b, _ := proto.Marshal(full)
	// Names after the other fields, and between them.
	var mixed []byte
	mixed = protowire.AppendTag(mixed, deltaSubscribe, protowire.BytesType)
	mixed = protowire.AppendString(mixed, "first")
	mixed = append(mixed, b...)
	mixed = protowire.AppendTag(mixed, deltaUnsubscribe, protowire.BytesType)
	mixed = protowire.AppendString(mixed, "last")
	out = append(out, mixed)
	// Not UTF-8, among other names.
	bad := protowire.AppendTag(append([]byte(nil), b...), deltaSubscribe, protowire.BytesType)
	out = append(out, protowire.AppendBytes(bad, []byte{0xff, 0xfe}))
	// A name field of the wrong type: an unknown field.
	odd := protowire.AppendTag(append([]byte(nil), b...), deltaSubscribe, protowire.VarintType)
	out = append(out, protowire.AppendVarint(odd, 3))
	// An unknown field.
	unk := protowire.AppendTag(append([]byte(nil), b...), 99, protowire.BytesType)
	out = append(out, protowire.AppendString(unk, "?"))
	// Cut short, inside a name and inside the node.
	out = append(out, b[:len(b)-3], b[:20])
	return out
}

// sameAsLibrary requires unmarshalDeltaRequest to decode b as the protobuf
// library does, with the names copied and as views of b: the same error
// or none, and an equal message.
func sameAsLibrary(t *testing.T, b []byte) {
	t.Helper()
	var want discovery.DeltaDiscoveryRequest
	werr := proto.Unmarshal(b, &want)
	for _, own := range []bool{false, true} {
		var got discovery.DeltaDiscoveryRequest
		gerr := unmarshalDeltaRequest(b, &got, own)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("decoding %x (own %v): error %v, the library's %v", b, own, gerr, werr)
		}
		if werr == nil && !proto.Equal(&got, &want) {
			t.Fatalf("decoding %x (own %v):\n got %v\nwant %v", b, own, &got, &want)
		}
	}
}

func TestDeltaRequestDecodedAsByTheLibrary(t *testing.T) {
	for _, b := range deltaRequestSeeds(t) {
		sameAsLibrary(t, b)
	}
}

// The names are copied out of the buffer gRPC decodes from, which it
// reuses.
func TestDeltaRequestNamesOutliveTheBuffer(t *testing.T) {
	want := &discovery.DeltaDiscoveryRequest{TypeUrl: "t", ResourceNamesSubscribe: []string{"alpha", "beta"}, ResourceNamesUnsubscribe: []string{"gamma"}}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got discovery.DeltaDiscoveryRequest
	if err := Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'z'
	}
	if !proto.Equal(&got, want) {
		t.Fatalf("after the buffer was written over: %v, want %v", &got, want)
	}
}

// A request gRPC received in several buffers (a subscription to
// thousands of names, a first request with a large node) decodes as one,
// both as a request and as the buffers the stream's reader keeps; copied
// into memory of its own (oneBuffer), its names are views of that copy,
// never of gRPC's buffers, which gRPC reuses. One in a single buffer is
// that buffer.
func TestDeltaRequestInSeveralBuffers(t *testing.T) {
	tried := 0
	for _, b := range deltaRequestSeeds(t) {
		if len(b) < 2 {
			continue
		}
		want := new(discovery.DeltaDiscoveryRequest)
		if err := proto.Unmarshal(b, want); err != nil {
			continue
		}
		split := mem.BufferSlice{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])}
		var got discovery.DeltaDiscoveryRequest
		if err := Codec().Unmarshal(split, &got); err != nil || !proto.Equal(&got, want) {
			t.Fatalf("split in two: %v, %v; want %v", &got, err, want)
		}
		// Copied into memory of its own, which goes with the request,
		// not into a buffer of gRPC's pool, which keeps it; the names are
		// views of the copy (a request with one name is left to the
		// library).
		buf, own := oneBuffer(split)
		if _, isSlice := buf.(mem.SliceBuffer); !own || !isSlice || !bytes.Equal(buf.ReadOnlyData(), b) {
			t.Fatalf("a request split in two was copied into a %T (own %v)", buf, own)
		}
		var dec discovery.DeltaDiscoveryRequest
		if err := unmarshalDeltaRequest(buf.ReadOnlyData(), &dec, own); err != nil || !proto.Equal(&dec, want) {
			t.Fatalf("decoded from its copy: %v, %v; want %v", &dec, err, want)
		}
		names := append(dec.GetResourceNamesSubscribe(), dec.GetResourceNamesUnsubscribe()...)
		for _, n := range names {
			if len(names) > 1 && n != "" && !within(n, buf.ReadOnlyData()) {
				t.Fatalf("name %q of a request split in two is not a view of its copy", n)
			}
		}
		// The stream's reader keeps the buffers as received.
		rb := &deltaRequestBytes{DeltaDiscoveryRequest: new(discovery.DeltaDiscoveryRequest)}
		if err := Codec().Unmarshal(split, rb); err != nil {
			t.Fatal(err)
		}
		if rb.buf != nil || !bytes.Equal(rb.data.Materialize(), b) {
			t.Fatal("the reader's buffers of a request split in two differ from the request's")
		}
		fromReader, err := decodeDelta(rb, nil)
		if err != nil || !proto.Equal(fromReader, want) {
			t.Fatalf("decoded from the reader's buffers: %v, %v; want %v", fromReader, err, want)
		}
		for _, n := range append(fromReader.GetResourceNamesSubscribe(), fromReader.GetResourceNamesUnsubscribe()...) {
			if n != "" && within(n, b) {
				t.Fatalf("name %q is a view of gRPC's buffers", n)
			}
		}
		one := &deltaRequestBytes{DeltaDiscoveryRequest: new(discovery.DeltaDiscoveryRequest)}
		if err := Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, one); err != nil {
			t.Fatal(err)
		}
		if d := one.buf.ReadOnlyData(); &d[0] != &b[0] {
			t.Fatal("a request in one buffer was copied")
		}
		tried++
	}
	if tried == 0 {
		t.Fatal("no seed request to split")
	}
}

// within reports whether s's bytes are inside b's.
func within(s string, b []byte) bool {
	p, start := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(s)) <= start+uintptr(len(b))
}

func FuzzDeltaRequest(f *testing.F) {
	for _, b := range deltaRequestSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsLibrary(t, b) })
}

// BenchmarkDeltaRequest decodes a request subscribing to 2,000 routes, as
// a proxy at M1 sends once it has its listeners, with the protobuf
// library and with the codec, from a buffer gRPC reuses and from the
// request's own copy (own).
func BenchmarkDeltaRequest(b *testing.B) {
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"}
	for i := range 2000 {
		req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local:%d", i/2, i%50, 8080+i%2))
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	for name, decode := range map[string]func([]byte, *discovery.DeltaDiscoveryRequest) error{
		"library": func(w []byte, m *discovery.DeltaDiscoveryRequest) error { return proto.Unmarshal(w, m) },
		"codec":   func(w []byte, m *discovery.DeltaDiscoveryRequest) error { return unmarshalDeltaRequest(w, m, false) },
		"own":     func(w []byte, m *discovery.DeltaDiscoveryRequest) error { return unmarshalDeltaRequest(w, m, true) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var m discovery.DeltaDiscoveryRequest
				if err := decode(wire, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
