// Command server is the example's gRPC backend: it listens on 127.0.0.1
// and answers the health service the example client calls.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"

	grpcexample "github.com/meshplane/discovery/examples/grpc"
)

func main() {
	port := flag.Int("port", 17070, "port to listen on (the example's endpoints use 17070 and 17071)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("backend", fmt.Sprintf("127.0.0.1:%d", *port))
	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Error("listen", "error", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log.Info("serving")
	if err := grpcexample.Serve(ctx, lis, log); err != nil {
		log.Error("serve", "error", err)
		os.Exit(1)
	}
}
