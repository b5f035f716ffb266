package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/streamauth"
)

// istioctlNode is the node istioctl sends for its debug requests: adsc's
// default node ID (namespace "default" whatever its own), and the
// namespace and service account of the token it calls with.
func istioctlNode(ns string) map[string]any {
	return map[string]any{"GENERATOR": "event", "NAMESPACE": ns, "SERVICE_ACCOUNT": "default"}
}

const istioctlID = "sidecar~10.0.0.99~test-1.default~default.svc.cluster.local"

// startDebugServer serves xDS on two loopback ports as serve does: secure
// authenticates every stream (callers connect with dialAs), plain nobody.
func startDebugServer(t *testing.T) (ts *testServer, plain string) {
	t.Helper()
	opts := DefaultOptions()
	opts.DebounceAfter, opts.DebounceMax = 10*time.Millisecond, time.Second
	opts.SystemNamespace = "istio-system"
	opts.Instance = Instance{ID: "discovery-7d9c5-x2k8q", Version: "1.2.3", GitRevision: "abc", GoVersion: "go1.26", BuildStatus: "Clean", GitTag: "1.2.3"}
	reg := prometheus.NewRegistry()
	log := testLog()
	s, err := New(opts, meshStore(t, 1), log, reg)
	if err != nil {
		t.Fatal(err)
	}
	guard := streamauth.New(testAuthn{}, log, reg)
	secure := serveOn(t, s, grpc.ChainStreamInterceptor(guard.StreamInterceptor()))
	plain = serveOn(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() { _ = s.Start(ctx); close(started) }()
	t.Cleanup(func() { cancel(); <-started })
	return &testServer{s: s, addr: secure, reg: reg}, plain
}

// connectSidecar connects a proxy of namespace ns and waits until it has
// acknowledged its clusters.
func connectSidecar(t *testing.T, addr, id, ns string) {
	t.Helper()
	c := newSotwClient(t, dialAs(t, addr, ns), node(id, map[string]any{"ISTIO_VERSION": "1.32.0", "CLUSTER_ID": "Kubernetes"}))
	c.send(gen.ClusterType, nil, "", "", "")
	r := c.next()
	c.ack(r, nil)
}

// debugStream is a debug client's stream and its first response.
type debugStream struct {
	*sotwClient
	last *discovery.DiscoveryResponse
}

// debugAsk opens a debug stream as a caller of callerNS and returns the
// first response, or the stream's error.
func debugAsk(t *testing.T, cc *grpc.ClientConn, callerNS, typeURL string, names ...string) (*debugStream, error) {
	t.Helper()
	c := &debugStream{sotwClient: newSotwClient(t, cc, node(istioctlID, istioctlNode(callerNS)))}
	c.send(typeURL, names, "", time.Now().String(), "") // adsc sends a nonce even first
	select {
	case r := <-c.recv:
		c.last = r
		return c, nil
	case err := <-c.errc:
		return c, err
	case <-time.After(10 * time.Second):
		t.Fatal("no debug response within 10s")
	}
	return c, nil
}

func syncz(t *testing.T, c *debugStream) []*statusv3.ClientConfig {
	t.Helper()
	var out []*statusv3.ClientConfig
	for _, a := range c.last.GetResources() {
		cc := &statusv3.ClientConfig{}
		if err := a.UnmarshalTo(cc); err != nil {
			t.Fatal(err)
		}
		out = append(out, cc)
	}
	return out
}

// waitACKed waits until syncz shows n proxies whose clusters are SYNCED:
// connectSidecar returns once its ACK is sent, not once the server has
// read it.
func waitACKed(t *testing.T, addr string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		synced := 0
		if c, err := debugAsk(t, dialAs(t, addr, "istio-system/default"), "istio-system", TypeDebugSyncz); err == nil {
			for _, cc := range syncz(t, c) {
				for _, x := range cc.GetGenericXdsConfigs() {
					if x.GetTypeUrl() == gen.ClusterType && x.GetConfigStatus() == statusv3.ConfigStatus_SYNCED {
						synced++
					}
				}
			}
		}
		if synced >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d proxies ACKed their clusters within 10s", synced, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func proxyIDs(cfgs []*statusv3.ClientConfig) string {
	var ids []string
	for _, cc := range cfgs {
		ids = append(ids, cc.GetNode().GetId())
	}
	return strings.Join(ids, ",")
}

func TestIstioDebugTypes(t *testing.T) {
	ts, plain := startDebugServer(t)
	connectSidecar(t, ts.addr, "sidecar~10.1.0.1~reviews-1.ns-a~ns-a.svc.cluster.local", "ns-a")
	connectSidecar(t, ts.addr, "sidecar~10.1.0.2~ratings-1.ns-b~ns-b.svc.cluster.local", "ns-b")
	waitACKed(t, ts.addr, 2)

	t.Run("syncz lists every proxy for a caller of the control plane's namespace, in istiod's shape", func(t *testing.T) {
		c, err := debugAsk(t, dialAs(t, ts.addr, "istio-system/default"), "istio-system", TypeDebugSyncz)
		if err != nil {
			t.Fatal(err)
		}
		var cp struct {
			Component, ID string
			Info          struct{ Version string }
		}
		if err := json.Unmarshal([]byte(c.last.GetControlPlane().GetIdentifier()), &cp); err != nil ||
			cp.Component != "istiod" || cp.ID != "discovery-7d9c5-x2k8q" || cp.Info.Version != "1.2.3" {
			t.Errorf("control plane identifier %q (%v)", c.last.GetControlPlane().GetIdentifier(), err)
		}
		cfgs := syncz(t, c)
		if got := proxyIDs(cfgs); got != "ratings-1.ns-b,reviews-1.ns-a" {
			t.Fatalf("syncz lists %q, want both proxies as <pod>.<namespace> (and not istioctl itself)", got)
		}
		md := cfgs[1].GetNode().GetMetadata().GetFields()
		if md["NAMESPACE"].GetStringValue() != "ns-a" || md["ISTIO_VERSION"].GetStringValue() != "1.32.0" || md["CLUSTER_ID"].GetStringValue() != "Kubernetes" {
			t.Errorf("node metadata %v", md)
		}
		var cds *statusv3.ClientConfig_GenericXdsConfig
		for _, x := range cfgs[1].GetGenericXdsConfigs() {
			if x.GetTypeUrl() == gen.ClusterType {
				cds = x
			}
		}
		if cds == nil || cds.GetConfigStatus() != statusv3.ConfigStatus_SYNCED || cds.GetLastUpdated() == nil {
			t.Errorf("clusters of reviews-1: %v, want SYNCED", cds)
		}
		// An ACK is not answered again: debug responses are not pushed.
		c.ack(c.last, nil)
		select {
		case r := <-c.recv:
			t.Errorf("a second response to an ACK: %v", r)
		case <-time.After(200 * time.Millisecond):
		}
	})
	t.Run("syncz shows a caller of another namespace only that namespace's proxies", func(t *testing.T) {
		c, err := debugAsk(t, dialAs(t, ts.addr, "ns-a/default"), "ns-a", TypeDebugSyncz)
		if err != nil {
			t.Fatal(err)
		}
		if got := proxyIDs(syncz(t, c)); got != "reviews-1.ns-a" {
			t.Errorf("syncz for a caller of ns-a lists %q", got)
		}
	})
	t.Run("config_dump of <pod>.<namespace> is the proxy's configuration", func(t *testing.T) {
		c, err := debugAsk(t, dialAs(t, ts.addr, "istio-system/default"), "istio-system", TypeDebugConfigDump, "reviews-1.ns-a")
		if err != nil {
			t.Fatal(err)
		}
		clusters := &adminv3.ClustersConfigDump{}
		if len(c.last.GetResources()) < 4 || c.last.GetResources()[0].UnmarshalTo(clusters) != nil || len(clusters.GetDynamicActiveClusters()) == 0 {
			t.Errorf("config_dump: %d resources, clusters %v", len(c.last.GetResources()), clusters)
		}
	})
	t.Run("config_dump of another namespace's proxy is empty for a caller of ns-b", func(t *testing.T) {
		c, err := debugAsk(t, dialAs(t, ts.addr, "ns-b/default"), "ns-b", TypeDebugConfigDump, "reviews-1.ns-a")
		if err != nil || len(c.last.GetResources()) != 0 {
			t.Errorf("config_dump across namespaces: %v, %d resources", err, len(c.last.GetResources()))
		}
	})
	t.Run("a debug page over xDS for the control plane's namespace only", func(t *testing.T) {
		ts.s.debugMux = nil // no monitoring mux in this test: Unavailable, but authorized
		_, err := debugAsk(t, dialAs(t, ts.addr, "ns-a/default"), "ns-a", TypeDebug, "syncz")
		if grpcstatus.Code(err) != codes.PermissionDenied {
			t.Errorf("istio.io/debug for a caller of ns-a: %v, want PermissionDenied", err)
		}
		_, err = debugAsk(t, dialAs(t, ts.addr, "istio-system/default"), "istio-system", TypeDebug, "syncz")
		if grpcstatus.Code(err) != codes.Unavailable {
			t.Errorf("istio.io/debug for a caller of istio-system: %v, want Unavailable (no pages registered)", err)
		}
	})

	refused := map[string]struct {
		cc       *grpc.ClientConn
		callerNS string // the node's NAMESPACE
		want     codes.Code
	}{
		"the plaintext port answers no debug request":                  {dial(t, plain), "istio-system", codes.Unauthenticated},
		"a node that claims another namespace than the caller's":       {dialAs(t, ts.addr, "ns-a/default"), "istio-system", codes.PermissionDenied},
		"a node that claims another service account than the caller's": {dialAs(t, ts.addr, "istio-system/other"), "istio-system", codes.PermissionDenied},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			_, err := debugAsk(t, tc.cc, tc.callerNS, TypeDebugSyncz)
			if grpcstatus.Code(err) != tc.want {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("a debug stream is no proxy: it gets no configuration", func(t *testing.T) {
		c, err := debugAsk(t, dialAs(t, ts.addr, "istio-system/default"), "istio-system", TypeDebugSyncz)
		if err != nil {
			t.Fatal(err)
		}
		c.send(gen.ClusterType, nil, "", "", "")
		select {
		case err := <-c.errc:
			if grpcstatus.Code(err) != codes.InvalidArgument {
				t.Errorf("clusters on a debug stream: %v, want InvalidArgument", err)
			}
		case r := <-c.recv:
			t.Errorf("a debug stream was sent %s", r.GetTypeUrl())
		case <-time.After(10 * time.Second):
			t.Error("no answer within 10s")
		}
		if n := len(ts.s.Syncz()); n != 2 {
			t.Errorf("/debug/syncz has %d rows, want the 2 proxies", n)
		}
	})
}
