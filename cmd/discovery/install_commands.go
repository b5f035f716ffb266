package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshplane/discovery/pkg/install"
)

func newManifestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest",
		Short: "Work with the installation manifests without a cluster",
	}
	var o install.Options
	gen := &cobra.Command{
		Use:     "generate",
		Short:   "Print the YAML that bootstrap would apply",
		Example: "  discovery manifest generate --profile demo --set values.pilot.logLevel=debug",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			m, err := o.Render(imageTag())
			if err != nil {
				return err
			}
			m.WriteWarnings(cmd.ErrOrStderr())
			b, err := m.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	o.AddFlags(gen.Flags())
	cmd.AddCommand(gen)
	return cmd
}

func newUninstallCommand() *cobra.Command {
	var (
		opts       install.UninstallOptions
		kubeconfig string
		yes        bool
	)
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what bootstrap installed",
		Long: `Remove the objects bootstrap installed for a revision (only objects carrying
the installer's labels): its control plane, and, when it is the last
revision installed, the shared objects (shared cluster roles, gateways).
While another revision is installed, the shared objects stay, listed as
kept. --purge removes every revision and the CRDs, and with them every
Istio configuration object. Namespaces, and objects made by anything else
(Istio's among them), are left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Purge && cmd.Flags().Changed("revision") {
				return errors.New("--purge removes every revision: do not combine it with --revision")
			}
			cfg, err := installRestConfig(kubeconfig)
			if err != nil {
				return err
			}
			what := "revision " + install.RevisionName(opts.Revision)
			if opts.Purge {
				what = "every revision and the CRDs (and all Istio configuration)"
			}
			if !yes && !opts.DryRun && !confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), fmt.Sprintf("This removes %s from %s.", what, cfg.Host)) {
				return errors.New("cancelled: nothing was removed")
			}
			client, err := install.NewClient(cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			res, err := client.Uninstall(cmd.Context(), opts)
			verb := "removed"
			if opts.DryRun {
				verb = "would be removed"
			}
			for _, k := range res.Deleted {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", verb, k)
			}
			for _, k := range res.Kept {
				fmt.Fprintf(cmd.OutOrStdout(), "kept: %s\n", k)
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.Revision, "revision", "", "Revision to remove; empty for the default revision.")
	fs.BoolVar(&opts.Purge, "purge", false, "Remove every revision and the CRDs.")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "Show what would be removed (server-side dry run).")
	fs.BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation.")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
	return cmd
}

func newCheckCommand() *cobra.Command {
	var (
		o          install.Options
		kubeconfig string
		pre        bool
		takeOver   bool
		namespace  string
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check a cluster before an install (--pre) or an installed control plane",
		Long: `Without --pre: the CRDs are Established, the discovery Deployment is
available, the webhook configurations exist with the mesh root as caBundle,
the revision's objects are its own (not another revision's or another
installer's), and a Pod created with server-side dry run in a namespace
labelled for injection comes back injected. With --pre: the cluster
answers, its version is supported, you may create what the install
creates, Istio is not installed (or, with --take-over, the install goes
beside it), no object to write belongs to someone else, and other
installations are reported.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			m, err := o.Render(imageTag())
			if err != nil {
				return err
			}
			cfg, err := installRestConfig(kubeconfig)
			if err != nil {
				return err
			}
			client, err := install.NewClient(cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			var results []install.CheckResult
			if pre {
				results = client.PreCheck(cmd.Context(), m, install.PreCheckOptions{TakeOver: takeOver})
			} else {
				if namespace == "" {
					namespace = m.Spec.Namespace
				}
				results = client.Check(cmd.Context(), install.CheckOptions{Namespace: namespace, Revision: m.Spec.Revision, CRDs: install.CRDNames(m), Manifest: m})
			}
			for _, r := range results {
				fmt.Fprintln(cmd.OutOrStdout(), r)
			}
			if failed := install.Failed(results); len(failed) > 0 {
				return fmt.Errorf("%d of %d checks failed", len(failed), len(results))
			}
			return nil
		},
	}
	fs := cmd.Flags()
	o.AddFlags(fs)
	fs.BoolVar(&pre, "pre", false, "Run the checks before an install.")
	fs.BoolVar(&takeOver, "take-over", false, "With --pre: check a migration from Istio (bootstrap --take-over).")
	fs.StringVar(&namespace, "namespace", "", "Namespace of the control plane (default: the spec's).")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
	return cmd
}
