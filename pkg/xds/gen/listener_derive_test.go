package gen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// deriveWorld is n services of ns with HTTP on 80 and gRPC on 7070.
func deriveWorld(n int) string {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "---\n%s", deriveService("ns", fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.96.1.%d", i+1), ""))
	}
	return sb.String()
}

func deriveService(ns, name, addr, labels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s%s}
spec: {clusterIP: %s, ports: [{name: http, port: 80}, {name: grpc, port: 7070}]}
`, name, ns, labels, addr)
}

// TestDerivedPortListenersEqualBuiltOnes changes the services of ports
// whose services are all plaintext HTTP, and the class's telemetry, and
// checks after each step that the class, whose port listeners are
// derived from the previous ones where they can be, is the class built
// from nothing (and split after generation), and that they were derived
// where they could be and built where not.
func TestDerivedPortListenersEqualBuiltOnes(t *testing.T) {
	steps := []struct {
		name, yaml, removed string
		derived             bool
	}{
		{"services", deriveWorld(10), "", false},
		{"a service added", deriveService("ns", "added", "10.96.2.1", ""), "", true},
		{"two added", deriveService("ns", "two-a", "10.96.2.2", "") + "---\n" + deriveService("other", "two-b", "10.96.2.3", ""), "", true},
		{"a service removed", "", "svc-3", true},
		{"an address changed", deriveService("ns", "svc-4", "10.96.3.4", ""), "", true},
		{"labels changed", deriveService("ns", "svc-5", "10.96.1.6", ", labels: {a: b}"), "", true},
		// Two services with one address: the second has no chain, and
		// the listeners are built.
		{"an address shared", deriveService("ns", "zz-shared", "10.96.1.1", ""), "", false},
		{"the sharer removed", "", "zz-shared", false},
		{"added again", deriveService("ns", "again", "10.96.2.9", ""), "", true},
		// Telemetry changes every connection manager: built.
		{"telemetry", meshAccessLogs, "", false},
		{"added under the new telemetry", deriveService("ns", "after-tel", "10.96.2.10", ""), "", true},
		// A TCP service on port 80: built while it is there.
		{"a TCP service", `
apiVersion: v1
kind: Service
metadata: {name: tcp, namespace: ns}
spec: {clusterIP: 10.96.4.1, ports: [{name: tcp, port: 80}]}
`, "", false},
		{"added beside it", deriveService("ns", "beside", "10.96.2.11", ""), "", false},
		{"the TCP service removed", "", "tcp", false},
		{"added after it", deriveService("ns", "after-tcp", "10.96.2.12", ""), "", true},
		{"REGISTRY_ONLY", `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: ns}
spec:
  egress: [{hosts: ["*/*"]}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
`, "", true},
		{"removed under it", "", "svc-6", true},
	}
	o := DefaultOptions(quietLog())
	o.ListenersPerAddress = true
	store := model.NewStore(model.StoreOptions{})
	g := newTestGenerator(t, o, false)
	p := sidecar(t, "ns")
	var prev *ClassConfig
	for _, st := range steps {
		w := applyStep(t, store, st.yaml, "ns", st.removed)
		next, err := g.Class(w, p, prev)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		fresh, err := newTestGenerator(t, o, true).Class(w, p, nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, typ := range TypeURLs {
			if got, want := next.Sets[typ], fresh.Sets[typ]; got.Version != want.Version {
				t.Errorf("%s: %s differs from the class built from nothing in %v", st.name, ShortType(typ), changed(got, want))
			}
		}
		if got := next.ports[80].derived; got != st.derived {
			t.Errorf("%s: port 80's listeners derived %v, want %v", st.name, got, st.derived)
		}
		if st.derived && !next.ports[7070].derived {
			t.Errorf("%s: port 7070's listeners were built", st.name)
		}
		checkHeldByListeners(t, st.name, next)
		prev = next
	}
}
