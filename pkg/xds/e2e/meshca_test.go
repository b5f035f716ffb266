package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// meshCA issues workload certificates the way the CA service does for
// Istio's agent (pkg/ca's Authority, from a fresh self-signed root for
// cluster.local), without the gRPC service in front of it.
type meshCA struct {
	authority *ca.Authority
}

func newMeshCA(t *testing.T) *meshCA {
	t.Helper()
	b, err := ca.NewSelfSignedBundle(gen.DefaultTrustDomain, "ECDSA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &meshCA{authority: ca.NewAuthority(b)}
}

// workload writes what Istio's agent keeps for a proxyless gRPC workload
// of service account ns/sa, cert-chain.pem, key.pem and root-cert.pem, to
// a new directory and returns it.
func (m *meshCA) workload(t *testing.T, ns, sa string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := ca.Identity{TrustDomain: gen.DefaultTrustDomain, Namespace: ns, ServiceAccount: sa}
	chain, _, err := m.authority.SignWorkload(key.Public(), id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"cert-chain.pem": strings.Join(chain, ""),
		"key.pem":        string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"root-cert.pem":  string(m.authority.Bundle().RootPEM()),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// workloadBootstrap is the bootstrap Istio's agent writes for a proxyless
// gRPC workload (pod in namespace ns, with labels) whose certificates are
// in certDir: the xDS server, the node, the server listener name template
// and the "default" file_watcher certificate provider.
func workloadBootstrap(t *testing.T, xdsAddr, pod, ns string, labels map[string]string, certDir string) []byte {
	t.Helper()
	b := map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri": xdsAddr, "channel_creds": []any{map[string]any{"type": "insecure"}}, "server_features": []any{"xds_v3"},
		}},
		"node": map[string]any{
			"id":       "sidecar~127.0.0.1~" + pod + "." + ns + "~" + ns + ".svc.cluster.local",
			"metadata": map[string]any{"GENERATOR": "grpc", "NAMESPACE": ns, "LABELS": labels},
		},
		"server_listener_resource_name_template": gen.GRPCServerListenerPrefix + "%s",
		"certificate_providers": map[string]any{gen.GRPCCertProvider: map[string]any{
			"plugin_name": "file_watcher",
			"config": map[string]any{
				"certificate_file":    filepath.Join(certDir, "cert-chain.pem"),
				"private_key_file":    filepath.Join(certDir, "key.pem"),
				"ca_certificate_file": filepath.Join(certDir, "root-cert.pem"),
				"refresh_interval":    "900s",
			},
		}},
	}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
