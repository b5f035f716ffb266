//go:build loadkube

package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/test/load/loadkit"
)

// TestM1OnARealAPIServer is `make bench-m1-kube`: the M1 world written
// into a real kube-apiserver (internal/testenv), discovery serve reading it
// with --kubeconfig, as istiod was measured (issue 22, target 7). Behind
// the loadkube build tag: it takes about ten minutes and is a measurement,
// not a test of the suite. LOAD_OUT names the report directory.
func TestM1OnARealAPIServer(t *testing.T) {
	out := os.Getenv("LOAD_OUT")
	if out == "" {
		t.Fatal("LOAD_OUT names the report directory")
	}
	env := testenv.Start(t)
	o := DefaultXDSOptions()
	o.Server.Binary, o.Kubeconfig, o.Out = discoveryBinary(t), env.Kubeconfig, out
	o.World = loadkit.WorldOptions{Services: 1000, Namespaces: 50, Ports: 2, EndpointsPer: 10, VirtualServices: 100, DomainSuffix: "cluster.local"}
	o.Fleet.Proxies = 1000
	o.Endpoints, o.VirtualServices, o.Services, o.Reconnects = 20, 20, 10, 20
	o.Rate, o.Idle, o.Timeout = 1, 20*time.Second, 10*time.Minute
	rep, err := RunXDS(context.Background(), o, os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Phases {
		if p.Missed != 0 || p.NACKs != 0 {
			t.Errorf("%s: %d missed, %d NACKs; notes %v", p.Name, p.Missed, p.NACKs, rep.Notes)
		}
	}
}
