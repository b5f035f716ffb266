// Command client is the example's proxyless gRPC client: it writes a
// bootstrap for discovery's xDS server, dials
// xds:///echo.demo.svc.cluster.local:7070 and prints which backend answers
// each request.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	grpcexample "github.com/meshplane/discovery/examples/grpc"
)

func main() {
	xdsAddr := flag.String("xds", "127.0.0.1:15010", "address of discovery's plaintext xDS server")
	bootstrap := flag.String("bootstrap", filepath.Join(os.TempDir(), "discovery-example-bootstrap.json"), "where to write the xDS bootstrap")
	every := flag.Duration("every", time.Second, "time between requests")
	count := flag.Int("count", 0, "stop after this many requests (0: until interrupted)")
	flag.Parse()
	if os.Getenv("GRPC_XDS_BOOTSTRAP") == "" {
		// grpc-go reads GRPC_XDS_BOOTSTRAP when the process starts: write
		// the file, then run this program again with the variable set.
		if err := grpcexample.WriteBootstrap(*bootstrap, *xdsAddr); err != nil {
			fmt.Fprintln(os.Stderr, "write bootstrap:", err)
			os.Exit(1)
		}
		fmt.Printf("bootstrap written to %s\n", *bootstrap)
		self, err := os.Executable()
		if err == nil {
			err = syscall.Exec(self, os.Args, append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+*bootstrap))
		}
		fmt.Fprintln(os.Stderr, "restart with GRPC_XDS_BOOTSTRAP set:", err)
		os.Exit(1)
	}
	fmt.Printf("using bootstrap %s; dialing %s\n", os.Getenv("GRPC_XDS_BOOTSTRAP"), grpcexample.Target)
	c, err := grpcexample.Dial(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for i := 1; *count == 0 || i <= *count; i++ {
		backend, err := c.Call(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			fmt.Printf("request %d: %v\n", i, err)
		} else {
			fmt.Printf("request %d: answered by %s\n", i, backend)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(*every):
		}
	}
}
