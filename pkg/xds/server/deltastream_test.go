package server

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	stream "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// TestDeltaSubscriptionsFollowGoControlPlane applies the same random
// requests to go-control-plane's stream.Subscription and to deltaSub, and
// compares what each holds after every request: the wildcard, the names
// and the returned versions. Sets of up to 400 names cross the size at
// which deltaSub folds its changes into a shared set.
func TestDeltaSubscriptionsFollowGoControlPlane(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 22))
		legacy := seed%2 == 0
		universe := 6
		if seed%3 != 0 {
			universe = 400
		}
		pool := newNamePool()
		name := func() string {
			if rng.IntN(40) == 0 {
				return wildcardName
			}
			return fmt.Sprintf("outbound|%d||svc.ns.svc.cluster.local", rng.IntN(universe))
		}
		batch := func(most int) []string {
			out := make([]string, rng.IntN(most+1))
			for i := range out {
				out[i] = name()
			}
			return out
		}
		first := &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: batch(universe / 2)}
		if rng.IntN(4) == 0 {
			first.InitialResourceVersions = map[string]string{name(): "v0", name(): "v0"}
		}
		want := stream.NewDeltaSubscription(first.ResourceNamesSubscribe, nil, maps.Clone(first.InitialResourceVersions), legacy)
		got := newDeltaSub(pool, first, legacy)
		compareSubs(t, seed, 0, want, got)
		for step := 1; step < 60; step++ {
			// A response: both record versions for some names.
			for range rng.IntN(4) {
				n, v := name(), fmt.Sprint("v", step)
				want.ReturnedResources()[n] = v
				got.returned[n] = v
			}
			sub, unsub := batch(universe/8+2), batch(universe/8+2)
			want.UpdateResourceSubscriptions(sub, unsub)
			got.update(pool, sub, unsub)
			compareSubs(t, seed, step, want, got)
		}
	}
}

func compareSubs(t *testing.T, seed uint64, step int, want stream.Subscription, got *deltaSub) {
	t.Helper()
	if want.IsWildcard() != got.wildcard {
		t.Fatalf("seed %d step %d: wildcard %v, go-control-plane %v", seed, step, got.wildcard, want.IsWildcard())
	}
	names := map[string]struct{}{}
	for n := range got.names.all() {
		if _, dup := names[n]; dup {
			t.Fatalf("seed %d step %d: %q yielded twice", seed, step, n)
		}
		names[n] = struct{}{}
		if !got.names.has(n) {
			t.Fatalf("seed %d step %d: %q yielded but not held", seed, step, n)
		}
	}
	if !maps.Equal(names, want.SubscribedResources()) || got.names.len() != len(names) {
		t.Fatalf("seed %d step %d: names %v (len %d), go-control-plane %v", seed, step,
			slices.Sorted(maps.Keys(names)), got.names.len(), slices.Sorted(maps.Keys(want.SubscribedResources())))
	}
	for n := range want.SubscribedResources() {
		if !got.names.has(n) {
			t.Fatalf("seed %d step %d: %q not held", seed, step, n)
		}
	}
	if !maps.Equal(got.returned, want.ReturnedResources()) {
		t.Fatalf("seed %d step %d: returned %v, go-control-plane %v", seed, step, got.returned, want.ReturnedResources())
	}
}

func routeNames(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("svc-%d.ns.svc.cluster.local:80", i))
	}
	return out
}

// TestSubscriptionsShareTheirNames checks that streams that subscribe to
// the same names, in any batches, end up referring to one set, and that a
// stream that differs keeps its difference to itself.
func TestSubscriptionsShareTheirNames(t *testing.T) {
	pool := newNamePool()
	req := func(names []string) *discovery.DeltaDiscoveryRequest {
		return &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: names}
	}
	a := newDeltaSub(pool, req(routeNames(0, 2000)), false)
	b := newDeltaSub(pool, req(routeNames(1000, 2000)), false)
	b.update(pool, routeNames(0, 1000), nil)
	if a.names.shared == nil || a.names.shared != b.names.shared {
		t.Fatal("two streams with the same 2,000 names, subscribed in different batches, do not share a set")
	}
	// One more name on a: held on its own, b unchanged.
	a.update(pool, routeNames(2000, 2001), nil)
	if !a.names.has("svc-2000.ns.svc.cluster.local:80") || b.names.has("svc-2000.ns.svc.cluster.local:80") {
		t.Fatal("a name one stream added reached the other")
	}
	if a.names.shared != b.names.shared || len(a.names.plus) != 1 {
		t.Fatalf("one added name rebuilt the set (plus %d)", len(a.names.plus))
	}
	// Past the fold: both streams that made the same changes share again.
	a.update(pool, routeNames(2001, 2200), routeNames(0, 10))
	b.update(pool, routeNames(2000, 2200), routeNames(0, 10))
	if a.names.shared != b.names.shared || a.names.plus != nil || b.names.minus != nil {
		t.Fatal("streams that made the same changes do not share the folded set")
	}
	if a.names.len() != 2190 {
		t.Fatalf("len = %d, want 2190", a.names.len())
	}
}

// TestNamePoolForgetsUnusedSets checks that a set no stream refers to is
// collected and leaves the pool.
func TestNamePoolForgetsUnusedSets(t *testing.T) {
	pool := newNamePool()
	s := newDeltaSub(pool, &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: routeNames(0, 100)}, false)
	if pool.size() != 1 {
		t.Fatalf("pool holds %d sets, want 1", pool.size())
	}
	runtime.KeepAlive(s)
	s = nil
	deadline := time.Now().Add(10 * time.Second)
	for pool.size() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool still holds %d sets no stream uses", pool.size())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHashCollisionsAreNotShared gives the pool a set under another set's
