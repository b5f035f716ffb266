package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshplane/discovery/pkg/install"
)

func newMigrateCommand() *cobra.Command {
	var (
		revision, kubeconfig string
		namespaces           []string
		all, yes             bool
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move namespaces from Istio to a discovery revision installed with bootstrap --take-over",
		Long: `Show where a migration from Istio stands: the namespaces that still select
Istio's injector, the pods istiod still serves, and the commands of the next
step. With --namespaces (or --all) it moves those namespaces to the revision:
their istio-injection label is removed and istio.io/rev set, nothing else;
their pods move on their next restart. istiod is never removed by discovery:
once nothing uses it, migrate prints the commands that remove it with the
tool that installed it.`,
		Example: "  discovery migrate --revision discovery\n  discovery migrate --revision discovery --namespaces shop,cart -y",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if revision == "" {
				return errors.New("--revision is required: the revision bootstrap --take-over installed")
			}
			cfg, err := installRestConfig(kubeconfig)
			if err != nil {
				return err
			}
			client, err := install.NewClient(cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			revs, err := client.InstalledRevisions(ctx)
			if err != nil {
				return err
			}
			if !slices.Contains(revs, install.RevisionName(revision)) {
				return fmt.Errorf("revision %s of discovery is not installed (installed: %s): run discovery bootstrap --take-over --revision %s first",
					revision, strings.Join(revs, ", "), revision)
			}
			mig, err := client.Migration(ctx, revision)
			if err != nil {
				return err
			}
			move := namespaces
			if all {
				move = nil
				for ns := range mig.Pending {
					move = append(move, ns)
				}
				slices.Sort(move)
			}
			if len(move) > 0 {
				if !yes && !confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), fmt.Sprintf("This labels namespaces %s istio.io/rev=%s (their pods move on restart).", strings.Join(move, ", "), revision)) {
					return errors.New("cancelled: nothing was changed")
				}
				if err := client.MoveNamespaces(ctx, revision, move); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "moved to revision %s: %s\n", revision, strings.Join(move, ", "))
				if mig, err = client.Migration(ctx, revision); err != nil {
					return err
				}
			}
			if !mig.Istio.Found() {
				fmt.Fprintln(cmd.OutOrStdout(), "Istio is not installed: nothing to migrate from.")
				return nil
			}
			mig.WriteSteps(cmd.OutOrStdout())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&revision, "revision", "", "The discovery revision to migrate to (bootstrap --take-over --revision).")
	fs.StringSliceVar(&namespaces, "namespaces", nil, "Namespaces to move to the revision now (comma-separated).")
	fs.BoolVar(&all, "all", false, "Move every namespace that still selects Istio's injector.")
	fs.BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation.")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
	cmd.MarkFlagsMutuallyExclusive("namespaces", "all")
	return cmd
}
