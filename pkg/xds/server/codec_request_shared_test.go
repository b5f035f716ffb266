package server

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// sharedPool is a pool holding one set of n route names, and the set.
func sharedPool(t testing.TB, n int) (*namePool, *sharedNames) {
	t.Helper()
	pool := newNamePool()
	var s nameSet
	for i := range n {
		s.add(fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local:8080", i, i%7))
	}
	set := pool.fold(&s)
	if set.len() != n || len(set.names) != n {
		t.Fatalf("the pool's set has %d names (%d listed), want %d", set.len(), len(set.names), n)
	}
	return pool, set
}

// inPieces is b in buffers of k bytes (the last shorter), as gRPC hands
// over a request that came in several frames.
func inPieces(b []byte, k int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > k {
		out = append(out, mem.SliceBuffer(b[:k:k]))
		b = b[k:]
	}
	return append(out, mem.SliceBuffer(b))
}

// decodedFromPieces decodes b, received in pieces of k bytes, as a delta
// stream does (the reader's codec, then decodeDelta with pool).
func decodedFromPieces(t testing.TB, b []byte, k int, pool *namePool) (*discovery.DeltaDiscoveryRequest, error) {
	t.Helper()
	rb := &deltaRequestBytes{DeltaDiscoveryRequest: new(discovery.DeltaDiscoveryRequest)}
	if err := Codec().Unmarshal(inPieces(b, k), rb); err != nil {
		t.Fatal(err)
	}
	return decodeDelta(rb, pool)
}

// sameRequest reports whether a and b are equal but for the order of
// their subscribed names.
func sameRequest(a, b *discovery.DeltaDiscoveryRequest) bool {
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	slices.Sort(a.ResourceNamesSubscribe)
	slices.Sort(b.ResourceNamesSubscribe)
	return proto.Equal(a, b)
}

// A subscription to exactly the names of a set the pool holds, in any
// order and cut anywhere (tags, lengths and names across buffers), is
// given the set's own list, which the stream then adopts without hashing
// the names again.
func TestSubscriptionToASharedSetIsGivenItsList(t *testing.T) {
	pool, set := sharedPool(t, 100)
	names := slices.Clone(set.names)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	want := &discovery.DeltaDiscoveryRequest{
		Node:                   &core.Node{Id: "sidecar~10.0.0.1~reviews-1.ns-0~ns-0.svc.cluster.local"},
		TypeUrl:                "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
		ResourceNamesSubscribe: names,
		ResponseNonce:          "3",
	}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 2, 7, 64, 1000, len(b) - 1} {
		got, err := decodedFromPieces(t, b, k, pool)
		if err != nil || !sameRequest(got, want) {
			t.Fatalf("in pieces of %d: %v, %v; want %v", k, got, err, want)
		}
		if sub := got.GetResourceNamesSubscribe(); &sub[0] != &set.names[0] {
			t.Fatalf("in pieces of %d: the names were not the set's list", k)
		}
		if pool.listed(got.GetResourceNamesSubscribe()) != set || pool.find(got.GetResourceNamesSubscribe()) != set {
			t.Fatalf("in pieces of %d: the pool does not find its set by its list", k)
		}
	}
}

// Any other request is decoded as the protobuf library decodes it, not
// given a set's list: a name the set lacks, one twice, one fewer, the
// wildcard, an unsubscription, or too few names to share; each also
// found under the set's hash, as a collision would.
func TestSubscriptionNotASharedSetIsDecodedAsIs(t *testing.T) {
	_, first := sharedPool(t, 100)
	all := first.names
	for name, req := range map[string]*discovery.DeltaDiscoveryRequest{
		"a name the set lacks": {ResourceNamesSubscribe: append(slices.Clone(all[1:]), "other:8080")},
		"a name twice":         {ResourceNamesSubscribe: append(slices.Clone(all[1:]), all[1])},
		"one fewer":            {ResourceNamesSubscribe: slices.Clone(all[1:])},
		"the wildcard":         {ResourceNamesSubscribe: append(slices.Clone(all[1:]), "*")},
		"an unsubscription":    {ResourceNamesSubscribe: slices.Clone(all), ResourceNamesUnsubscribe: []string{"old:8080"}},
		"a few names":          {ResourceNamesSubscribe: slices.Clone(all[:foldAbove])},
	} {
		req.TypeUrl, req.ResponseNonce = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration", "9"
		pool, set := sharedPool(t, 100)
		var h uint64
		for _, n := range req.ResourceNamesSubscribe {
			h += pool.hashOf(n)
		}
		pool.sets[h] = pool.sets[set.hash]
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodedFromPieces(t, b, 16, pool)
		if err != nil || !proto.Equal(got, req) {
			t.Fatalf("%s: %v, %v; want %v", name, got, err, req)
		}
		if sub := got.GetResourceNamesSubscribe(); len(sub) > 0 && &sub[0] == &set.names[0] {
			t.Fatalf("%s: given the set's list", name)
		}
	}
}

// FuzzSharedSubscription decodes any input, received in pieces of any
// size, as the stream does with a pool holding a set of 40 names: the
// result is the library's, but for the order of the subscribed names, or
// an error where the library has one.
func FuzzSharedSubscription(f *testing.F) {
	pool, set := sharedPool(f, 40)
	match, err := proto.Marshal(&discovery.DeltaDiscoveryRequest{
		Node: &core.Node{Id: "n"}, TypeUrl: "t", ResourceNamesSubscribe: set.names, ResponseNonce: "1",
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(match, uint16(5))
	f.Add(match[:len(match)-1], uint16(64))
	for _, b := range deltaRequestSeeds(f) {
		f.Add(b, uint16(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, k uint16) {
		if len(b) < 2 {
			return // one buffer at most: not this path
		}
		var want discovery.DeltaDiscoveryRequest
		werr := proto.Unmarshal(b, &want)
		got, gerr := decodedFromPieces(t, b, 1+int(k)%len(b), pool)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("decoding %x: error %v, the library's %v", b, gerr, werr)
		}
		if werr == nil && !sameRequest(got, &want) {
			t.Fatalf("decoding %x:\n got %v\nwant %v", b, got, &want)
		}
		runtime.KeepAlive(set) // the pool holds it weakly
	})
}

// BenchmarkSharedSubscription decodes a subscription to 2,000 routes,
// received in 16 KiB frames, as the stream decodes it: with the pool
// holding its set (matched), and without (copied and listed).
func BenchmarkSharedSubscription(b *testing.B) {
	pool, set := sharedPool(b, 2000)
	wire, err := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.route.v3.RouteConfiguration", ResourceNamesSubscribe: set.names})
	if err != nil {
		b.Fatal(err)
	}
	for name, p := range map[string]*namePool{"matched": pool, "copied": nil} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodedFromPieces(b, wire, 16<<10, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// The pool holds its sets weakly: streams keep them.
	runtime.KeepAlive(set)
}
