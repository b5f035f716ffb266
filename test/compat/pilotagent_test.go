package compat

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// agentSetup is how pilot-agent runs in the test: everything it would find
// in a Pod (/etc/istio/proxy, /var/run/secrets/..., /var/lib/istio/data)
// lives under root. pilot-agent's own defaults for these are relative to
// its working directory ("./etc/istio/proxy", "./var/run/secrets/tokens/
// istio-token", "./var/run/secrets/istio/root-cert.pem", ...), so it runs
// in root; the ones that end up in the gRPC bootstrap are made absolute
// through PROXY_CONFIG and the environment.
type agentSetup struct {
	root      string
	caAddr    string
	configDir string // ProxyConfig.configPath: the XDS socket lives here
	xdsSocket string
	bootstrap string // GRPC_XDS_BOOTSTRAP
	certDir   string // OUTPUT_CERTS
	// statusPort is pilot-agent's status server (/healthz/ready).
	statusPort int
	// rootPEM is the mesh root, from the ConfigMap istio-ca-root-cert.
	rootPEM []byte
}

func newAgent(root, caAddr string, statusPort int) *agentSetup {
	configDir := filepath.Join(root, "etc/istio/proxy")
	return &agentSetup{
		root:       root,
		caAddr:     caAddr,
		configDir:  configDir,
		xdsSocket:  filepath.Join(configDir, "XDS"),
		bootstrap:  filepath.Join(configDir, "grpc-bootstrap.json"),
		certDir:    filepath.Join(root, "var/lib/istio/data"),
		statusPort: statusPort,
	}
}

// prepare puts in root what the kubelet would mount into the Pod: the
// mesh root from the ConfigMap istio-ca-root-cert, a service-account token
// for the audience istio-ca, and the empty OUTPUT_CERTS directory (an
// emptyDir: pilot-agent writes into it but does not create it). It returns
// the token.
func (a *agentSetup) prepare(t *testing.T, kc kubernetes.Interface, serve *child) string {
	t.Helper()
	a.rootPEM = meshRoot(t, kc, serve)
	writeFile(t, filepath.Join(a.root, "var/run/secrets/istio/root-cert.pem"), a.rootPEM)
	token := saToken(t, kc)
	writeFile(t, filepath.Join(a.root, "var/run/secrets/tokens/istio-token"), []byte(token))
	if err := os.MkdirAll(a.certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return token
}

// command is pilot-agent as Istio's grpc-agent injection template runs it
// (`pilot-agent proxy sidecar` with that template's environment), with the
// Pod's downward-API values filled in for a Pod client-0 of ServiceAccount
// client in namespace compat at 127.0.0.1.
func (a *agentSetup) command(bin string) *exec.Cmd {
	proxyConfig, _ := json.Marshal(map[string]any{
		// discovery serves xDS and the CA on the same TLS port, as istiod.
		"discoveryAddress": a.caAddr,
		"configPath":       a.configDir,
		// pilot-agent refuses 0 here ("invalid status port"), and its
		// status server listens on every interface (":port"), not only
		// loopback: the test gives it a free port and probes it on
		// 127.0.0.1.
		"statusPort": a.statusPort,
	})
	cmd := exec.Command(bin, "proxy", "sidecar",
		"--domain", appNS+".svc.cluster.local",
		"--meshConfig", filepath.Join(a.root, "etc/istio/config/mesh"),
		"--log_output_level", "default:info")
	cmd.Dir = a.root
	cmd.Env = []string{
		"HOME=" + a.root,
		"PATH=/usr/bin:/bin",
		// From the grpc-agent template.
		"ISTIO_META_GENERATOR=grpc",
		"OUTPUT_CERTS=" + a.certDir,
		"PILOT_CERT_PROVIDER=istiod",
		"POD_NAME=client-0",
		"POD_NAMESPACE=" + appNS,
		"INSTANCE_IP=127.0.0.1",
		"SERVICE_ACCOUNT=" + appSA,
		"HOST_IP=127.0.0.1",
		"PROXY_CONFIG=" + string(proxyConfig),
		"ISTIO_META_POD_PORTS=[]",
		"ISTIO_META_APP_CONTAINERS=app",
		"ISTIO_META_CLUSTER_ID=Kubernetes",
		"ISTIO_META_MESH_ID=cluster.local",
		"TRUST_DOMAIN=cluster.local",
		"ISTIO_META_DNS_CAPTURE=false",
		"DISABLE_ENVOY=true",
		"GRPC_XDS_BOOTSTRAP=" + a.bootstrap,
		// Not in the template: without it pilot-agent probes cloud
		// metadata servers (169.254.169.254, fd00:ec2::254) and DNS to
		// find its platform. The test stays on loopback.
		"CLOUD_PLATFORM=none",
		// The template's CA_ADDR is istiod.istio-system.svc:15012, a name
		// that does not resolve here. Without CA_ADDR pilot-agent uses the
		// discovery address for the CA too, and checks both serving
		// certificates for ISTIOD_SAN (with CA_ADDR set it would check the
		// CA's for the host of CA_ADDR, an IP here): as a VM is set up.
		"ISTIOD_SAN=" + istiodSAN,
	}
	return cmd
}
