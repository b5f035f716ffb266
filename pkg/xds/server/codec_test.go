package server

import (
	"bytes"
	"runtime"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// classResources generates a real class configuration of services
// services and returns its resources of typeURL.
func classResources(t testing.TB, services int, typeURL string) []*gen.Resource {
	t.Helper()
	store := meshStore(t, services)
	p, err := model.ParseProxy(sidecarID, nil)
	if err != nil {
		t.Fatal(err)
	}
	cls, err := newGen(t).Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := cls.Sets[typeURL]
	out := make([]*gen.Resource, 0, set.Len())
	for _, n := range set.Names {
		out = append(out, set.Get(n))
	}
	return out
}

// ratingsVariant is the configuration of a workload of ns-0 whose
// canonical service is ratings, in a World of services, made as a
// variant of that of a reviews workload of the same namespace, by a
// generator with the default options, tweaked.
func ratingsVariant(t testing.TB, services int, tweak ...func(*gen.Options)) *gen.ClassConfig {
	t.Helper()
	w := meshStore(t, services).World()
	meta := func(name string) map[string]any {
		return map[string]any{"ISTIO_VERSION": "1.32.0", "LABELS": map[string]any{"app": name, "service.istio.io/canonical-name": name}}
	}
	rep, err := model.ParseProxy("sidecar~10.9.0.1~reviews.ns-0~ns-0.svc.cluster.local", meta("reviews"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.9.0.2~ratings.ns-0~ns-0.svc.cluster.local", meta("ratings"))
	if err != nil {
		t.Fatal(err)
	}
	opts := gen.DefaultOptions(testLog())
	for _, f := range tweak {
		f(&opts)
	}
	g, err := gen.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	base, err := g.Class(w, rep, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := g.Variant(base, gen.ClassKey(w, p), p, nil)
	if !ok {
		t.Fatal("Variant refused")
	}
	return v
}

// roundTrip encodes m with the xDS codec, decodes the bytes with the
// protobuf library and requires the same message back.
func roundTrip(t *testing.T, m proto.Message) {
	t.Helper()
	bs, err := Codec().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(bs.Materialize(), got); err != nil {
		t.Fatalf("the codec's bytes do not parse: %v", err)
	}
	if !proto.Equal(got, m) {
		t.Fatalf("decoded %v\nwant %v", got, m)
	}
	if want, _ := proto.Marshal(m); bs.Len() != len(want) {
		t.Errorf("encoded %d bytes, the protobuf library %d", bs.Len(), len(want))
	}
}

func TestCodecWritesTheSameMessages(t *testing.T) {
	var anys []*anypb.Any
	var res []*discovery.Resource
	for _, typ := range gen.TypeURLs {
		for _, r := range classResources(t, 20, typ) {
			anys = append(anys, r.Any)
			res = append(res, &discovery.Resource{Name: r.Name, Version: r.Hash, Resource: r.Any})
		}
	}
	odd := &discovery.Resource{
		Name: "odd", Version: "1", Aliases: []string{"a", "b"}, Ttl: durationpb.New(5e9),
		Resource: &anypb.Any{TypeUrl: gen.ClusterType, Value: make([]byte, 4096)},
	}
	odd.ProtoReflect().SetUnknown([]byte{0xa8, 0x1f, 0x01}) // field 501, varint 1
	unknownAny := &anypb.Any{TypeUrl: gen.ListenerType, Value: []byte{1, 2, 3}}
	unknownAny.ProtoReflect().SetUnknown([]byte{0xa8, 0x1f, 0x02})
	cases := map[string]proto.Message{
		"sotw":             &discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: gen.ClusterType, Nonce: "7", Resources: anys},
		"sotw empty":       &discovery.DiscoveryResponse{TypeUrl: gen.RouteType},
		"sotw unknown any": &discovery.DiscoveryResponse{Resources: []*anypb.Any{unknownAny, {TypeUrl: gen.ClusterType}}},
		"delta": &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: "v2", TypeUrl: gen.EndpointType, Nonce: "8",
			Resources: res, RemovedResources: []string{"gone", "also gone"},
		},
		"delta odd":     &discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{odd, {Name: "no resource"}}},
		"delta removed": &discovery.DeltaDiscoveryResponse{RemovedResources: []string{"x"}},
		"other message": &discovery.DiscoveryRequest{VersionInfo: "v", ResourceNames: []string{"a"}},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) { roundTrip(t, m) })
	}
}

