package server

import (
	"context"
	"sort"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
	"github.com/meshplane/discovery/pkg/xds/push"
)

const sidecarID = "sidecar~10.9.0.1~client.ns-0~ns-0.svc.cluster.local"

// matters reports whether a change of k, which made w, can alter what p
// is sent (push.ChangeMatters, with p's configuration generated from w).
func matters(t *testing.T, k model.Key, p *model.Proxy, w *model.World) bool {
	t.Helper()
	g, err := gen.New(gen.DefaultOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	cls, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return push.ChangeMatters(k, w, g.Proxy(w, p, cls))
}

func meshStore(t testing.TB, services int) *model.Store {
	t.Helper()
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(services, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	return store
}

func apply(t testing.TB, store *model.Store, evs ...model.Event) {
	t.Helper()
	if u, err := store.Apply(evs...); err != nil || u == nil {
		t.Fatalf("apply: update %v, error %v", u, err)
	}
}

func TestSotwAckAndNack(t *testing.T) {
	store := meshStore(t, 3)
	ts := startServer(t, store)
	c := newSotwClient(t, dial(t, ts.addr), node(sidecarID, map[string]any{"ISTIO_VERSION": "1.32.0"}))

	// Envoy's first CDS request names nothing: the legacy wildcard.
	c.send(gen.ClusterType, nil, "", "", "")
	v1 := c.next()
	if got := len(v1.GetResources()); got != 3*2+3 {
		t.Fatalf("first CDS response has %d clusters, want 9 (3 services x 2 ports + 3 fixed)", got)
	}
	if v1.GetVersionInfo() == "" || v1.GetNonce() == "" {
		t.Fatalf("response without version or nonce: %q %q", v1.GetVersionInfo(), v1.GetNonce())
	}
	c.ack(v1, nil)
	eventually(t, "the ACK to show in syncz", func() bool {
		rows := ts.s.Syncz()
		return len(rows) == 1 && rows[0].Types["cds"].AckedVersion == v1.GetVersionInfo()
	})

	t.Run("a NACK keeps the last good version and is not answered by a resend", func(t *testing.T) {
		apply(t, store, worldtest.Service("ns-1", "added", "10.96.9.1"))
		v2 := c.next()
		if v2.GetVersionInfo() == v1.GetVersionInfo() || len(v2.GetResources()) != 11 {
			t.Fatalf("after adding a service: version %q with %d clusters, want a new version with 11", v2.GetVersionInfo(), len(v2.GetResources()))
		}
		c.send(gen.ClusterType, nil, v1.GetVersionInfo(), v2.GetNonce(), "cluster rejected by test")
		eventually(t, "the NACK to be counted", func() bool {
			return ts.counter(t, "pilot_total_xds_rejects", "type", "cds") == 1 && ts.counter(t, "pilot_xds_cds_reject") == 1
		})
		row := ts.s.Syncz()[0].Types["cds"]
		if row.LastNACK == nil || row.LastNACK.Message != "cluster rejected by test" || row.AckedVersion != v1.GetVersionInfo() {
			t.Fatalf("syncz after NACK: %+v", row)
		}
		// The next response must be caused by the next change, not a resend
		// of the rejected one.
		apply(t, store, worldtest.Service("ns-1", "added-again", "10.96.9.2"))
		v3 := c.next()
		if v3.GetVersionInfo() == v2.GetVersionInfo() || len(v3.GetResources()) != 13 {
			t.Fatalf("after NACK and a change: version %q (rejected %q) with %d clusters, want a new version with 13",
				v3.GetVersionInfo(), v2.GetVersionInfo(), len(v3.GetResources()))
		}
		if got := ts.counter(t, "pilot_xds_pushes", "type", "cds"); got != 3 {
			t.Errorf("pilot_xds_pushes{type=cds} = %v, want 3 (no resend after the NACK)", got)
		}
	})
}

func TestSotwReconnectWithEarlierVersion(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	cc := dial(t, ts.addr)
	n := node(sidecarID, nil)
	first := newSotwClient(t, cc, n)
	first.send(gen.ClusterType, nil, "", "", "")
	old := first.next()
	first.ack(old, nil)
	first.cancel()
	eventually(t, "the first stream to close", func() bool { return len(ts.s.Syncz()) == 0 })

	apply(t, store, worldtest.Service("ns-0", "later", "10.96.9.9"))
	second := newSotwClient(t, cc, n)
	second.send(gen.ClusterType, nil, old.GetVersionInfo(), "", "")
	r := second.next()
	if r.GetVersionInfo() == old.GetVersionInfo() {
		t.Fatalf("reconnect presenting %q got the same version back", old.GetVersionInfo())
	}
	if !strings.Contains(joined(names(t, r)), "later.ns-0") {
		t.Errorf("reconnect response lacks the service added meanwhile: %v", names(t, r))
	}
}

func TestSotwNamedSubscriptionsAndUnknownType(t *testing.T) {
	store := meshStore(t, 3)
	ts := startServer(t, store)
	c := newSotwClient(t, dial(t, ts.addr), node(sidecarID, map[string]any{"GENERATOR": "grpc"}))

	c.send("type.googleapis.com/example.Unknown", []string{"x"}, "", "", "")
	if r := c.next(); r.GetTypeUrl() != "type.googleapis.com/example.Unknown" || len(r.GetResources()) != 0 {
		t.Fatalf("unknown type answered with %s and %d resources, want the same type and none", r.GetTypeUrl(), len(r.GetResources()))
	}
	want := gen.ClusterName(80, "", "svc-1.ns-1.svc.cluster.local")
	c.send(gen.EndpointType, []string{want}, "", "", "")
	r := c.next()
	if got := joined(names(t, r)); got != want {
		t.Fatalf("named EDS subscription answered with %q, want only %q", got, want)
	}
	c.ack(r, []string{want})

	// An endpoint change elsewhere sends nothing to this client; one to the
	// subscribed service sends exactly it.
	apply(t, store, worldtest.Slice("ns-0", "svc-0", "10.50.0.1"))
	apply(t, store, worldtest.Slice("ns-1", "svc-1", "10.50.0.2"))
	r2 := c.next()
	if got := joined(names(t, r2)); got != want || r2.GetTypeUrl() != gen.EndpointType {
		t.Fatalf("after endpoint changes got %s %q, want EDS %q only", r2.GetTypeUrl(), got, want)
	}
}

func TestMalformedNodeEndsTheStream(t *testing.T) {
	tests := map[string]struct {
		id      string
		meta    map[string]any
		wantMsg string
	}{
		"an ID with the wrong number of fields": {id: "sidecar~10.0.0.1", wantMsg: "TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN"},
		"no node ID at all":                     {id: "", wantMsg: "no node ID"},
		"LABELS that are not an object":         {id: sidecarID, meta: map[string]any{"LABELS": "app=x"}, wantMsg: "LABELS"},
	}
	store := meshStore(t, 1)
	ts := startServer(t, store)
	cc := dial(t, ts.addr)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newSotwClient(t, cc, node(tc.id, tc.meta))
			c.send(gen.ClusterType, nil, "", "", "")
			select {
			case err := <-c.errc:
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("stream error %v, want InvalidArgument mentioning %q", err, tc.wantMsg)
				}
			case r := <-c.recv:
				t.Fatalf("malformed node got a response: %v", r)
			}
		})
	}
}

