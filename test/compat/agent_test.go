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
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/xds/proxystatus"
)

const (
	appNS      = "compat"
	appSA      = "client"
	istiodSAN  = "istiod.istio-system.svc"
	grpcTarget = "xds:///echo." + appNS + ".svc.cluster.local:7070"
	// nodeID is the node pilot-agent makes for Pod client-0 at 127.0.0.1.
	nodeID = "sidecar~127.0.0.1~client-0." + appNS + "~" + appNS + ".svc.cluster.local"
	// documentationIP is from TEST-NET-1 (RFC 5737) and never routed: the
	// API server refuses loopback endpoints, so the backend is registered
	// at this address and the test's dialer connects to 127.0.0.1 instead.
	documentationIP = "192.0.2.10"
)

// Istio's own agent, unchanged, gets a workload certificate from
// discovery's CA and proxies a grpc-go xDS client to discovery, which sends
// it the configuration that reaches a real backend registered in the API
// server, and then a change of that backend.
func TestPilotAgentGetsCertificateAndProxiesXDS(t *testing.T) {
	agentBin := pilotAgentBinary(t)
	env := testenv.Start(t)
	backendAddr, backendPort := startBackend(t)
	registerBackend(t, env.Client, backendPort)
	d := startDiscovery(t, env.Kubeconfig)

	a := newAgent(t.TempDir(), d.secure, int(portOf(t, freeAddr(t))))
	token := a.prepare(t, env.Client, d.proc)
	started := time.Now()
	agent := startChild(t, "pilot-agent", a.command(agentBin))

	// (1) The certificate pilot-agent got from discovery's CA.
	waitFor(t, 60*time.Second, "pilot-agent to write its workload certificate", func() bool {
		return fileExists(filepath.Join(a.certDir, "cert-chain.pem")) && fileExists(filepath.Join(a.certDir, "key.pem")) &&
			fileExists(filepath.Join(a.certDir, "root-cert.pem"))
	}, agent, d.proc)
	certAfter := time.Since(started)
	checkWorkloadCert(t, a.certDir, a.rootPEM)
	waitFor(t, 30*time.Second, "pilot-agent's /healthz/ready", func() bool {
		return httpStatus("http://127.0.0.1:"+strconv.Itoa(a.statusPort)+"/healthz/ready") == http.StatusOK
	}, agent, d.proc)

	// (2) grpc-go's xDS client, with the bootstrap pilot-agent wrote, talks
	// to discovery through pilot-agent's local xDS proxy.
	waitFor(t, 30*time.Second, "pilot-agent's gRPC bootstrap and xDS socket", func() bool {
		return fileExists(a.bootstrap) && fileExists(a.xdsSocket)
	}, agent, d.proc)
	bootstrap, err := os.ReadFile(a.bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	checkBootstrap(t, bootstrap, a)
	client := dialXDS(t, bootstrap, grpcTarget, map[string]string{documentationIP: "127.0.0.1"})
	client.eventually(t, backendAddr, agent, d.proc)
	rpcAfter := time.Since(started)
	checkSynced(t, d.monitor, nodeID)

	// A change in the API server reaches the client through the agent.
	movedAddr, movedPort := startBackend(t)
	moveBackend(t, env.Client, movedPort)
	changed := time.Now()
	client.eventually(t, movedAddr, agent, d.proc)
	t.Logf("pilot-agent start -> workload certificate %s, -> first RPC through xDS %s; EndpointSlice update -> RPC to the new port %s",
		certAfter.Round(time.Millisecond), rpcAfter.Round(time.Millisecond), time.Since(changed).Round(time.Millisecond))

	for name, c := range map[string]*child{"discovery": d.proc, "pilot-agent": agent} {
		if strings.Contains(c.out.String(), token) {
			t.Errorf("%s logged the service-account token", name)
		}
	}
	if !strings.Contains(agent.out.String(), "connected to upstream XDS server: "+d.secure) {
		t.Errorf("pilot-agent's log does not show its upstream connection to %s", d.secure)
	}
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
	if b.Node.ID != nodeID {
		t.Errorf("bootstrap node id %q, want %q", b.Node.ID, nodeID)
	}
}

// checkSynced reads discovery's /debug/syncz: the stream pilot-agent
// proxies is there as the agent's node, and every type it was sent is
// acknowledged, none refused.
func checkSynced(t *testing.T, monitor, id string) {
	t.Helper()
	var row *proxystatus.Proxy
	waitFor(t, 10*time.Second, "every type of "+id+" SYNCED in /debug/syncz", func() bool {
		proxies, err := proxystatus.Fetch(context.Background(), http.DefaultClient, "http://"+monitor)
		if err != nil {
			return false
		}
		row = nil
		for i := range proxies {
			if proxies[i].ID == id {
				row = &proxies[i]
			}
		}
		if row == nil || len(row.Types) < 4 {
			return false
		}
		for _, ts := range row.Types {
			if proxystatus.State(ts) != "SYNCED" {
				return false
			}
		}
		return true
	})
	t.Logf("discovery's /debug/syncz for %s: class %s, delta %v, %d types SYNCED", id, row.Class, row.Delta, len(row.Types))
	for typ, ts := range row.Types {
		if ts.NACKs != 0 {
			t.Errorf("%s: %d NACKs of %s (last: %+v)", id, ts.NACKs, typ, ts.LastNACK)
		}
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
