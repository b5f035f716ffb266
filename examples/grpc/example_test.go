package grpcexample

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/xds"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/server"
)

// TestExample runs the example as a user would, in one process: the config
// directory (with the backends' ports swapped for free ones), discovery's
// xDS server, two backends and the client.
func TestExample(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	var backends []string
	for _, f := range []string{"echo.yaml", "endpoints-a.yaml", "endpoints-b.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if strings.HasPrefix(f, "endpoints") {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = Serve(ctx, lis, quiet); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			port := lis.Addr().(*net.TCPAddr).Port
			backends = append(backends, lis.Addr().String())
			text = strings.NewReplacer("17070", fmt.Sprint(port), "17071", fmt.Sprint(port)).Replace(text)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srcDone := make(chan error, 1)
	go func() { srcDone <- src.Start(ctx, store) }()
	t.Cleanup(func() { cancel(); <-srcDone })
	opts := server.DefaultOptions()
	opts.DebounceAfter = 20 * time.Millisecond
	xs, err := server.New(opts, store, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(server.Codec()))
	xs.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	xsDone := make(chan struct{})
	go func() { _ = xs.Start(ctx); close(xsDone) }()
	t.Cleanup(func() { cancel(); <-xsDone; gs.Stop() })

	r, err := xds.NewXDSResolverWithConfigForTesting(Bootstrap(lis.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(r)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < 2 && time.Now().Before(deadline) {
		if b, err := c.Call(ctx); err == nil {
			seen[b] = true
		}
	}
	if !seen[backends[0]] || !seen[backends[1]] {
		t.Fatalf("requests reached %v, want both backends %v", seen, backends)
	}

	// Taking endpoints-b.yaml away sends everything to the first backend.
	if err := os.Rename(filepath.Join(dir, "endpoints-b.yaml"), filepath.Join(dir, "endpoints-b.yaml.off")); err != nil {
		t.Fatal(err)
	}
	onlyA := 0
	for onlyA < 20 && time.Now().Before(deadline) {
		b, err := c.Call(ctx)
		switch {
		case err != nil:
			t.Fatalf("request failed after the change: %v", err)
		case b == backends[0]:
			onlyA++
		default:
			onlyA = 0
		}
	}
	if onlyA < 20 {
		t.Fatalf("requests still reach %s after its endpoints were removed", backends[1])
	}
}
