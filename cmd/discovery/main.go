// Command discovery is a service-mesh control plane compatible with Istio's
// data plane: xDS for Envoy and proxyless gRPC, a CA, and webhooks.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// After the first signal, a second one ends the process at once.
	go func() { <-ctx.Done(); stop() }()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "discovery",
		Short:         "A service-mesh control plane for Istio's data plane",
		Long:          "discovery serves xDS to Envoy sidecars, gateways and proxyless gRPC clients, signs workload certificates over Istio's CA API, and runs Istio's injection and validation webhooks.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newVersionCommand(), newProxyStatusCommand(), newTagCommand(), newCACommand())
	root.AddCommand(newInstallCommands()...)
	return root
}
