package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/meshplane/discovery/internal/testenv"
)

// A bootstrap whose wait times out applies everything, prunes, and says
// what is not ready and how to finish; once the Deployments are ready, a
// re-run changes nothing and succeeds (it is not "no changes", exit 1).
func TestBootstrapAfterATimedOutWait(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kubeconfig := "--kubeconfig=" + env.Kubeconfig

	out, errOut, err := runRoot(ctx, "bootstrap", "-y", "--readiness-timeout=1s", kubeconfig)
	t.Logf("bootstrap, no kubelet:\n%s%s", errOut, out)
	// Which component times out first depends on how fast the API server
	// establishes the CRDs (within 1s, or not, on a loaded machine); the
	// Deployments never become ready without a kubelet. Either way every
	// component is applied and pruned, and the error says so.
	switch {
	case err == nil:
		t.Fatal("bootstrap succeeded with no kubelet")
	case !strings.Contains(err.Error(), "Every component was applied and pruned") ||
		!strings.Contains(err.Error(), "gateway-istio-ingressgateway"):
		t.Errorf("err = %v", err)
	case strings.Contains(err.Error(), "discovery is not ready") &&
		!strings.Contains(err.Error(), "discovery is not ready: Deployments: timed out after 1s waiting for Deployment/istio-system/discovery (the controller has not seen the latest spec)"):
		t.Errorf("err = %v; want the Deployment's reason", err)
	}
	created := regexp.MustCompile(`(\d+) created, 0 changed, 0 unchanged, 0 pruned`).FindStringSubmatch(out)
	if created == nil || !strings.Contains(out, "not ready: ") {
		t.Errorf("output after the timeout:\n%s", out)
	}

	go playKubelet(ctx, env)
	out, errOut, err = runRoot(ctx, "bootstrap", "-y", kubeconfig)
	t.Logf("bootstrap again, Deployments ready:\n%s%s", errOut, out)
	if err != nil || created == nil || !strings.Contains(out, "no changes: "+created[1]+" objects already as rendered\nready\n") {
		t.Errorf("re-run: err = %v, output:\n%s", err, out)
	}
}
