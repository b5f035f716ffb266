package compat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/meshplane/discovery/internal/testenv"
)

const (
	appNS      = "compat"
	appSA      = "client"
	istiodSAN  = "istiod.istio-system.svc"
	grpcTarget = "xds:///echo." + appNS + ".svc.cluster.local:7070"
	// documentationIP is from TEST-NET-1 (RFC 5737) and never routed: the
	// API server refuses loopback endpoints, so the backend is registered
	// at this address and the test's dialer connects to 127.0.0.1 instead.
	documentationIP = "192.0.2.10"
)

// Istio's own agent, unchanged, gets a workload certificate from
// discovery's CA and proxies a grpc-go xDS client to discovery, which sends
// it the configuration that reaches a real backend registered in the API
// server.
func TestPilotAgentGetsCertificateAndProxiesXDS(t *testing.T) {
	agentBin := pilotAgentBinary(t)
	env := testenv.Start(t)
	backendAddr, backendPort := startBackend(t)
	registerBackend(t, env.Client, backendPort)

	secure := freeAddr(t)
	readiness := freeAddr(t)
	serve := startChild(t, "discovery", exec.Command(discoveryBinary(t), "serve",
		"--kubeconfig", env.Kubeconfig,
		"--grpc-address", freeAddr(t), "--secure-grpc-address", secure, "--webhook-address", freeAddr(t),
		"--monitoring-address", freeAddr(t), "--readiness-address", readiness))
	waitFor(t, 60*time.Second, "discovery /ready", func() bool {
		resp, err := http.Get("http://" + readiness + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, serve)

	root := t.TempDir()
	rootPEM := meshRoot(t, env.Client, serve)
	writeFile(t, filepath.Join(root, "var/run/secrets/istio/root-cert.pem"), rootPEM)
	token := saToken(t, env.Client)
	writeFile(t, filepath.Join(root, "var/run/secrets/tokens/istio-token"), []byte(token))

	a := newAgent(root, secure, int(portOf(t, freeAddr(t))))
	// In a Pod OUTPUT_CERTS is an emptyDir mount: pilot-agent writes into
	// it but does not create it.
	if err := os.MkdirAll(a.certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := startChild(t, "pilot-agent", a.command(agentBin))

	// (1) The certificate pilot-agent got from discovery's CA.
	waitFor(t, 60*time.Second, "pilot-agent to write its workload certificate", func() bool {
		return fileExists(filepath.Join(a.certDir, "cert-chain.pem")) && fileExists(filepath.Join(a.certDir, "key.pem")) &&
			fileExists(filepath.Join(a.certDir, "root-cert.pem"))
	}, agent, serve)
	checkWorkloadCert(t, a.certDir, rootPEM)

	// (2) grpc-go's xDS client, with the bootstrap pilot-agent wrote, talks
	// to discovery through pilot-agent's local xDS proxy.
	waitFor(t, 30*time.Second, "pilot-agent's gRPC bootstrap and xDS socket", func() bool {
		return fileExists(a.bootstrap) && fileExists(a.xdsSocket)
	}, agent, serve)
	bootstrap, err := os.ReadFile(a.bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	checkBootstrap(t, bootstrap, a)
	client := dialXDS(t, bootstrap, grpcTarget, map[string]string{documentationIP: "127.0.0.1"})
	client.eventually(t, backendAddr, agent, serve)

	for name, c := range map[string]*child{"discovery": serve, "pilot-agent": agent} {
		if strings.Contains(c.out.String(), token) {
			t.Errorf("%s logged the service-account token", name)
		}
	}
	if !strings.Contains(agent.out.String(), "connected to upstream XDS server: "+secure) {
		t.Errorf("pilot-agent's log does not show its upstream connection to %s", secure)
	}
}

// registerBackend creates the namespaces, the client's ServiceAccount, and
// the Service echo (grpc port 7070) with one EndpointSlice endpoint at
// documentationIP:port.
func registerBackend(t *testing.T, kc kubernetes.Interface, port int32) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"istio-system", appNS} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: appSA, Namespace: appNS}}
	if _, err := kc.CoreV1().ServiceAccounts(appNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: appNS},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 7070, TargetPort: intstr.FromInt32(port)}},
		},
	}
	if _, err := kc.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, ready := "grpc", true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: appNS, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{documentationIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(appNS).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// meshRoot waits for discovery to publish the ConfigMap istio-ca-root-cert
// in the application's namespace and returns its root-cert.pem.
func meshRoot(t *testing.T, kc kubernetes.Interface, serve *child) []byte {
	t.Helper()
	var rootPEM string
	waitFor(t, 30*time.Second, "istio-ca-root-cert in "+appNS, func() bool {
		cm, err := kc.CoreV1().ConfigMaps(appNS).Get(context.Background(), "istio-ca-root-cert", metav1.GetOptions{})
		if err == nil {
			rootPEM = cm.Data["root-cert.pem"]
		}
		return rootPEM != ""
	}, serve)
	return []byte(rootPEM)
}

// saToken is a TokenRequest token of the client's ServiceAccount for the
// audience istio-ca, as the kubelet projects it into a Pod.
func saToken(t *testing.T, kc kubernetes.Interface) string {
	t.Helper()
	exp := int64(43200)
	tr, err := kc.CoreV1().ServiceAccounts(appNS).CreateToken(context.Background(), appSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}, ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// checkWorkloadCert verifies what pilot-agent wrote to OUTPUT_CERTS: a key
// and a chain of more than one certificate for the client's SPIFFE
// identity, 24 h long (pilot-agent asks for 86400 s), chaining to the
// mesh root of the ConfigMap.
func checkWorkloadCert(t *testing.T, dir string, rootPEM []byte) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert-chain.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatalf("pilot-agent's key and certificate: %v", err)
	}
	if len(pair.Certificate) < 2 {
		t.Errorf("chain of %d certificates; pilot-agent needs more than one", len(pair.Certificate))
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	want := "spiffe://cluster.local/ns/" + appNS + "/sa/" + appSA
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want {
		t.Errorf("workload certificate URIs %v, want [%s]", leaf.URIs, want)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life < 23*time.Hour || life > 25*time.Hour {
		t.Errorf("workload certificate lives %s, want the 24h pilot-agent asked for", life)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatal("no certificate in istio-ca-root-cert")
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("workload certificate does not chain to the mesh root: %v", err)
	}
	written, err := os.ReadFile(filepath.Join(dir, "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(written); b == nil || !roots.Equal(poolOf(t, written)) {
		t.Errorf("pilot-agent's root-cert.pem is not the mesh root:\n%s", written)
	}
}

func poolOf(t *testing.T, pemBytes []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("no certificate in %q", pemBytes)
	}
	return p
}

// checkBootstrap checks that the bootstrap pilot-agent wrote points grpc-go
// at its local xDS socket with Istio's proxyless node.
func checkBootstrap(t *testing.T, raw []byte, a *agentSetup) {
	t.Helper()
	var b struct {
		XDSServers []struct {
			ServerURI string `json:"server_uri"`
		} `json:"xds_servers"`
		Node struct {
			ID       string         `json:"id"`
			Metadata map[string]any `json:"metadata"`
		} `json:"node"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("pilot-agent's gRPC bootstrap: %v\n%s", err, raw)
	}
	if len(b.XDSServers) != 1 || !strings.HasSuffix(b.XDSServers[0].ServerURI, a.xdsSocket) {
		t.Errorf("bootstrap xds_servers %+v, want the agent's socket %s", b.XDSServers, a.xdsSocket)
	}
	if b.Node.Metadata["GENERATOR"] != "grpc" || b.Node.Metadata["NAMESPACE"] != appNS {
		t.Errorf("bootstrap node metadata GENERATOR=%v NAMESPACE=%v, want grpc and %s",
			b.Node.Metadata["GENERATOR"], b.Node.Metadata["NAMESPACE"], appNS)
	}
	if want := "sidecar~127.0.0.1~client-0." + appNS + "~" + appNS + ".svc.cluster.local"; b.Node.ID != want {
		t.Errorf("bootstrap node id %q, want %q", b.Node.ID, want)
	}
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
