package compat

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

// startBackend starts a gRPC server on 127.0.0.1 that answers health checks
// and returns its address and port; it stops when t ends.
func startBackend(t *testing.T) (string, int32) {
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
	return lis.Addr().String(), portOf(t, lis.Addr().String())
}

// xdsClient is a grpc-go client whose target is resolved through xDS.
type xdsClient struct {
	health healthpb.HealthClient
}

// dialXDS connects to target with grpc-go's xDS resolver bootstrapped from
// bootstrap. Backends at a host in alias are dialed at its alias.
func dialXDS(t *testing.T, bootstrap []byte, target string, alias map[string]string) *xdsClient {
	t.Helper()
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatalf("grpc-go refuses pilot-agent's bootstrap: %v\n%s", err, bootstrap)
	}
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		to, ok := alias[host]
		if !ok {
			return nil, fmt.Errorf("test dialer: %s is not an aliased test address", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", net.JoinHostPort(to, port))
	}
	cc, err := grpc.NewClient(target, grpc.WithResolvers(resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &xdsClient{health: healthpb.NewHealthClient(cc)}
}

// call makes one RPC and returns the address of the backend that served it.
func (c *xdsClient) call() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true)); err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}

// eventually calls until an RPC reaches want, failing t after 60 s or when
// a watched child exits.
func (c *xdsClient) eventually(t *testing.T, want string, watch ...*child) {
	t.Helper()
	var got string
	var err error
	deadline := time.Now().Add(60 * time.Second)
	for {
		if got, err = c.call(); err == nil && got == want {
			return
		}
		for _, w := range watch {
			if w.exited() {
				t.Fatalf("%s exited (%v) before an RPC reached %s (last: %q, %v)", w.name, w.cmd.ProcessState, want, got, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no RPC through %s reached %s within 60s: last went to %q (%v)", grpcTarget, want, got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