// deltaClient is a raw delta ADS client.
type deltaClient struct {
	t      testing.TB
	stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	recv   chan *discovery.DeltaDiscoveryResponse
	errc   chan error
	cancel context.CancelFunc
}

func newDeltaClient(t testing.TB, ts *testServer) *deltaClient {
	t.Helper()
	return newDeltaClientOn(t, dial(t, ts.addr))
}

// newDeltaClientOn opens a delta ADS stream on cc.
func newDeltaClientOn(t testing.TB, cc *grpc.ClientConn) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &deltaClient{t: t, stream: stream, recv: make(chan *discovery.DeltaDiscoveryResponse, 100), errc: make(chan error, 1), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := stream.Recv()
			if err != nil {
				c.errc <- err
				return
			}
			c.recv <- r
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// ackedDeltaCDS opens a delta ADS stream as n, asks for clusters and
// acknowledges the first response, which it returns.
func ackedDeltaCDS(t testing.TB, ts *testServer, n *corev3.Node) (*deltaClient, *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	c := newDeltaClient(t, ts)
	c.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: gen.ClusterType})
	r := c.next()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce()})
	return c, r
}

func (c *deltaClient) send(req *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *deltaClient) next() *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r := <-c.recv:
		return r
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	}
	return nil
}

func deltaNames(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	sort.Strings(out)
	return out
}

