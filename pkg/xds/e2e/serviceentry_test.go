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

func staticEntryYAML(port int32) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo-ext, namespace: ns1}
spec:
  hosts: [echo.external.example]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports:
  - {number: 7070, name: grpc, protocol: GRPC}
  endpoints:
  - {address: 127.0.0.1, ports: {grpc: %d}}
`, port)
}

func selectedEntryYAML(port int32) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo-ext, namespace: ns1}
spec:
  hosts: [echo.external.example]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 7070, name: grpc, protocol: GRPC, targetPort: %d}
  workloadSelector:
    labels: {app: echo-vm}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-vm-1, namespace: ns1}
spec:
  address: 127.0.0.1
  labels: {app: echo-vm}
`, port)
}

// A grpc-go client dials a ServiceEntry host: first its inline endpoint,
// then, after an edit, the WorkloadEntry its workloadSelector picks.
func TestGRPCClientReachesAServiceEntry(t *testing.T) {
	addrA, portA := grpctest.Backend(t)
	addrB, portB := grpctest.Backend(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "entry.yaml")
	write(t, path, staticEntryYAML(portA))
	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	client := grpctest.Dial(t, grpctest.Bootstrap(serve(t, store), "ns1"), "xds:///echo.external.example:7070")
	client.Eventually(t, addrA)

	write(t, path, selectedEntryYAML(portB))
	client.Eventually(t, addrB)
	for i := 0; i < 10; i++ {
		if got, err := client.Call(); err != nil || got != addrB {
			t.Fatalf("RPC %d went to %q (%v), want the WorkloadEntry at %s", i, got, err, addrB)
		}
	}
}
