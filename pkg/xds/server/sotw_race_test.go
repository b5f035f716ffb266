package server

import (
	"context"
	"slices"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestSotwEndpointsWhenTheClassMovedAhead: a state-of-the-world proxy
// gets every endpoint change when its class was taken past the World of
// its own push by another proxy's (the class then holds changes the push
// does not name) and the next push finds its last response unanswered.
// It lost the later changes before: the first push claimed the whole class
// compared, the second found no open watch, and the ACK then looked
// unchanged. Seen at M1 with 1,000 state-of-the-world proxies (a few of
// one class missed the last endpoint changes of a burst for good).
func TestSotwEndpointsWhenTheClassMovedAhead(t *testing.T) {
	store := meshStore(t, 3)
	ts := startServer(t, store)
	c := newSotwClient(t, dial(t, ts.addr), node(sidecarID, map[string]any{"ISTIO_VERSION": "1.32.0"}))
	c.send(gen.ClusterType, nil, "", "", "")
	cds := c.next()
	c.ack(cds, nil)
	var eds []string
	for _, n := range names(t, cds) {
		if len(n) > 9 && n[:9] == "outbound|" {
			eds = append(eds, n)
		}
	}
	slices.Sort(eds)
	c.send(gen.EndpointType, eds, "", "", "")
	first := c.next()
	c.ack(first, eds)
	var cn0 *conn
	eventually(t, "the EDS watch to be open", func() bool {
		ts.s.conns.Range(func(_, v any) bool {
			cn := v.(*conn)
			cn.mu.Lock()
			defer cn.mu.Unlock()
			if cn.of(gen.EndpointType).sotw != nil {
				cn0 = cn
			}
			return false
		})
		return cn0 != nil
	})

	// Worlds the server's own store does not see (its pushes stay out of
	// the way): svc-0's endpoints change, then svc-1's.
	other := meshStore(t, 3)
	apply(t, other, worldtest.Slice("ns-0", "svc-0", "10.1.0.1"))
	w2 := other.World()
	apply(t, other, worldtest.Slice("ns-1", "svc-1", "10.1.1.1"))
	w3 := other.World()
	svc0 := model.NamespacedName{Namespace: "ns-0", Name: "svc-0"}
	svc1 := model.NamespacedName{Namespace: "ns-1", Name: "svc-1"}
	cn0.mu.Lock()
	p := cn0.proxy
	cn0.mu.Unlock()

	// Another proxy of the class took it to w3, both changes.
	ts.s.classes.Endpoints(ts.s.gen, w3, p, []model.NamespacedName{svc0, svc1})
	// This proxy's push for w2 names svc-0 only; its push for w3 comes
	// while it has not answered the first.
	ctx := context.Background()
	ts.s.work(ctx, cn0, &pushItem{world: w2, eds: map[model.NamespacedName]bool{svc0: true}, keepOwn: true, enqueued: time.Now()})
	got := map[string]string{}
	take := func(r *discovery.DiscoveryResponse) {
		for _, a := range r.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			for _, le := range cla.GetEndpoints() {
				for _, e := range le.GetLbEndpoints() {
					got[cla.GetClusterName()] += e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() + " "
				}
			}
		}
	}
	r := c.next()
	take(r)
	ts.s.work(ctx, cn0, &pushItem{world: w3, eds: map[model.NamespacedName]bool{svc1: true}, keepOwn: true, enqueued: time.Now()})
	c.ack(r, eds)
	want := "outbound|80||svc-1.ns-1.svc.cluster.local"
	deadline := time.After(5 * time.Second)
	for got[want] != "10.1.1.1 " {
		select {
		case r := <-c.recv:
			take(r)
			c.ack(r, eds)
		case err := <-c.errc:
			t.Fatalf("stream ended: %v", err)
		case <-deadline:
			t.Fatalf("svc-1's new endpoints never reached the proxy: it got %v", got)
		}
	}
	if got["outbound|80||svc-0.ns-0.svc.cluster.local"] != "10.1.0.1 " {
		t.Errorf("svc-0's new endpoints: got %v", got)
	}
}