func TestCodecSharesTheResourceBytes(t *testing.T) {
	rs := classResources(t, 20, gen.ClusterType)
	m := &discovery.DiscoveryResponse{TypeUrl: gen.ClusterType}
	for _, r := range rs {
		m.Resources = append(m.Resources, r.Any)
	}
	bs, err := Codec().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, b := range bs {
		data := b.ReadOnlyData()
		for _, r := range rs {
			if len(data) > 0 && len(r.Any.Value) == len(data) && &data[0] == &r.Any.Value[0] {
				shared++
			}
		}
	}
	big := 0
	for _, r := range rs {
		if len(r.Any.Value) >= inlineBelow {
			big++
		}
	}
	if big == 0 || shared != big {
		t.Fatalf("%d of the %d resources of %d bytes or more are sent from their own bytes", shared, big, inlineBelow)
	}
}

// BenchmarkCodec encodes a delta EDS response of 2,000 resources (a
// 1,000-service class) with gRPC's proto codec and with the xDS codec.
func BenchmarkCodec(b *testing.B) {
	var res []*discovery.Resource
	for _, r := range classResources(b, 1000, gen.ClusterType) {
		res = append(res, &discovery.Resource{Name: r.Name, Version: r.Hash, Resource: r.Any})
	}
	m := &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ClusterType, Nonce: "1", Resources: res}
	for _, c := range []encoding.CodecV2{encoding.GetCodecV2(grpcproto.Name), Codec()} {
		name := "proto"
		if _, ok := c.(xdsCodec); ok {
			name = "xds"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				bs, err := c.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					b.ReportMetric(float64(bs.Len()), "bytes/msg")
				}
				bs.Free()
			}
		})
	}
}

// A delta response with lazy resources (a variant's listeners) is written
// from their parts: the message is byte for byte the one the made
// listeners give, and writing it allocates less than their size (the
// large parts are the base listeners' bytes, shared). The listeners are
// under gen's bigListener: larger ones are made once per view.
func TestCodecWritesLazyResourcesFromTheirParts(t *testing.T) {
	set := ratingsVariant(t, 8).Sets[gen.ListenerType]
	lazyResp := &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ListenerType, SystemVersionInfo: "v1", Nonce: "3", RemovedResources: []string{"gone"}}
	var send []*gen.Resource
	size, plain := 0, 0
	for _, n := range set.Names {
		r := set.Get(n)
		if r.Lazy() {
			size += r.Size()
		} else {
			plain++
		}
		send = append(send, r)
	}
	if size == 0 || plain == 0 {
		t.Fatalf("%d bytes of lazy listeners, %d plain ones: the test needs both", size, plain)
	}
	codec := Codec()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := codec.Marshal(&deltaWire{resp: lazyResp, send: send})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	// Made, the listeners alone would allocate their size; written from
	// their parts, the envelope, the small parts copied and the new
	// lengths are what is allocated.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc >= uint64(size) {
		t.Errorf("writing %d bytes of lazy listeners allocated %d bytes: they were made", size, alloc)
	}
	// The same response with the listeners made.
	made := proto.Clone(lazyResp).(*discovery.DeltaDiscoveryResponse)
	for _, r := range send {
		made.Resources = append(made.Resources, &discovery.Resource{Name: r.Name, Version: r.Hash, Resource: set.Get(r.Name).Wire()})
	}
	want, err := codec.Marshal(made)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Materialize(), want.Materialize()) {
		t.Fatal("the response written from lazy parts differs from the one of made listeners")
	}
	var back discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(got.Materialize(), &back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&back, made) {
		t.Error("the response written from lazy parts does not read back as the made one")
	}
}

// A response that writes a view whole and then lazy resources (a
// variant's class listeners and its own inbound listener) reserves the
// buffers the lazy ones are written in: its lists never grow, which
// copied the view's thousands of buffers per message.
func TestLazyResourcesAfterAViewAreReserved(t *testing.T) {
	set := ratingsVariant(t, 8).Sets[gen.ListenerType]
	var lazy []*gen.Resource
	for _, n := range set.Names {
		if r := set.Get(n); r.Lazy() {
			lazy = append(lazy, r)
		}
	}
	if len(lazy) == 0 {
		t.Fatal("no lazy listener: the test shows nothing")
	}
	var w sliceWriter
	if err := w.delta(&discovery.DeltaDiscoveryResponse{TypeUrl: gen.ListenerType, Nonce: "1"}, nil, set, lazy); err != nil {
		t.Fatal(err)
	}
	if len(w.out) > w.reserved {
		t.Errorf("%d buffers written, %d reserved: the lists grew", len(w.out), w.reserved)
	}
	if w.m != nil {
		w.m.release()
	}
}
