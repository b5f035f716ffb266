package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/meshplane/discovery/internal/testenv"
)

// The target: `discovery bootstrap` of the default profile on a
// loopback API server takes under 10 s when the Deployments become ready
// at once (here playKubelet marks them available as they appear). The
// command runs as a process, as a user runs it: render, pre-checks,
// apply, waits and prune.
func TestBootstrapDefaultProfileUnderTenSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	bin := discoveryBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go playKubelet(ctx, env)

	run := func(what string) time.Duration {
		start := time.Now()
		out, err := exec.CommandContext(ctx, bin, "bootstrap", "--profile", "default", "-y", "--kubeconfig", env.Kubeconfig).CombinedOutput()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		t.Logf("%s: %s\n%s", what, took.Round(10*time.Millisecond), out)
		return took
	}
	if took := run("first bootstrap"); took > 10*time.Second {
		t.Errorf("first bootstrap took %s, want under 10s", took.Round(10*time.Millisecond))
	}
	if took := run("second bootstrap (no changes)"); took > 10*time.Second {
		t.Errorf("second bootstrap took %s, want under 10s", took.Round(10*time.Millisecond))
	}
}