// hash: it must build a set of its own rather than take the other's.
func TestHashCollisionsAreNotShared(t *testing.T) {
	pool := newNamePool()
	a := newDeltaSub(pool, &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: routeNames(0, 100)}, false)
	other := routeNames(100, 200)
	var h uint64
	for _, n := range other {
		h += pool.hashOf(n)
	}
	// Make the other names' hash point at a's set.
	pool.sets[h] = pool.sets[a.names.shared.hash]
	b := newDeltaSub(pool, &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: other}, false)
	if b.names.shared == a.names.shared {
		t.Fatal("a set was shared on its hash alone")
	}
	if !b.names.has(other[0]) || b.names.has(routeNames(0, 1)[0]) {
		t.Fatal("the second set holds the wrong names")
	}
}

// TestFirstRequestsAdoptThePoolsSet: a stream whose first request names
// exactly the names of a set the pool holds, in any order, takes that set
// without building one; a list that repeats a name or holds the
// wildcard is no set's, even found under one's hash.
func TestFirstRequestsAdoptThePoolsSet(t *testing.T) {
	pool := newNamePool()
	req := func(names []string) *discovery.DeltaDiscoveryRequest {
		return &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: names}
	}
	a := newDeltaSub(pool, req(routeNames(0, 500)), false)
	shuffled := routeNames(0, 500)
	slices.Reverse(shuffled)
	b := newDeltaSub(pool, req(shuffled), false)
	if b.names.shared != a.names.shared || b.names.plus != nil {
		t.Fatal("the same names in another order did not take the pool's set")
	}
	// Adopting builds nothing per name (adding them built a map of 500,
	// 19 allocations). The count is the process's: a try disturbed by
	// another goroutine's allocations is taken again.
	var allocs float64
	for range 3 {
		if allocs = testing.AllocsPerRun(20, func() { newDeltaSub(pool, req(shuffled), false) }); allocs <= 8 {
			break
		}
	}
	if allocs > 8 {
		t.Errorf("a first request for a pooled set's names allocated %v times", allocs)
	}
	var fresh nameSet
	if !fresh.adopt(pool, shuffled) || fresh.shared != a.names.shared {
		t.Error("adopt refused the names of a pooled set")
	}
	hashOf := func(names []string) uint64 {
		var h uint64
		for _, n := range names {
			h += pool.hashOf(n)
		}
		return h
	}
	for name, names := range map[string][]string{
		"a name twice":  append(routeNames(0, 499), routeNames(0, 1)...),
		"with wildcard": append(routeNames(0, 499), wildcardName),
	} {
		// Found under a's hash, and as long as a's set.
		pool.sets[hashOf(names)] = pool.sets[a.names.shared.hash]
		c := newDeltaSub(pool, req(names), false)
		if c.names.shared == a.names.shared {
			t.Errorf("%s: took a set that is not its names", name)
		}
		if c.names.len() != 499 || !c.names.has(names[0]) || c.names.has(routeNames(499, 500)[0]) {
			t.Errorf("%s: holds %d names, want the 499 it named", name, c.names.len())
		}
		if c.wildcard != (name == "with wildcard") {
			t.Errorf("%s: wildcard %v", name, c.wildcard)
		}
	}
}

// TestDeltaStreamRules checks, over gRPC, the rules serveDelta keeps from
// go-control-plane's delta server: nonces count up from 1 per stream, the
// first request's node serves the requests that omit it, a per-type
// service implies its type, and ADS refuses a request without one.
func TestDeltaStreamRules(t *testing.T) {
	ts := startServer(t, meshStore(t, 2))
	c := newDeltaClient(t, ts)
	c.send(&discovery.DeltaDiscoveryRequest{Node: node(sidecarID, nil), TypeUrl: gen.ClusterType})
	r1 := c.next()
	if r1.GetNonce() != "1" {
		t.Fatalf("first nonce %q, want 1", r1.GetNonce())
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r1.GetNonce()})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ListenerType})
	r2 := c.next()
	if r2.GetNonce() != "2" || r2.GetTypeUrl() != gen.ListenerType || len(r2.GetResources()) == 0 {
		t.Fatalf("second response: nonce %q, type %s, %d resources; want nonce 2 and listeners", r2.GetNonce(), r2.GetTypeUrl(), len(r2.GetResources()))
	}

	// A per-type service: no type URL needed.
	cds, err := clusterservice.NewClusterDiscoveryServiceClient(dial(t, ts.addr)).DeltaClusters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := cds.Send(&discovery.DeltaDiscoveryRequest{Node: node(sidecarID, nil)}); err != nil {
		t.Fatal(err)
	}
	got, err := cds.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got.GetTypeUrl() != gen.ClusterType || !slices.Equal(deltaNames(got), deltaNames(r1)) {
		t.Fatalf("DeltaClusters answered %s %v, ADS %v", got.GetTypeUrl(), deltaNames(got), deltaNames(r1))
	}

	// ADS without a type URL ends the stream.
	bad := newDeltaClient(t, ts)
	bad.send(&discovery.DeltaDiscoveryRequest{Node: node(sidecarID, nil)})
	select {
	case err := <-bad.errc:
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("stream ended with %v, want InvalidArgument", err)
		}
	case r := <-bad.recv:
		t.Fatalf("answered a request without a type URL: %v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("a request without a type URL was neither answered nor refused")
	}
}
