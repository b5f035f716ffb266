package server

import (
	"runtime"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// encodeDelta encodes the delta response of type t carrying send as
// respondDelta hands it to the stream.
func encodeDelta(c encoding.CodecV2, t string, send []*gen.Resource) (mem.BufferSlice, error) {
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: t, SystemVersionInfo: "v1", Nonce: "1"}
	return c.Marshal(&deltaWire{resp: resp, send: send})
}

// BenchmarkDeltaResponse encodes a proxy's first delta responses at
// 1,000 services as respondDelta makes them and the codec writes them: a
// class's 2,000 clusters, and a variant's listeners (a workload with its
// own canonical service: most of them lazy).
func BenchmarkDeltaResponse(b *testing.B) {
	v := ratingsVariant(b, 1000)
	codec := Codec()
	for _, t := range []string{gen.ClusterType, gen.ListenerType} {
		set := v.Sets[t]
		b.Run(gen.ShortType(t), func(b *testing.B) {
			send := make([]*gen.Resource, 0, set.Len())
			for _, n := range set.Names {
				send = append(send, set.Get(n))
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				bs, err := encodeDelta(codec, t, send)
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

// BenchmarkFirstResponse makes and encodes a proxy's first delta
// response of a type at 1,000 services (listeners per address), as it
// was made before
// delta_whole.go (each resource looked up by name, a variant's
// listeners made one by one, then written) and as it is: the class's
// clusters encoded once and shared (the encoding is held, as the
// server's recent ones are), a variant's listeners written whole from
// their plans.
func BenchmarkFirstResponse(b *testing.B) {
	v := ratingsVariant(b, 1000, func(o *gen.Options) { o.ListenersPerAddress = true })
	codec := Codec()
	resp := func(t string) *discovery.DeltaDiscoveryResponse {
		return &discovery.DeltaDiscoveryResponse{TypeUrl: t, SystemVersionInfo: "v1", Nonce: "1"}
	}
	for _, t := range []string{gen.ClusterType, gen.ListenerType} {
		set := v.Sets[t]
		run := func(b *testing.B, msg func() any) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				bs, err := codec.Marshal(msg())
				if err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					b.ReportMetric(float64(bs.Len()), "bytes/msg")
				}
				bs.Free()
			}
		}
		b.Run(gen.ShortType(t)+"/by-name", func(b *testing.B) {
			run(b, func() any {
				send := make([]*gen.Resource, 0, set.Len())
				for _, n := range set.Names {
					send = append(send, set.Get(n))
				}
				return &deltaWire{resp: resp(t), send: send}
			})
		})
		b.Run(gen.ShortType(t)+"/whole", func(b *testing.B) {
			if set.IsView() {
				run(b, func() any { return &deltaWire{resp: resp(t), view: set} })
				return
			}
			held := wholeOf(set, nil)
			run(b, func() any { return &deltaWire{resp: resp(t), whole: wholeOf(set, nil)} })
			runtime.KeepAlive(held)
		})
	}
}

// BenchmarkEncodeWhole encodes a class's set whole, as the first stream
// sent it does when no encoding of it is held (1,000 services, listeners
// per address).
func BenchmarkEncodeWhole(b *testing.B) {
	v := ratingsVariant(b, 1000, func(o *gen.Options) { o.ListenersPerAddress = true })
	for _, t := range []string{gen.ClusterType, gen.EndpointType, gen.RouteType} {
		set := v.Sets[t]
		b.Run(gen.ShortType(t), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if ws := encodeWhole(set); i == 0 {
					b.ReportMetric(float64(len(ws.b)), "bytes/set")
				}
			}
		})
	}
}
