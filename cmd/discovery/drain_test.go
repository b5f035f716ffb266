package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// On SIGTERM the streams are closed one by one over the drain period, not
// all at once, new streams and connections are refused meanwhile, and the
// process exits 0.
func TestSIGTERMDrainsStreamsOverThePeriod(t *testing.T) {
	dir := reviewsConfigDir(t)
	const streams, period = 8, 4 * time.Second
	plain := freePort(t)
	p := startServe(t, "--config-dir", dir, "--ca-dir", t.TempDir(), "--grpc-address", plain, "--drain-period", period.String())
	p.waitReady(t)
	conn, err := grpc.NewClient(plain, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := discovery.NewAggregatedDiscoveryServiceClient(conn)
	open := func(i int) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
		st, err := client.StreamAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		node := &core.Node{Id: "sidecar~10.1.0." + string(rune('1'+i)) + "~p.shop~shop.svc.cluster.local"}
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
			// The server ended the stream before the send (a refusal
			// that wins the race): gRPC gives its status to Recv.
		}
		_, err = st.Recv()
		return st, err
	}
	closed := make(chan time.Time, streams)
	for i := range streams {
		st, err := open(i)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		go func() {
			for {
				if _, err := st.Recv(); err != nil {
					closed <- time.Now()
					return
				}
			}
		}()
	}
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	for range streams {
		select {
		case at := <-closed:
			times = append(times, at)
			if len(times) == 1 {
				// Draining: a new stream is refused, and so is a new
				// connection (the listener is closed and the open
				// connections told to go away), so that proxies move to
				// another replica instead of retrying here.
				if _, err := open(streams); status.Code(err) != codes.Unavailable {
					t.Errorf("a new stream while draining: %v; want Unavailable", err)
				}
				if c, err := net.DialTimeout("tcp", plain, time.Second); err == nil {
					c.Close()
					t.Error("a new connection was accepted while draining")
				}
			}
		case <-time.After(period + 10*time.Second):
			t.Fatalf("only %d of %d streams closed", len(times), streams)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	spread := times[len(times)-1].Sub(times[0])
	t.Logf("streams closed from %s to %s after SIGTERM", times[0].Sub(sent).Round(time.Millisecond), times[len(times)-1].Sub(sent).Round(time.Millisecond))
	// Eight streams over 4s close 0.5s apart: the last 3.5s after the first.
	if spread < period/2 {
		t.Errorf("streams closed within %s of each other; want them spread over the %s drain period", spread, period)
	}
	select {
	case <-p.done:
	case <-time.After(period + 10*time.Second):
		t.Fatal("the process did not exit within the drain period plus 10s")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}
