package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// serverBootstrap is the bootstrap Istio's agent writes for a proxyless
// gRPC server: the xDS server, the node (namespace ns, labels app=echo) and
// the template of the server-side listener's name.
func serverBootstrap(xdsAddr, ns string) []byte {
	return []byte(fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "sidecar~127.0.0.1~echo-0.%s~%s.svc.cluster.local", "metadata": {"GENERATOR": "grpc", "NAMESPACE": %q, "LABELS": {"app": "echo"}}},
  "server_listener_resource_name_template": %q
}`, xdsAddr, ns, ns, ns, gen.GRPCServerListenerPrefix+"%s"))
}

// xdsBackend starts grpc-go's xDS-enabled server on lis, serving health
// checks; it stops when t ends.
func xdsBackend(t *testing.T, lis net.Listener, bootstrap []byte) {
	t.Helper()
	gs, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()), xds.BootstrapContentsForTesting(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	healthpb.RegisterHealthServer(gs, health.NewServer())
	done := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(done) }()
	t.Cleanup(func() { gs.Stop(); <-done })
}

func echoServerYAML(port int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: echo, namespace: ns1}
spec:
  clusterIP: 10.96.0.50
  selector: {app: echo}
  ports:
  - {name: grpc, port: 7070, targetPort: %d}
`, port)
}

const denyCheckYAML = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-check, namespace: ns1}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules:
  - to:
    - operation: {paths: [/grpc.health.v1.Health/Check]}
`

// allowWatchYAML allows only Watch from the root namespace: Check is
// denied because no ALLOW rule matches it.
const allowWatchYAML = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: watch-only, namespace: istio-system}
spec:
  rules:
  - to:
    - operation: {methods: [POST], paths: ["/grpc.health.v1.Health/Watch"]}
`

// eventuallyCode calls Check until it ends with want, failing t after 30 s.
func eventuallyCode(t *testing.T, hc healthpb.HealthClient, want codes.Code) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if status.Code(err) == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("Check did not end with %v within 30s: last %v", want, err)
}

// A grpc-go xDS server enforces the AuthorizationPolicies that select it:
// a DENY on its method makes calls fail with PERMISSION_DENIED, removing
// it lets them through, and an ALLOW policy that names only another method
// denies this one.
func TestGRPCServerEnforcesAuthorizationPolicy(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "service.yaml"), echoServerYAML(lis.Addr().(*net.TCPAddr).Port))
	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	xdsBackend(t, lis, serverBootstrap(serve(t, store), "ns1"))

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	hc := healthpb.NewHealthClient(cc)
	eventuallyCode(t, hc, codes.OK)

	policy := filepath.Join(dir, "policy.yaml")
	write(t, policy, denyCheckYAML)
	eventuallyCode(t, hc, codes.PermissionDenied)

	if err := os.Remove(policy); err != nil {
		t.Fatal(err)
	}
	eventuallyCode(t, hc, codes.OK)

	write(t, policy, allowWatchYAML)
	eventuallyCode(t, hc, codes.PermissionDenied)
}
