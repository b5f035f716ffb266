package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/install"
)

// runRoot runs the discovery command line with args and returns stdout,
// stderr and the error.
func runRoot(ctx context.Context, args ...string) (string, string, error) {
	root := newRootCommand() //nolint:contextcheck // it runs under ctx: ExecuteContext below
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func TestManifestGenerateNeedsNoCluster(t *testing.T) {
	out, _, err := runRoot(context.Background(), "manifest", "generate", "--profile", "minimal", "--set", "values.pilot.logLevel=debug")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: Deployment", "--log-level=debug", "kind: MutatingWebhookConfiguration"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "istio-ingressgateway") {
		t.Error("the minimal profile rendered an ingress gateway")
	}
}

func TestBootstrapRefusesBadInputAndDryRunStoresNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx := context.Background()
	_, _, err := runRoot(ctx, "bootstrap", "--kubeconfig", env.Kubeconfig, "-y", "--set", "components.pilot.k8s.replicaCont=2")
	if err == nil || !strings.Contains(err.Error(), "nothing was applied") || !strings.Contains(err.Error(), "did you mean components.pilot.k8s.replicaCount?") {
		t.Fatalf("err = %v", err)
	}
	assertNothingInstalled(ctx, t, env)

	out, _, err := runRoot(ctx, "bootstrap", "--kubeconfig", env.Kubeconfig, "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "would be created: Deployment/istio-system/discovery") {
		t.Errorf("dry run output:\n%s", out)
	}
	assertNothingInstalled(ctx, t, env)

	_, _, err = runRoot(ctx, "bootstrap", "--kubeconfig", env.Kubeconfig)
	if err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("without -y and no answer: err = %v", err)
	}
	assertNothingInstalled(ctx, t, env)
}

func assertNothingInstalled(ctx context.Context, t *testing.T, env *testenv.Env) {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: install.LabelManagedBy + "=" + install.ManagedByValue}
	deps, err := env.Client.AppsV1().Deployments("").List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	crs, err := env.Client.RbacV1().ClusterRoles().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(deps.Items) + len(crs.Items); n != 0 {
		t.Errorf("%d installer objects exist; want none", n)
	}
}
