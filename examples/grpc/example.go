package grpcexample

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"

	// Registers the xds:/// resolver and the xDS balancers.
	_ "google.golang.org/grpc/xds"
)

// Target is the name the client dials.
const Target = "xds:///echo.demo.svc.cluster.local:7070"

// Bootstrap is grpc-go's xDS bootstrap for a proxyless client in namespace
// demo that gets its configuration from the xDS server at xdsAddr. The node
// ID and GENERATOR are what Istio's grpc-agent would send.
func Bootstrap(xdsAddr string) []byte {
	return []byte(fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {
    "id": "sidecar~127.0.0.1~example-client.demo~demo.svc.cluster.local",
    "metadata": {"GENERATOR": "grpc", "NAMESPACE": "demo"}
  }
}
`, xdsAddr))
}

// WriteBootstrap writes Bootstrap(xdsAddr) to path.
func WriteBootstrap(path, xdsAddr string) error {
	return os.WriteFile(path, Bootstrap(xdsAddr), 0o644)
}

// Serve runs a gRPC backend on lis until ctx ends. It answers the standard
// health service, which the client uses as its echo.
func Serve(ctx context.Context, lis net.Listener, log *slog.Logger) error {
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		log.Info("request", "method", info.FullMethod)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case <-ctx.Done():
		gs.GracefulStop()
		return nil
	case err := <-errc:
		return err
	}
}

// Client calls the echo service through xDS.
type Client struct {
	cc     *grpc.ClientConn
	health healthpb.HealthClient
}

// Dial connects to Target. Without a resolver the process-wide xds
// resolver reads the bootstrap named by GRPC_XDS_BOOTSTRAP.
func Dial(r resolver.Builder) (*Client, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if r != nil {
		opts = append(opts, grpc.WithResolvers(r))
	}
	cc, err := grpc.NewClient(Target, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{cc: cc, health: healthpb.NewHealthClient(cc)}, nil
}

// Call makes one request and returns the address of the backend that
// answered.
func (c *Client) Call(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true)); err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }
