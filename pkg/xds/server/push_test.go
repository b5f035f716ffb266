package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
	"github.com/meshplane/discovery/pkg/xds/proxystatus"
)

// syncedClient subscribes to every cluster and its endpoints and
// acknowledges what it receives.
func syncedClient(t *testing.T, ts *testServer, id string) *sotwClient {
	t.Helper()
	c := newSotwClient(t, dial(t, ts.addr), node(id, nil))
	c.send(gen.ClusterType, nil, "", "", "")
	cds := c.next()
	c.ack(cds, nil)
	var eds []string
	for _, a := range cds.GetResources() {
		var cl clusterv3.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			t.Fatal(err)
		}
		if cl.GetType() == clusterv3.Cluster_EDS {
			eds = append(eds, cl.GetEdsClusterConfig().GetServiceName())
		}
	}
	c.send(gen.EndpointType, eds, "", "", "")
	r := c.next()
	c.ack(r, eds)
	return c
}

func withExportTo(ev model.Event, exportTo string) model.Event {
	svc := ev.Object.(*corev1.Service)
	svc.Annotations = map[string]string{model.AnnotationExportTo: exportTo}
	return ev
}

func TestEndpointChangeSendsOnlyEDSToProxiesThatSeeIt(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	apply(t, store,
		worldtest.Service("ns-a", "shared", "10.96.0.1"), worldtest.Slice("ns-a", "shared", "10.1.0.1"),
		withExportTo(worldtest.Service("ns-a", "private", "10.96.0.2"), "."), worldtest.Slice("ns-a", "private", "10.1.0.2"))
	ts := startServer(t, store)
	p1 := syncedClient(t, ts, "sidecar~10.9.0.1~p1.ns-a~ns-a.svc.cluster.local")
	p2 := syncedClient(t, ts, "sidecar~10.9.0.2~p2.ns-a~ns-a.svc.cluster.local")
	p3 := syncedClient(t, ts, "sidecar~10.9.0.3~p3.ns-b~ns-b.svc.cluster.local")
	before := map[string]float64{}
	for _, typ := range []string{"cds", "eds", "lds", "rds"} {
		before[typ] = ts.counter(t, "pilot_xds_pushes", "type", typ)
	}

	apply(t, store, worldtest.Slice("ns-a", "private", "10.1.0.2", "10.1.0.3"))
	want := "outbound|7070||private.ns-a.svc.cluster.local,outbound|80||private.ns-a.svc.cluster.local"
	for _, c := range []*sotwClient{p1, p2} {
		r := c.next()
		if r.GetTypeUrl() != gen.EndpointType || joined(names(t, r)) != want {
			t.Fatalf("proxy in ns-a got %s %v, want EDS %s", r.GetTypeUrl(), names(t, r), want)
		}
	}
	eventually(t, "two EDS responses to be counted", func() bool {
		return ts.counter(t, "pilot_xds_pushes", "type", "eds") == before["eds"]+2
	})
	for _, typ := range []string{"cds", "lds", "rds"} {
		if got := ts.counter(t, "pilot_xds_pushes", "type", typ); got != before[typ] {
			t.Errorf("pilot_xds_pushes{type=%s} went from %v to %v on an endpoint-only change", typ, before[typ], got)
		}
	}
	// p3 cannot see "private": its next response is about "shared".
	apply(t, store, worldtest.Slice("ns-a", "shared", "10.1.0.9"))
	r := p3.next()
	if got := joined(names(t, r)); got != "outbound|7070||shared.ns-a.svc.cluster.local,outbound|80||shared.ns-a.svc.cluster.local" {
		t.Fatalf("proxy in ns-b got %v, want only shared's endpoints", got)
	}
	eventually(t, "push_status to record both pushes as EDS-only", func() bool {
		rows := ts.s.history.records()
		if len(rows) < 2 {
			return false
		}
		a, b := rows[len(rows)-2], rows[len(rows)-1]
		a.mu.Lock()
		defer a.mu.Unlock()
		b.mu.Lock()
		defer b.mu.Unlock()
		return a.Full == 0 && a.EDS == 2 && b.Full == 0 && b.EDS == 3 && b.Duration != ""
	})
}

