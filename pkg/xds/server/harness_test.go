package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go's xDS client keeps process-wide goroutines.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/xds/clients/internal/buffer.(*Unbounded).Get"),
	)
}

type testServer struct {
	s    *Server
	addr string
	reg  *prometheus.Registry
}

func testLog() *slog.Logger {
	if os.Getenv("XDS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newGen is a generator with the defaults, as a Server builds it.
func newGen(t testing.TB) *gen.Generator {
	t.Helper()
	g, err := gen.New(gen.DefaultOptions(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// startServer runs a Server on a loopback port for the test's duration.
func startServer(t testing.TB, store *model.Store, tweak ...func(*Options)) *testServer {
	t.Helper()
	opts := DefaultOptions()
	opts.DebounceAfter = 10 * time.Millisecond
	opts.DebounceMax = time.Second
	for _, f := range tweak {
		f(&opts)
	}
	reg := prometheus.NewRegistry()
	s, err := New(opts, store, testLog(), reg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(Codec()))
	s.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	served, started := make(chan struct{}), make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	go func() { _ = s.Start(ctx); close(started) }()
	t.Cleanup(func() {
		cancel()
		<-started
		gs.Stop()
		<-served
	})
	return &testServer{s: s, addr: lis.Addr().String(), reg: reg}
}

func (ts *testServer) counter(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := ts.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			if c := m.GetCounter(); c != nil {
				total += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				total += g.GetValue()
			}
		}
	}
	return total
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func node(id string, meta map[string]any) *corev3.Node {
	md, err := structpb.NewStruct(meta)
	if err != nil {
		panic(err)
	}
	return &corev3.Node{Id: id, Metadata: md}
}

// sotwClient is a raw state-of-the-world ADS client that checks what it
// receives.
type sotwClient struct {
	t      testing.TB
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	recv   chan *discovery.DiscoveryResponse
	errc   chan error
	cancel context.CancelFunc
}

func newSotwClient(t testing.TB, cc *grpc.ClientConn, n *corev3.Node) *sotwClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &sotwClient{t: t, stream: stream, node: n, recv: make(chan *discovery.DiscoveryResponse, 100), errc: make(chan error, 1), cancel: cancel}
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

func (c *sotwClient) send(typeURL string, names []string, version, nonce string, nack string) {
	c.t.Helper()
	req := &discovery.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNames: names, VersionInfo: version, ResponseNonce: nonce}
	if nack != "" {
		req.ErrorDetail = &status.Status{Code: 3, Message: nack}
	}
	if err := c.stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		// io.EOF: the server ended the stream first; its status reaches
		// the receiving side (ended, errc).
		c.t.Fatalf("send: %v", err)
	}
}

func (c *sotwClient) next() *discovery.DiscoveryResponse {
	c.t.Helper()
	select {
	case r := <-c.recv:
		return r
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(60 * time.Second):
		c.t.Fatal("no response within 60s")
	}
	return nil
}

// ack acknowledges r.
func (c *sotwClient) ack(r *discovery.DiscoveryResponse, names []string) {
	c.t.Helper()
	c.send(r.GetTypeUrl(), names, r.GetVersionInfo(), r.GetNonce(), "")
}

func names(t testing.TB, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resourceName(m))
	}
	sort.Strings(out)
	return out
}

func resourceName(m any) string {
	if n, ok := m.(interface{ GetName() string }); ok {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}

func joined(s []string) string { return strings.Join(s, ",") }

func statusProto(msg string) *status.Status { return &status.Status{Code: 3, Message: msg} }
