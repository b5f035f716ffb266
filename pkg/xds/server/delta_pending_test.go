package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestDeltaChangesWhileUnanswered: changes pushed while a delta stream has
// not answered its last response are sent when it does, and only they: the
// service added since (its clusters), the one added and removed since (its
// removal), not the whole state.
func TestDeltaChangesWhileUnanswered(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	c, _ := ackedDeltaCDS(t, ts, node(sidecarID, nil))

	apply(t, store, worldtest.Service("ns-0", "x", "10.96.8.1"))
	rx := c.next()
	if got := joined(deltaNames(rx)); got != "outbound|7070||x.ns-0.svc.cluster.local,outbound|80||x.ns-0.svc.cluster.local" {
		t.Fatalf("adding x sent %q", got)
	}
	// Not answered yet: these two pushes find no open watch.
	apply(t, store, worldtest.Service("ns-0", "y", "10.96.8.2"))
	eventually(t, "the push adding y to reach the stream", streamHasCluster(ts, "outbound|80||y.ns-0.svc.cluster.local"))
	apply(t, store, model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindService, Namespace: "ns-0", Name: "x"}})
	eventually(t, "the push removing x to reach the stream", func() bool { return !streamHasCluster(ts, "outbound|80||x.ns-0.svc.cluster.local")() })

	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: rx.GetNonce()})
	select {
	case r := <-c.recv:
		if got := joined(deltaNames(r)); got != "outbound|7070||y.ns-0.svc.cluster.local,outbound|80||y.ns-0.svc.cluster.local" {
			t.Errorf("after the ACK the server sent %q, want y's two clusters only", got)
		}
		if got := joined(r.GetRemovedResources()); got != "outbound|7070||x.ns-0.svc.cluster.local,outbound|80||x.ns-0.svc.cluster.local" {
			t.Errorf("after the ACK the server removed %q, want x's two clusters", got)
		}
	case err := <-c.errc:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the changes made while the proxy had not answered were never sent")
	}
}

// TestDeltaResubscribingIsNotAResend: a delta client that subscribes again
// to names it already holds (some repeat their whole list) is sent nothing
// for them; a name it unsubscribed and subscribes again is sent again.
func TestDeltaResubscribingIsNotAResend(t *testing.T) {
	store := meshStore(t, 3)
	ts := startServer(t, store)
	c, r := ackedDeltaCDS(t, ts, node(sidecarID, nil))
	var eds []string
	for _, res := range r.GetResources() {
		if strings.HasPrefix(res.GetName(), "outbound|") {
			eds = append(eds, res.GetName())
		}
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: eds})
	e := c.next()
	if len(e.GetResources()) != len(eds) {
		t.Fatalf("first EDS response has %d resources, want %d", len(e.GetResources()), len(eds))
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResponseNonce: e.GetNonce()})
	// A change makes the current configuration the stream's base.
	apply(t, store, worldtest.Slice("ns-0", "svc-0", "10.7.7.7"))
	e2 := c.next()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResponseNonce: e2.GetNonce()})

	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: eds})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesUnsubscribe: eds[:1]})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: eds[:1]})
	select {
	case r := <-c.recv:
		if got := joined(deltaNames(r)); got != eds[0] {
			t.Errorf("after subscribing again to everything and to %s after unsubscribing it, sent %q, want only %s", eds[0], got, eds[0])
		}
	case err := <-c.errc:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, subscribed again after being unsubscribed, was never sent", eds[0])
	}
}

