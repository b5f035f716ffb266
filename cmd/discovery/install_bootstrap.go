package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshplane/discovery/pkg/install"
)

// newInstallCommands returns bootstrap, manifest, uninstall, check and migrate.
func newInstallCommands() []*cobra.Command {
	return []*cobra.Command{newBootstrapCommand(), newManifestCommand(), newUninstallCommand(), newCheckCommand(), newMigrateCommand()}
}

// imageTag is the tag of this build's image: the default of spec.tag.
func imageTag() string {
	v := currentVersion().Version
	if v == "dev" {
		return "latest"
	}
	return v
}

// installRestConfig loads --kubeconfig, else the default loading rules
// (KUBECONFIG, ~/.kube/config, in-cluster).
func installRestConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}

// confirm asks a yes/no question on out and reads the answer from in.
func confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s Proceed? (y/N) ", question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

type bootstrapOptions struct {
	input            install.Options
	kubeconfig       string
	dryRun           bool
	yes              bool
	skipChecks       bool
	wait             bool
	takeOver         bool
	readinessTimeout time.Duration
}

func newBootstrapCommand() *cobra.Command {
	o := &bootstrapOptions{readinessTimeout: 5 * time.Minute, wait: true}
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Install or upgrade the control plane in a cluster",
		Long: `Install the control plane from the built-in charts: pre-checks, then
server-side apply (field manager "discovery") in the order base, discovery,
gateways; waits for the CRDs and Deployments; prunes what an earlier run
installed and this one no longer renders. Running it again changes nothing.

Revisions: --revision R installs the control plane R beside the others,
every object named and labelled for R. The CRDs, shared cluster roles and
gateways are shared: the revision that made them owns them, another
revision's bootstrap leaves them as they are, and they go with the last
uninstall. A revisioned control plane is installed without gateways, as
Istio advises; a gateway of revision R is installed on its own (--revision R
--profile empty with the gateway enabled).

Istio: bootstrap refuses to install where Istio is installed. --take-over
migrates instead: discovery is installed as a revision of its own beside
istiod, and Istio's objects (its Service, webhooks, ConfigMaps, CRDs) are
left as they are; then namespaces move with "discovery migrate", and istiod
is removed last, by you, with Istio's tools.

A wait that times out does not leave a half install: the remaining
components are still applied and the prune done, and the error says what is
not ready. Run bootstrap again to wait again.`,
		Example: "  discovery bootstrap --profile=default -y\n  discovery bootstrap --revision canary -y\n" +
			"  discovery bootstrap --take-over --revision discovery -y\n  discovery bootstrap --set components.ingressGateways.[0].enabled=false --dry-run",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.input.Validate(); err != nil {
				return err
			}
			return o.run(cmd)
		},
	}
	fs := cmd.Flags()
	o.input.AddFlags(fs)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
	fs.BoolVar(&o.dryRun, "dry-run", false, "Show what would change (server-side dry run); change nothing.")
	fs.BoolVarP(&o.yes, "yes", "y", false, "Do not ask for confirmation.")
	fs.BoolVar(&o.skipChecks, "skip-checks", false, "Apply even when a pre-check fails (objects of another owner are still never written).")
	fs.BoolVar(&o.wait, "wait", o.wait, "Wait for the CRDs and each component's Deployments before the next component; --wait=false applies and prunes without waiting.")
	fs.BoolVar(&o.takeOver, "take-over", false, "Migrate from Istio: install as a revision of its own (--revision) beside istiod, leaving every object of Istio's as it is.")
	fs.DurationVar(&o.readinessTimeout, "readiness-timeout", o.readinessTimeout, "How long to wait for CRDs and each component's Deployments.")
	return cmd
}

func (o *bootstrapOptions) run(cmd *cobra.Command) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	m, err := o.input.Render(imageTag())
	if err != nil {
		return fmt.Errorf("nothing was applied: %w", err)
	}
	m.WriteWarnings(stderr)
	cfg, err := installRestConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := install.NewClient(cfg, stderr)
	if err != nil {
		return err
	}
	checks := client.PreCheck(ctx, m, install.PreCheckOptions{TakeOver: o.takeOver})
	for _, r := range checks {
		fmt.Fprintln(stderr, r)
	}
	if failed := install.Failed(checks); len(failed) > 0 && !o.skipChecks {
		return fmt.Errorf("nothing was applied: %d pre-checks failed (%s; --skip-checks to apply anyway)", len(failed), checkNames(failed))
	}
	if !o.yes && !o.dryRun && !confirm(cmd.InOrStdin(), stderr, fmt.Sprintf("This installs revision %s (%d objects) into %s.", m.Revision, len(m.Objects()), cfg.Host)) {
		return errors.New("cancelled: nothing was applied")
	}
	res, err := client.Apply(ctx, m, install.ApplyOptions{DryRun: o.dryRun, Wait: o.wait, ReadinessTimeout: o.readinessTimeout, TakeOver: o.takeOver})
	printResult(cmd.OutOrStdout(), res, o.dryRun)
	if err != nil {
		return err
	}
	switch {
	case o.dryRun:
	case !o.wait:
		fmt.Fprintln(cmd.OutOrStdout(), "not waited for readiness (--wait=false): discovery check says when the control plane is ready")
	default:
		fmt.Fprintln(cmd.OutOrStdout(), "ready")
	}
	if o.takeOver && !o.dryRun {
		mig, err := client.Migration(ctx, m.Revision)
		if err != nil {
			return err
		}
		if mig.Istio.Found() {
			mig.WriteSteps(cmd.OutOrStdout())
		}
	}
	return nil
}

func checkNames(rs []install.CheckResult) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}

func printResult(out io.Writer, res *install.Result, dryRun bool) {
	if res == nil {
		return
	}
	verb := ""
	if dryRun {
		verb = "would be "
	}
	for _, l := range []struct {
		what string
		keys []string
	}{{"created", res.Created}, {"changed", res.Changed}, {"pruned", res.Pruned}, {"left to its owner", res.Skipped}} {
		for _, k := range l.keys {
			fmt.Fprintf(out, "%s%s: %s\n", verb, l.what, k)
		}
	}
	switch {
	case res.NoChange() && len(res.Unchanged) == 0 && len(res.Skipped) == 0:
		// refused before anything was applied
		return
	case res.NoChange():
		fmt.Fprintf(out, "no changes: %d objects already as rendered\n", len(res.Unchanged))
	default:
		fmt.Fprintf(out, "%d %screated, %d %schanged, %d unchanged, %d %spruned\n",
			len(res.Created), verb, len(res.Changed), verb, len(res.Unchanged), len(res.Pruned), verb)
	}
	if res.NotReady != "" {
		fmt.Fprintf(out, "not ready: %s\n", res.NotReady)
	}
}