func TestSlowProxiesAreBoundedAndDoNotDelayOthers(t *testing.T) {
	t.Run("a proxy that never acknowledges is disconnected after MaxUnackedPushes", func(t *testing.T) {
		store := meshStore(t, 2)
		ts := startServer(t, store, func(o *Options) { o.MaxUnackedPushes = 3 })
		silent := newSotwClient(t, dial(t, ts.addr), node("sidecar~10.9.0.7~silent.ns-0~ns-0.svc.cluster.local", nil))
		silent.send(gen.ClusterType, nil, "", "", "")
		silent.next() // and never answer
		good := syncedClient(t, ts, sidecarID)
		for i := 0; i < 6; i++ {
			apply(t, store, worldtest.Service("ns-0", fmt.Sprintf("more-%d", i), fmt.Sprintf("10.96.7.%d", i+1)))
			r := good.next()
			if r.GetTypeUrl() != gen.ClusterType {
				t.Fatalf("push %d: got %s, want CDS", i, r.GetTypeUrl())
			}
			good.ack(r, nil)
			// The new clusters' endpoints follow.
		}
		select {
		case err := <-silent.errc:
			if !strings.Contains(err.Error(), "did not acknowledge") {
				t.Errorf("silent proxy's stream ended with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the silent proxy's stream was not closed")
		}
		if got := ts.counter(t, "discovery_xds_streams_closed_total", "reason", "unacked"); got != 1 {
			t.Errorf("streams closed for not acknowledging: %v, want 1", got)
		}
	})

	t.Run("a proxy that does not read is disconnected after the send timeout", func(t *testing.T) {
		store := model.NewStore(model.StoreOptions{})
		apply(t, store, worldtest.Mesh(1000, 10, 1)...)
		ts := startServer(t, store, func(o *Options) { o.SendTimeout = 300 * time.Millisecond })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stuck, err := discovery.NewAggregatedDiscoveryServiceClient(dial(t, ts.addr)).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Ask for everything and never read: the ~1 MB answer exceeds the
		// flow-control windows and the server's Send blocks.
		for _, typ := range []string{gen.ClusterType, gen.ListenerType} {
			if err := stuck.Send(&discovery.DiscoveryRequest{Node: node("sidecar~10.9.0.8~stuck.ns-0~ns-0.svc.cluster.local", nil), TypeUrl: typ}); err != nil {
				t.Fatal(err)
			}
		}
		good := syncedClient(t, ts, sidecarID)
		eventually(t, "the stuck stream to be closed", func() bool {
			return ts.counter(t, "discovery_xds_streams_closed_total", "reason", "send_timeout") == 1
		})
		apply(t, store, worldtest.Slice("ns-0", "svc-0", "10.1.0.99"))
		if r := good.next(); r.GetTypeUrl() != gen.EndpointType {
			t.Fatalf("reading proxy got %s after the stuck one was closed, want EDS", r.GetTypeUrl())
		}
		cancel()
	})

	// Delta streams run in gRPC's handler goroutine and watch their
	// streamCtl themselves (guardedDelta): each way a stream is killed
	// must still end it.
	t.Run("a delta proxy that never acknowledges is disconnected after MaxUnackedPushes", func(t *testing.T) {
		store := meshStore(t, 2)
		ts := startServer(t, store, func(o *Options) { o.MaxUnackedPushes = 3 })
		silent := newDeltaClient(t, ts)
		silent.send(&discovery.DeltaDiscoveryRequest{Node: node("sidecar~10.9.0.7~silent.ns-0~ns-0.svc.cluster.local", nil), TypeUrl: gen.ClusterType})
		silent.next() // and never answer
		good := syncedClient(t, ts, sidecarID)
		for i := 0; i < 6; i++ {
			apply(t, store, worldtest.Service("ns-0", fmt.Sprintf("more-%d", i), fmt.Sprintf("10.96.7.%d", i+1)))
			good.ack(good.next(), nil) // one push at a time
		}
		select {
		case err := <-silent.errc:
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "did not acknowledge") {
				t.Errorf("silent proxy's stream ended with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the silent proxy's stream was not closed")
		}
	})

	t.Run("a delta proxy that does not read is disconnected after the send timeout", func(t *testing.T) {
		ts := startServer(t, bigMesh(t), func(o *Options) { o.SendTimeout = 300 * time.Millisecond })
		stuck := stuckDelta(t, ts)
		select {
		case err := <-stuck:
			if status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Unavailable {
				t.Errorf("stuck stream ended with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stuck stream was not closed")
		}
		if got := ts.counter(t, "discovery_xds_streams_closed_total", "reason", "send_timeout"); got != 1 {
			t.Errorf("streams closed for not reading: %v, want 1", got)
		}
	})

	t.Run("a delta stream blocked in a send ends when drained, with no send timeout", func(t *testing.T) {
		ts := startServer(t, bigMesh(t), func(o *Options) { o.SendTimeout = 0 })
		stuck := stuckDelta(t, ts)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n := ts.s.Drain(ctx, 0); n != 1 {
			t.Fatalf("drained %d streams, want 1", n)
		}
		select {
		case err := <-stuck:
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("drained stream ended with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the drained stream was not closed")
		}
	})
}

// bigMesh is a store whose listeners and clusters, about 1 MB, exceed
// gRPC's flow-control windows.
func bigMesh(t *testing.T) *model.Store {
	store := model.NewStore(model.StoreOptions{})
	apply(t, store, worldtest.Mesh(1000, 10, 1)...)
	return store
}

// stuckDelta opens a delta stream that asks for every cluster and
// listener and does not read, so that the server's send blocks: its
// flow-control windows are fixed at 64 KB (no growth from the
// bandwidth-delay estimate). Once the server has ended the stream (its
// conn is gone), the client reads what was queued and returns the
// stream's end on the channel.
func stuckDelta(t *testing.T, ts *testServer) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cc := dial(t, ts.addr, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := node("sidecar~10.9.0.8~stuck.ns-0~ns-0.svc.cluster.local", nil)
	for _, typ := range []string{gen.ClusterType, gen.ListenerType} {
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: typ}); err != nil {
			t.Fatal(err)
		}
	}
	// The listeners' response is handed to gRPC after the clusters',
	// which exceeded the windows: its send blocks.
	eventually(t, "the stuck stream's listeners to be sent", func() bool {
		for _, st := range ts.s.Syncz() {
			if st.Node == n.GetId() && st.ListenerSent != "" {
				return true
			}
		}
		return false
	})
	ended := make(chan error, 1)
	go func() {
		for streams(ts) != 0 {
			time.Sleep(10 * time.Millisecond)
		}
		for {
			if _, err := st.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	return ended
}

// streams counts the server's open streams.
func streams(ts *testServer) int {
	n := 0
	ts.s.conns.Range(func(any, any) bool { n++; return true })
	return n
}

func TestDebugHandlers(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	syncedClient(t, ts, sidecarID)
	mux := http.NewServeMux()
	ts.s.RegisterDebug(mux)
	web := httptest.NewServer(mux)
	defer web.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	tests := map[string]struct {
		path     string
		wantCode int
		want     []string
	}{
		"syncz lists the proxy with acked versions": {"/debug/syncz", 200, []string{sidecarID, `"ackedVersion"`, `"eds"`}},
		"config_dump shows the proxy's config in Envoy's shape": {"/debug/config_dump?proxyID=" + sidecarID, 200, []string{
			"type.googleapis.com/envoy.admin.v3.ClustersConfigDump", "dynamicActiveClusters", "virtualOutbound", "EndpointsConfigDump",
		}},
		"config_dump without proxyID is a bad request": {"/debug/config_dump", 400, []string{"missing proxyID"}},
		"config_dump of an unknown proxy is not found": {"/debug/config_dump?proxyID=nope", 404, []string{"no connected proxy"}},
		"push_status lists pushes with their reasons":  {"/debug/push_status", 200, []string{`"reasons"`, `"Service": 1`}},
	}
	t.Run("proxy-status reads syncz and shows the proxy in sync", func(t *testing.T) {
		var rows []proxystatus.Proxy
		eventually(t, "both acknowledgements to show", func() bool {
			var err error
			if rows, err = proxystatus.Fetch(context.Background(), web.Client(), web.URL); err != nil {
				t.Fatal(err)
			}
			return len(rows) == 1 && proxystatus.State(rows[0].Types["cds"]) == "SYNCED" && proxystatus.State(rows[0].Types["eds"]) == "SYNCED"
		})
		if rows[0].ID != sidecarID || proxystatus.State(rows[0].Types["lds"]) != "NOT SENT" {
			t.Errorf("rows %+v, want the proxy, with no LDS sent", rows)
		}
	})
	apply(t, store, worldtest.Service("ns-0", "extra", "10.96.3.3"))
	eventually(t, "the push to be recorded", func() bool { return len(ts.s.history.records()) > 0 })
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, body := get(tc.path)
			if code != tc.wantCode {
				t.Fatalf("status %d, want %d: %s", code, tc.wantCode, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %q:\n%.2000s", w, body)
				}
			}
			if code == 200 && !json.Valid([]byte(body)) {
				t.Errorf("body is not JSON")
			}
		})
	}
}