// TestDeltaPushRebasesAStreamHeldWhole: a push to a delta stream leaves
// the stream's own map empty, with the current configuration as its base,
// as a full comparison does: the map no longer grows with every push
// until maxDeltaOverrides. What the stream is sent after is still right.
func TestDeltaPushRebasesAStreamHeldWhole(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	c, _ := ackedDeltaCDS(t, ts, node(sidecarID, nil))
	for i, svc := range []string{"x", "y", "z"} {
		apply(t, store, worldtest.Service("ns-0", svc, fmt.Sprintf("10.96.8.%d", i+1)))
		r := c.next()
		want := fmt.Sprintf("outbound|7070||%s.ns-0.svc.cluster.local,outbound|80||%s.ns-0.svc.cluster.local", svc, svc)
		if got := joined(deltaNames(r)); got != want {
			t.Fatalf("adding %s sent %q, want %q", svc, got, want)
		}
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce()})
		if n, inBase := clusterOverrides(t, ts, "outbound|80||"+svc+".ns-0.svc.cluster.local"); n != 0 || !inBase {
			t.Fatalf("after adding %s the stream's map holds %d names, its base holds the new cluster: %v; want 0, true", svc, n, inBase)
		}
	}
	apply(t, store, model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindService, Namespace: "ns-0", Name: "y"}})
	r := c.next()
	if got := joined(r.GetRemovedResources()); got != "outbound|7070||y.ns-0.svc.cluster.local,outbound|80||y.ns-0.svc.cluster.local" {
		t.Fatalf("removing y removed %q, want its two clusters", got)
	}
	if len(r.GetResources()) != 0 {
		t.Fatalf("removing y sent %q too", joined(deltaNames(r)))
	}
}

// TestDeltaACKAfterUnansweredPushesRebasesTheStream: the ACK that sends
// what two pushes changed while the stream had not answered its last
// response leaves the stream's map empty too.
func TestDeltaACKAfterUnansweredPushesRebasesTheStream(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	c, _ := ackedDeltaCDS(t, ts, node(sidecarID, nil))
	apply(t, store, worldtest.Service("ns-0", "v", "10.96.8.9"))
	rv := c.next()
	for i, svc := range []string{"p", "q"} {
		apply(t, store, worldtest.Service("ns-0", svc, fmt.Sprintf("10.96.8.%d", 10+i)))
		eventually(t, "the push adding "+svc+" to reach the stream", streamHasCluster(ts, "outbound|80||"+svc+".ns-0.svc.cluster.local"))
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: rv.GetNonce()})
	r := c.next()
	if got, want := joined(deltaNames(r)), "outbound|7070||p.ns-0.svc.cluster.local,outbound|7070||q.ns-0.svc.cluster.local,"+
		"outbound|80||p.ns-0.svc.cluster.local,outbound|80||q.ns-0.svc.cluster.local"; got != want {
		t.Fatalf("the ACK after p and q were added sent %q, want %q", got, want)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce()})
	if n, inBase := clusterOverrides(t, ts, "outbound|80||q.ns-0.svc.cluster.local"); n != 0 || !inBase {
		t.Fatalf("after the ACK that sent p and q the stream's map holds %d names, its base holds q: %v; want 0, true", n, inBase)
	}
}

// streamHasCluster reports whether the configuration of ts's (only)
// stream holds the cluster name.
func streamHasCluster(ts *testServer, name string) func() bool {
	return func() bool {
		found := false
		ts.s.conns.Range(func(_, v any) bool {
			c := v.(*conn)
			c.mu.Lock()
			defer c.mu.Unlock()
			found = c.cfg != nil && c.cfg.Get(gen.ClusterType, name) != nil
			return false
		})
		return found
	}
}

// clusterOverrides reports the size of the CDS map of ts's (only) stream
// once its watch for the next push is open (the last ACK was handled),
// and whether its base holds name.
func clusterOverrides(t *testing.T, ts *testServer, name string) (n int, inBase bool) {
	t.Helper()
	eventually(t, "the ACK to open the next watch", func() bool {
		open := false
		ts.s.conns.Range(func(_, v any) bool {
			c := v.(*conn)
			c.mu.Lock()
			defer c.mu.Unlock()
			st := c.of(gen.ClusterType)
			open = st.delta != nil
			n, inBase = len(st.dsub.returned), st.base.has(name)
			return false
		})
		return open
	})
	return n, inBase
}
