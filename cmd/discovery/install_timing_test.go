package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/meshplane/discovery/internal/testenv"
)

// BenchmarkBootstrapDefaultProfile measures the issue's target, `discovery
// bootstrap` of the default profile on a loopback API server in under
// 10 s when the Deployments become ready at once (playKubelet marks them
// available as they appear). The command runs as a process, as a user runs
// it: render, pre-checks, apply, waits and prune. It reports the first
// bootstrap (everything created) and a re-run (no changes):
//
//	TESTENV_ETCD=... TESTENV_KUBE_APISERVER=... go test ./cmd/discovery -run '^$' -bench BootstrapDefaultProfile -benchtime 1x
//
// A figure, not an assert: the time depends on the machine (README has it).
func BenchmarkBootstrapDefaultProfile(b *testing.B) {
	env := testenv.Start(b)
	bin := testenv.DiscoveryBinary(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go playKubelet(ctx, env)

	run := func(what string) time.Duration {
		start := time.Now()
		out, err := exec.CommandContext(ctx, bin, "bootstrap", "--profile", "default", "-y", "--kubeconfig", env.Kubeconfig).CombinedOutput()
		took := time.Since(start)
		if err != nil {
			b.Fatalf("%s: %v\n%s", what, err, out)
		}
		b.Logf("%s: %s", what, took.Round(10*time.Millisecond))
		return took
	}
	b.ResetTimer()
	var first, again time.Duration
	for i := 0; i < b.N; i++ {
		if i == 0 {
			first = run("first bootstrap")
			continue
		}
		again += run("bootstrap again (no changes)")
	}
	b.StopTimer()
	b.ReportMetric(first.Seconds(), "first-s")
	if b.N > 1 {
		b.ReportMetric(again.Seconds()/float64(b.N-1), "again-s")
	}
}
