package grpctest

import (
	"context"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// CallWith makes one RPC with the given request headers (name, value
// pairs) and returns the address of the backend that served it.
func (c *Client) CallWith(headers ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, headers...)
	var p peer.Peer
	if _, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true)); err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}
