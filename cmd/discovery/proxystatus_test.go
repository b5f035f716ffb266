package main

import (
	"context"
	"os/exec"
	"regexp"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// syncedRow is the proxy's row with CDS (the first type column) SYNCED.
var syncedRow = regexp.MustCompile(`(?m)^ratings-0\.shop\s+sidecar\s+SYNCED\s`)

// proxy-status shows a proxy that acknowledged its clusters as SYNCED.
func TestProxyStatusShowsAConnectedProxy(t *testing.T) {
	dir := reviewsConfigDir(t)
	plain := freePort(t)
	p := startServe(t, "--config-dir", dir, "--ca-dir", t.TempDir(), "--grpc-address", plain)
	p.waitReady(t)
	conn, err := grpc.NewClient(plain, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "sidecar~10.1.0.9~ratings-0.shop~shop.svc.cluster.local"}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
		t.Fatal(err)
	}
	var out string
	defer func() {
		if t.Failed() {
			t.Logf("last proxy-status output:\n%s", out)
		}
	}()
	waitFor(t, 10*time.Second, "proxy-status to show the proxy SYNCED", func() bool {
		b, err := exec.Command(discoveryBinary(t), "proxy-status", "--monitoring-url", "http://"+p.monitor).CombinedOutput()
		out = string(b)
		if err != nil {
			t.Logf("proxy-status: %v: %s", err, out)
		}
		return err == nil && syncedRow.MatchString(out)
	})
	t.Logf("proxy-status:\n%s", out)
}