func TestDelta(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	n := node(sidecarID, nil)
	c := newDeltaClient(t, ts)
	c.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: gen.ClusterType})
	r1 := c.next()
	if len(r1.GetResources()) != 2*2+3 {
		t.Fatalf("first delta CDS has %d clusters, want 7", len(r1.GetResources()))
	}
	have := map[string]string{}
	for _, res := range r1.GetResources() {
		have[res.GetName()] = res.GetVersion()
		var cl clusterv3.Cluster
		if err := res.GetResource().UnmarshalTo(&cl); err != nil || cl.GetName() != res.GetName() {
			t.Fatalf("resource %q does not hold its cluster: %v", res.GetName(), err)
		}
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r1.GetNonce()})

	t.Run("a deleted service is removed by name and nothing else is resent", func(t *testing.T) {
		apply(t, store, model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindService, Namespace: "ns-1", Name: "svc-1"}})
		r := c.next()
		want := "outbound|7070||svc-1.ns-1.svc.cluster.local,outbound|80||svc-1.ns-1.svc.cluster.local"
		if got := joined(r.GetRemovedResources()); got != want || len(r.GetResources()) != 0 {
			t.Fatalf("removed %q and sent %v, want removed %q and nothing sent", got, deltaNames(r), want)
		}
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce()})
	})

	t.Run("a NACK is counted and not answered by a resend", func(t *testing.T) {
		apply(t, store, worldtest.Service("ns-0", "new", "10.96.8.1"))
		r := c.next()
		if got := joined(deltaNames(r)); got != "outbound|7070||new.ns-0.svc.cluster.local,outbound|80||new.ns-0.svc.cluster.local" {
			t.Fatalf("delta after adding a service sent %q", got)
		}
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce(), ErrorDetail: statusProto("rejected")})
		eventually(t, "the delta NACK to be counted", func() bool { return ts.counter(t, "pilot_total_xds_rejects", "type", "cds") == 1 })
		apply(t, store, worldtest.Service("ns-0", "newer", "10.96.8.2"))
		r2 := c.next()
		if got := joined(deltaNames(r2)); got != "outbound|7070||newer.ns-0.svc.cluster.local,outbound|80||newer.ns-0.svc.cluster.local" {
			t.Fatalf("after NACK and a change, delta sent %q, want only the newer service", got)
		}
	})

	t.Run("a reconnect presenting current versions is sent nothing", func(t *testing.T) {
		c.cancel()
		c2 := newDeltaClient(t, ts)
		p, err := model.ParseProxy(sidecarID, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := newGen(t)
		cls, err := g.Class(store.World(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		pc := g.Proxy(store.World(), p, cls)
		cur := map[string]string{}
		for _, name := range pc.Names(gen.ClusterType) {
			cur[name] = pc.Get(gen.ClusterType, name).Hash
		}
		c2.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: gen.ClusterType, InitialResourceVersions: cur})
		r := c2.next()
		if len(r.GetResources()) != 0 || len(r.GetRemovedResources()) != 0 {
			t.Fatalf("reconnect with current versions got %v, removed %v", deltaNames(r), r.GetRemovedResources())
		}
	})
}

func TestDeltaNamedSubscription(t *testing.T) {
	store := meshStore(t, 3)
	ts := startServer(t, store)
	c := newDeltaClient(t, ts)
	want := gen.ClusterName(80, "", "svc-1.ns-1.svc.cluster.local")
	c.send(&discovery.DeltaDiscoveryRequest{Node: node(sidecarID, nil), TypeUrl: gen.EndpointType, ResourceNamesSubscribe: []string{want}})
	r := c.next()
	if got := joined(deltaNames(r)); got != want {
		t.Fatalf("named delta EDS subscription got %q, want %q", got, want)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResponseNonce: r.GetNonce()})
	apply(t, store, worldtest.Slice("ns-0", "svc-0", "10.50.0.1"))
	apply(t, store, worldtest.Slice("ns-1", "svc-1", "10.50.0.2"))
	r = c.next()
	if got := joined(deltaNames(r)); got != want || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("after endpoint changes got %q (removed %v), want only %q", got, r.GetRemovedResources(), want)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResponseNonce: r.GetNonce()})

	// Unsubscribing and subscribing again brings the resource back.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesUnsubscribe: []string{want}})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: []string{want}})
	r = c.next()
	if got := joined(deltaNames(r)); got != want {
		t.Fatalf("resubscribing got %q, want %q", got, want)
	}
}
