package istioctlcompat

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	appNS = "shop"
	appSA = "client"
	// appPod is the Pod pilot-agent stands for; istioctl names the proxy
	// <pod>.<namespace>.
	appPod = "client-0"
	// backendIP is from TEST-NET-1 (RFC 5737): the API server refuses
	// loopback endpoints, so the backend is registered here and the test's
	// dialer connects to 127.0.0.1 instead.
	backendIP = "192.0.2.10"
)

// proxy is Istio's pilot-agent, unchanged, in proxyless gRPC mode (as the
// grpc-agent injection template runs it) for the Pod client-0 of
// ServiceAccount client in namespace shop, with a grpc-go xDS client whose
// xDS goes through the agent to discovery.
type proxy struct {
	agent *child
}

// connectProxy starts pilot-agent against discovery's TLS port and a
// grpc-go client through it, and waits until an RPC has reached the
// backend: the proxy is then connected and has its configuration.
func connectProxy(t *testing.T, m *mesh, agentBin string) *proxy {
	t.Helper()
	ctx := context.Background()
	kc := m.env.Client
	backend, port := startBackend(t)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ServiceAccounts(appNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: appSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: appNS}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "echo"},
		Ports:    []corev1.ServicePort{{Name: "grpc", Port: 7070, TargetPort: intstr.FromInt32(port)}},
	}}
	if _, err := kc.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, ready := "grpc", true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: appNS, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{backendIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(appNS).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// What the kubelet would mount into the Pod: the mesh root, a token
	// for the audience istio-ca, an emptyDir for the certificates.
	root := t.TempDir()
	var rootPEM string
	waitFor(t, 30*time.Second, "istio-ca-root-cert in "+appNS, func() bool {
		cm, err := kc.CoreV1().ConfigMaps(appNS).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		if err == nil {
			rootPEM = cm.Data["root-cert.pem"]
		}
		return rootPEM != ""
	}, m.serve)
	writeFile(t, filepath.Join(root, "var/run/secrets/istio/root-cert.pem"), []byte(rootPEM))
	exp := int64(43200)
	tr, err := kc.CoreV1().ServiceAccounts(appNS).CreateToken(ctx, appSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}, ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "var/run/secrets/tokens/istio-token"), []byte(tr.Status.Token))
	certDir := filepath.Join(root, "var/lib/istio/data")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	configDir := filepath.Join(root, "etc/istio/proxy")
	bootstrap := filepath.Join(configDir, "grpc-bootstrap.json")
	statusPort := portOf(t, freeAddr(t))
	proxyConfig, _ := json.Marshal(map[string]any{"discoveryAddress": m.secure, "configPath": configDir, "statusPort": statusPort})
	cmd := exec.Command(agentBin, "proxy", "sidecar", "--domain", appNS+".svc.cluster.local",
		"--meshConfig", filepath.Join(root, "etc/istio/config/mesh"), "--log_output_level", "default:info")
	cmd.Dir = root
	cmd.Env = []string{
		"HOME=" + root, "PATH=/usr/bin:/bin",
		"ISTIO_META_GENERATOR=grpc", "OUTPUT_CERTS=" + certDir, "PILOT_CERT_PROVIDER=istiod",
		"POD_NAME=" + appPod, "POD_NAMESPACE=" + appNS, "INSTANCE_IP=127.0.0.1", "SERVICE_ACCOUNT=" + appSA, "HOST_IP=127.0.0.1",
		"PROXY_CONFIG=" + string(proxyConfig), "ISTIO_META_POD_PORTS=[]", "ISTIO_META_APP_CONTAINERS=app",
		"ISTIO_META_CLUSTER_ID=Kubernetes", "ISTIO_META_MESH_ID=cluster.local", "TRUST_DOMAIN=cluster.local",
		"ISTIO_META_DNS_CAPTURE=false", "DISABLE_ENVOY=true", "GRPC_XDS_BOOTSTRAP=" + bootstrap,
		// Stay on loopback: no cloud metadata probes.
		"CLOUD_PLATFORM=none",
		// The CA is the discovery address (an IP here); its serving
		// certificate is checked for istiod's name.
		"ISTIOD_SAN=istiod." + istioNS + ".svc",
	}
	p := &proxy{agent: startChild(t, "pilot-agent", cmd)}
	waitFor(t, 60*time.Second, "pilot-agent's gRPC bootstrap and xDS socket", func() bool {
		return fileExists(bootstrap) && fileExists(filepath.Join(configDir, "XDS"))
	}, p.agent, m.serve)
	raw, err := os.ReadFile(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	health := dialXDS(t, raw, "xds:///echo."+appNS+".svc.cluster.local:7070")
	waitFor(t, 60*time.Second, "an RPC through xDS to reach the backend "+backend, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := health.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err == nil
	}, p.agent, m.serve)
	return p
}

// startBackend serves gRPC health checks on loopback until t ends.
func startBackend(t *testing.T) (string, int32) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	done := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(done) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String(), portOf(t, lis.Addr().String())
}

// dialXDS connects to target with grpc-go's xDS resolver bootstrapped from
// pilot-agent's bootstrap; the backend's address is dialed on loopback.
func dialXDS(t *testing.T, bootstrap []byte, target string) healthpb.HealthClient {
	t.Helper()
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatalf("grpc-go refuses pilot-agent's bootstrap: %v\n%s", err, bootstrap)
	}
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != backendIP {
			return nil, fmt.Errorf("test dialer: %s is not the backend", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", port))
	}
	cc, err := grpc.NewClient(target, grpc.WithResolvers(resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}
