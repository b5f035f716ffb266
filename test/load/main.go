// Command discovery-load measures discovery the same way every time: it
// generates a mesh into a config directory, starts discovery serve on it
// (or measures a running server), connects simulated delta-ADS (or SotW)
// sidecars that decode and ACK everything, applies changes at a rate and
// reports convergence, pushes, bytes, NACKs and the server's CPU and RSS.
// It also measures the CA (CSRs per second over gRPC + TLS) and the
// injection webhook (latency at a fixed request rate over HTTPS).
//
//	discovery-load xds --services 100 --proxies 100 --out bench-results/s
//	discovery-load ca --clients 100 --key ecdsa
//	discovery-load webhook --rate 200
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meshplane/discovery/test/load/loadkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{Use: "discovery-load", Short: "Load tool and benchmarks for discovery", SilenceUsage: true}
	root.AddCommand(newXDSCommand(), newWorldCommand(), newCACommand(), newWebhookCommand())
	return root
}

func newXDSCommand() *cobra.Command {
	o := DefaultXDSOptions()
	cmd := &cobra.Command{
		Use:   "xds",
		Short: "Simulated proxies against discovery serve: convergence per kind of change, pushes, bytes, CPU, RSS",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := RunXDS(cmd.Context(), o, cmd.OutOrStdout())
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func newWorldCommand() *cobra.Command {
	o := loadkit.DefaultWorldOptions()
	var dir string
	cmd := &cobra.Command{
		Use:   "world",
		Short: "Only write the generated world into a config directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--dir is required")
			}
			_, err := loadkit.NewWorld(cmd.Context(), o, dir)
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&dir, "dir", dir, "empty directory to write the world into")
	return cmd
}
