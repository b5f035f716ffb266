package e2e

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/grpctest"
)

// subsetsYAML is a service with two versions on loopback ports, their
// DestinationRule subsets and a VirtualService: x-route: b goes to v2,
// x-fault: abort is refused with RESOURCE_EXHAUSTED, the rest is split
// 80/20 between v1 and v2.
func subsetsYAML(portA, portB int32) string {
	out := `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: ns1}
spec:
  clusterIP: 10.96.0.50
  ports:
  - {name: grpc, port: 7070, targetPort: 7070}
`
	for _, v := range []struct {
		name, version string
		port          int32
	}{{"echo-a", "v1", portA}, {"echo-b", "v2", portB}} {
		out += fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: ns1, labels: {app: echo, version: %[2]s}}
spec: {containers: [{name: app, image: echo}]}
status: {podIP: 127.0.0.1, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s, namespace: ns1, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: %[3]d}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: %[1]s, namespace: ns1}
`, v.name, v.version, v.port)
	}
	return out + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: ns1}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: ns1}
spec:
  hosts: [echo]
  http:
  - match:
    - headers: {x-route: {exact: b}}
    route:
    - destination: {host: echo, subset: v2}
  - match:
    - headers: {x-fault: {exact: abort}}
    fault:
      abort: {grpcStatus: RESOURCE_EXHAUSTED, percentage: {value: 100}}
    route:
    - destination: {host: echo, subset: v1}
  - route:
    - destination: {host: echo, subset: v1}
      weight: 80
    - destination: {host: echo, subset: v2}
      weight: 20
`
}

func TestGRPCSubsetsHeadersAndFaults(t *testing.T) {
	addrA, portA := grpctest.Backend(t)
	addrB, portB := grpctest.Backend(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "echo.yaml"), subsetsYAML(portA, portB))
	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	client := grpctest.Dial(t, grpctest.Bootstrap(serve(t, store), "ns1"), "xds:///echo.ns1.svc.cluster.local:7070")
	client.Eventually(t, addrA)

	t.Run("a header match routes to its subset", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			if got, err := client.CallWith("x-route", "b"); err != nil || got != addrB {
				t.Fatalf("RPC %d with x-route: b went to %q (%v), want %s", i, got, err, addrB)
			}
		}
	})

	t.Run("a fault abort returns the configured code", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			_, err := client.CallWith("x-fault", "abort")
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("RPC %d with x-fault: abort: %v, want code %s", i, err, codes.ResourceExhausted)
			}
		}
	})

	t.Run("an 80/20 split holds over 1,000 RPCs", func(t *testing.T) {
		splitHolds(t, client, addrA, addrB, 1000, 0.8)
	})
}

// splitHolds makes n RPCs without headers and checks that the share that
// reached addrA (the rest must reach addrB) is p within 4 standard
// deviations of the binomial (a false failure about once in 16,000 runs).
func splitHolds(t *testing.T, client *grpctest.Client, addrA, addrB string, n int, p float64) {
	t.Helper()
	toA := 0
	for i := 0; i < n; i++ {
		got, err := client.Call()
		switch {
		case err != nil:
			t.Fatalf("RPC %d: %v", i, err)
		case got == addrA:
			toA++
		case got != addrB:
			t.Fatalf("RPC %d went to %s, neither %s nor %s", i, got, addrA, addrB)
		}
	}
	mean, sigma := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
	if math.Abs(float64(toA)-mean) > 4*sigma {
		t.Errorf("%s served %d of %d RPCs, want %.0f +/- %.0f", addrA, toA, n, mean, 4*sigma)
	}
	t.Logf("%s served %d of %d RPCs (expected %.0f, sigma %.1f)", addrA, toA, n, mean, sigma)
}
