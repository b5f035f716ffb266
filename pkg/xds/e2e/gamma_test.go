package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/grpctest"
)

// gammaYAML is Service echo, with no endpoints of its own, and two
// backend Services on loopback ports, echo-v1 and echo-v2; a GRPCRoute
// with echo as its parent (GAMMA) sends x-route: b to echo-v2 and splits
// the rest 80/20 between echo-v1 and echo-v2.
func gammaYAML(portA, portB int32) string {
	out := `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: ns1}
spec:
  clusterIP: 10.96.0.60
  ports:
  - {name: grpc, port: 7070}
`
	for i, v := range []struct {
		name string
		port int32
	}{{"echo-v1", portA}, {"echo-v2", portB}} {
		out += fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: ns1}
spec:
  clusterIP: 10.96.0.%[3]d
  ports:
  - {name: grpc, port: 7070, targetPort: %[2]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s, namespace: ns1, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports: [{name: grpc, port: %[2]d}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
`, v.name, v.port, 61+i)
	}
	return out + `---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: ns1}
spec:
  parentRefs: [{group: "", kind: Service, name: echo, port: 7070}]
  rules:
  - matches: [{headers: [{name: x-route, value: b}]}]
    backendRefs: [{name: echo-v2, port: 7070}]
  - backendRefs:
    - {name: echo-v1, port: 7070, weight: 80}
    - {name: echo-v2, port: 7070, weight: 20}
`
}

// A proxyless gRPC client of a Service routed by a GRPCRoute whose parent
// is that Service (GAMMA): grpc-go's own xDS client follows the header
// match to v2 and splits the rest by weight.
func TestGRPCRouteMeshSplitsAndMatchesHeaders(t *testing.T) {
	addrA, portA := grpctest.Backend(t)
	addrB, portB := grpctest.Backend(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "echo.yaml"), gammaYAML(portA, portB))
	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	client := grpctest.Dial(t, grpctest.Bootstrap(serve(t, store), "ns1"), "xds:///echo.ns1.svc.cluster.local:7070")
	client.Eventually(t, addrA)

	t.Run("a header match routes to v2", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			if got, err := client.CallWith("x-route", "b"); err != nil || got != addrB {
				t.Fatalf("RPC %d with x-route: b went to %q (%v), want %s", i, got, err, addrB)
			}
		}
	})

	t.Run("an 80/20 split by weight holds over 1,000 RPCs", func(t *testing.T) {
		splitHolds(t, client, addrA, addrB, 1000, 0.8)
	})
}
