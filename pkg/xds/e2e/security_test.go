package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
)

// peerHeader carries, in the response headers, the URI SANs of the client
// certificate the server saw ("" for a plaintext connection).
const peerHeader = "x-test-peer-identity"

// recordPeer tells the client which identity the server saw on the call.
func recordPeer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id := ""
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			for _, u := range ti.State.PeerCertificates[0].URIs {
				id += u.String()
			}
		}
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(peerHeader, id))
	return handler(ctx, req)
}

// mtlsBackend starts grpc-go's xDS server with xDS credentials (plaintext
// when the control plane sends no security) on lis.
func mtlsBackend(t *testing.T, lis net.Listener, bootstrap []byte) {
	t.Helper()
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := xds.NewGRPCServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(recordPeer), xds.BootstrapContentsForTesting(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	healthpb.RegisterHealthServer(gs, health.NewServer())
	done := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(done) }()
	t.Cleanup(func() { gs.Stop(); <-done })
}

// mtlsClient dials target through xDS with xDS credentials, as a
// proxyless client with Istio's agent does.
func mtlsClient(t *testing.T, bootstrap []byte, target string) healthpb.HealthClient {
	t.Helper()
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithResolvers(r), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// identitySeen makes one call and returns the identity the server saw.
func identitySeen(t *testing.T, hc healthpb.HealthClient) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var md metadata.MD
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if v := md.Get(peerHeader); len(v) == 1 {
		return v[0]
	}
	return ""
}

// echoPodYAML is echo's pod (service account echo) and the slice that
// names it, at 127.0.0.1:port.
func echoPodYAML(port int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: echo-0, namespace: ns1, labels: {app: echo}}
spec: {serviceAccountName: echo, containers: [{name: app, image: echo}]}
status: {podIP: 127.0.0.1, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: ns1, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: %d}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-0, namespace: ns1}
`, port)
}

const istioMutualYAML = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: ns1}
spec:
  host: echo.ns1.svc.cluster.local
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
`

func peerAuthnYAML(mode string) string {
	return fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: ns1}
spec:
  mtls: {mode: %s}
`, mode)
}

const allowYYAML = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: only-y, namespace: ns1}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from:
    - source: {principals: [cluster.local/ns/x/sa/y]}
`

// A grpc-go xDS server under PeerAuthentication STRICT takes calls from a
// proxyless client whose DestinationRule says ISTIO_MUTUAL, over mTLS with
// certificates from our CA, and sees the client's SPIFFE identity; a
// plaintext client fails (and succeeds once the policy says DISABLE); an
// AuthorizationPolicy naming one principal admits that client and denies
// another identity.
func TestGRPCMutualTLS(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	write(t, filepath.Join(dir, "service.yaml"), echoServerYAML(port))
	write(t, filepath.Join(dir, "pod.yaml"), echoPodYAML(port))
	write(t, filepath.Join(dir, "dr.yaml"), istioMutualYAML)
	pa := filepath.Join(dir, "pa.yaml")
	write(t, pa, peerAuthnYAML("STRICT"))
	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	xdsAddr := serve(t, store)

	mesh := newMeshCA(t)
	mtlsBackend(t, lis, workloadBootstrap(t, xdsAddr, "echo-0", "ns1", map[string]string{"app": "echo"}, mesh.workload(t, "ns1", "echo")))
	const target = "xds:///echo.ns1.svc.cluster.local:7070"
	clientY := mtlsClient(t, workloadBootstrap(t, xdsAddr, "client-y", "x", nil, mesh.workload(t, "x", "y")), target)
	clientZ := mtlsClient(t, workloadBootstrap(t, xdsAddr, "client-z", "x", nil, mesh.workload(t, "x", "z")), target)

	eventuallyCode(t, clientY, codes.OK)
	if got, want := identitySeen(t, clientY), "spiffe://cluster.local/ns/x/sa/y"; got != want {
		t.Fatalf("server saw identity %q, want %q", got, want)
	}

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	plain := healthpb.NewHealthClient(cc)
	eventuallyCode(t, plain, codes.Unavailable)
	// The failure is STRICT's doing: under DISABLE the same client gets in
	// (and the ISTIO_MUTUAL clients cannot, their handshake finding
	// plaintext).
	write(t, pa, peerAuthnYAML("DISABLE"))
	eventuallyCode(t, plain, codes.OK)
	if got := identitySeen(t, plain); got != "" {
		t.Errorf("plaintext call carried identity %q", got)
	}
	eventuallyCode(t, clientY, codes.Unavailable)
	write(t, pa, peerAuthnYAML("STRICT"))
	eventuallyCode(t, clientY, codes.OK)

	write(t, filepath.Join(dir, "authz.yaml"), allowYYAML)
	eventuallyCode(t, clientZ, codes.PermissionDenied)
	eventuallyCode(t, clientY, codes.OK)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = clientZ.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("identity x/z under an ALLOW for x/y: %v, want PermissionDenied", err)
	}
}

// twoPodsYAML are two pods at 127.0.0.1, with service accounts echo and
// mallory.
const twoPodsYAML = `apiVersion: v1
kind: Pod
metadata: {name: echo-0, namespace: ns1, labels: {app: echo}}
spec: {serviceAccountName: echo, containers: [{name: app, image: echo}]}
status: {podIP: 127.0.0.1, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: echo-m, namespace: ns1, labels: {app: echo}}
spec: {serviceAccountName: mallory, containers: [{name: app, image: echo}]}
status: {podIP: 127.0.0.1, conditions: [{type: Ready, status: "True"}]}
`

// sliceToYAML is echo's slice: one endpoint, 127.0.0.1:port, of pod.
func sliceToYAML(port int, pod string) string {
	return fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: ns1, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: %d}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: %s, namespace: ns1}
`, port, pod)
}

// A proxyless client verifies the server against the service accounts of
// the service's endpoints: a server whose certificate names another
// account fails the handshake, and once an endpoints-only change puts that
// account behind the service, the clusters follow and the call succeeds.
func TestGRPCClientVerifiesServerIdentity(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	write(t, filepath.Join(dir, "service.yaml"), echoServerYAML(port))
	write(t, filepath.Join(dir, "pods.yaml"), twoPodsYAML)
	slice := filepath.Join(dir, "slice.yaml")
	write(t, slice, sliceToYAML(port, "echo-0"))
	write(t, filepath.Join(dir, "dr.yaml"), istioMutualYAML)
	write(t, filepath.Join(dir, "pa.yaml"), peerAuthnYAML("STRICT"))
	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	xdsAddr := serve(t, store)
	mesh := newMeshCA(t)
	mtlsBackend(t, lis, workloadBootstrap(t, xdsAddr, "echo-m", "ns1", map[string]string{"app": "echo"}, mesh.workload(t, "ns1", "mallory")))
	client := mtlsClient(t, workloadBootstrap(t, xdsAddr, "client-y", "x", nil, mesh.workload(t, "x", "y")), "xds:///echo.ns1.svc.cluster.local:7070")

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			t.Fatal("a server presenting ns1/mallory was accepted for a service whose only account is ns1/echo")
		}
		if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "handshake") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no handshake failure within 30s: last %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	write(t, slice, sliceToYAML(port, "echo-m"))
	eventuallyCode(t, client, codes.OK)
}