func TestVirtualServiceEditSendsOnlyThatHostsRoutes(t *testing.T) {
	store := meshStore(t, 20)
	ts := startServer(t, store)
	c := syncedClient(t, ts, sidecarID)
	c.send(gen.ListenerType, nil, "", "", "")
	lds := c.next()
	c.ack(lds, nil)
	var routes []string
	for _, s := range store.World().Services() {
		routes = append(routes, gen.RouteName(s.Hostname, 80), gen.RouteName(s.Hostname, 7070))
	}
	c.send(gen.RouteType, routes, "", "", "")
	rds := c.next()
	if len(rds.GetResources()) != 40 {
		t.Fatalf("first RDS response has %d routes, want 40", len(rds.GetResources()))
	}
	c.ack(rds, routes)
	before := map[string]float64{}
	for _, typ := range []string{"cds", "eds", "lds", "rds"} {
		before[typ] = ts.counter(t, "pilot_xds_pushes", "type", typ)
	}

	apply(t, store, vsEdit("ns-1", "svc-3", "1", 70))
	r := c.next()
	if r.GetTypeUrl() != gen.RouteType || joined(names(t, r)) != "svc-3.ns-1.svc.cluster.local:7070,svc-3.ns-1.svc.cluster.local:80" {
		t.Fatalf("after the edit got %s %v, want only svc-3's two routes", gen.ShortType(r.GetTypeUrl()), names(t, r))
	}
	size := 0
	for _, a := range r.GetResources() {
		size += len(a.GetValue())
	}
	if size > 4096 {
		t.Errorf("the edit sent %d bytes of routes, want a few hundred", size)
	}
	c.ack(r, routes)
	eventually(t, "the RDS response to be counted", func() bool { return ts.counter(t, "pilot_xds_pushes", "type", "rds") == before["rds"]+1 })
	for _, typ := range []string{"cds", "eds", "lds"} {
		if got := ts.counter(t, "pilot_xds_pushes", "type", typ); got != before[typ] {
			t.Errorf("pilot_xds_pushes{type=%s} went from %v to %v on a VirtualService edit", typ, before[typ], got)
		}
	}
}
