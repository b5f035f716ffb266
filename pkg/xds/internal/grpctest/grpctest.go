// Package grpctest provides real gRPC peers for the xds tests: backends on
// loopback and grpc-go xDS clients bootstrapped to a test server.
package grpctest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"
)

// Backend starts a gRPC server on 127.0.0.1 that answers health checks and
// returns its address and port; it stops when t ends.
func Backend(t testing.TB) (string, int32) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	done := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(done) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String(), int32(lis.Addr().(*net.TCPAddr).Port)
}

// Bootstrap is a grpc-go xDS bootstrap for a proxyless client of namespace
// ns talking to the xDS server at addr, with the node Istio's grpc-agent
// would send.
func Bootstrap(addr, ns string) []byte {
	return []byte(fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "sidecar~127.0.0.1~e2e-client.%s~%s.svc.cluster.local", "metadata": {"GENERATOR": "grpc", "NAMESPACE": %q}}
}`, addr, ns, ns, ns))
}

// DocumentationIP is an address from TEST-NET-1 (RFC 5737), never routed.
// Tests that must name a backend by a non-loopback IP (the API server
// refuses loopback endpoints) use it with an alias to 127.0.0.1: the test
// dialer connects to loopback and nothing is ever sent to this address.
const DocumentationIP = "192.0.2.10"

// Client is a grpc-go client dialed through xDS.
type Client struct {
	cc     *grpc.ClientConn
	health healthpb.HealthClient
}

// Dial connects to target (xds:///HOST:PORT) with a resolver bootstrapped
// from bootstrap; the connection closes when t ends. Endpoint hosts found
// in alias are dialed at their alias instead (see DocumentationIP).
func Dial(t testing.TB, bootstrap []byte, target string, alias ...map[string]string) *Client {
	t.Helper()
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.DialOption{grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials())}
	if len(alias) > 0 {
		m := alias[0]
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			to, ok := m[host]
			if !ok {
				return nil, fmt.Errorf("test dialer: %s is not an aliased test address", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(to, port))
		}))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &Client{cc: cc, health: healthpb.NewHealthClient(cc)}
}

// Call makes one RPC and returns the address of the backend that served it.
func (c *Client) Call() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true)); err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}

// Eventually calls until an RPC reaches want, failing t after 30 s.
func (c *Client) Eventually(t testing.TB, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	var err error
	for time.Now().Before(deadline) {
		if got, err = c.Call(); err == nil && got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("RPCs did not reach %s within 30s: last went to %q (%v)", want, got, err)
}
