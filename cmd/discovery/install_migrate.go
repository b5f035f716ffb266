package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshplane/discovery/pkg/install"
)

type migrateOptions struct {
	revision, kubeconfig string
	namespaces           []string
	all, yes             bool
}

func newMigrateCommand() *cobra.Command {
	o := &migrateOptions{}
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
		RunE:    func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	fs := cmd.Flags()
	fs.StringVar(&o.revision, "revision", "", "The discovery revision to migrate to (bootstrap --take-over --revision).")
	fs.StringSliceVar(&o.namespaces, "namespaces", nil, "Namespaces to move to the revision now (comma-separated).")
	fs.BoolVar(&o.all, "all", false, "Move every namespace that still selects Istio's injector.")
	fs.BoolVarP(&o.yes, "yes", "y", false, "Do not ask for confirmation.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
	cmd.MarkFlagsMutuallyExclusive("namespaces", "all")
	return cmd
}

func (o *migrateOptions) run(cmd *cobra.Command) error {
	if o.revision == "" {
		return errors.New("--revision is required: the revision bootstrap --take-over installed")
	}
	cfg, err := installRestConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := install.NewClient(cfg, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	revs, err := client.InstalledRevisions(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(revs, install.RevisionName(o.revision)) {
		return fmt.Errorf("revision %s of discovery is not installed (installed: %s): run discovery bootstrap --take-over --revision %s first",
			o.revision, strings.Join(revs, ", "), o.revision)
	}
	mig, err := client.Migration(ctx, o.revision)
	if err != nil {
		return err
	}
	move := o.namespaces
	if o.all {
		move = slices.Sorted(maps.Keys(mig.Pending))
	}
	if len(move) > 0 {
		q := fmt.Sprintf("This labels namespaces %s istio.io/rev=%s (their pods move on restart).", strings.Join(move, ", "), o.revision)
		if !o.yes && !confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), q) {
			return errors.New("cancelled: nothing was changed")
		}
		if err := client.MoveNamespaces(ctx, o.revision, move); err != nil {
			return err
		}
		fmt.Fprintf(out, "moved to revision %s: %s\n", o.revision, strings.Join(move, ", "))
		if mig, err = client.Migration(ctx, o.revision); err != nil {
			return err
		}
	}
	if !mig.Istio.Found() {
		fmt.Fprintln(out, "Istio is not installed: nothing to migrate from.")
		return nil
	}
	mig.WriteSteps(out)
	return nil
}
