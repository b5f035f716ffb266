// Package testenv runs a real Kubernetes API server for integration tests:
// etcd and kube-apiserver as child processes on free loopback ports, with
// temporary directories, a service-account issuer and signing key (so
// TokenRequest and TokenReview work), a static admin token, RBAC, and the
// admission webhook plugins. Everything is stopped when the test ends,
// whether it passed or not.
//
// The binaries come from hack/testenv.sh, which installs etcd and builds
// kube-apiserver; its output sets TESTENV_ETCD and TESTENV_KUBE_APISERVER.
// Without them testenv looks in the repository's .cache/bin and /usr/bin.
// When they cannot be found the test fails if TESTENV_REQUIRED or CI is set
// (as in `make test` and CI), and is skipped with the reason otherwise.
package testenv

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminToken is the static bearer token of the admin user (group
// system:masters). It exists only in the test API server.
const AdminToken = "testenv-admin-token"

// ServiceAccountIssuer is the issuer of service-account tokens.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Env is a running etcd and kube-apiserver.
type Env struct {
	// Config is an admin rest.Config for the API server.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// Kubeconfig is the path of a kubeconfig file for other processes.
	Kubeconfig string
	// Host is the API server's https URL.
	Host string

	dir       string
	apiserver string
	apiArgs   []string
	apiPort   int
	etcdBin   string
	etcdArgs  []string
	etcdURL   string

	mu      sync.Mutex
	etcd    *process
	api     *process
	logsDir string
}

// Start starts etcd and kube-apiserver and waits until the API server is
// ready. Both stop when t ends.
func Start(t testing.TB) *Env {
	t.Helper()
	etcdBin, apiBin, err := binaries()
	if err != nil {
		if os.Getenv("TESTENV_REQUIRED") != "" || os.Getenv("CI") != "" {
			t.Fatalf("testenv: %v", err)
		}
		t.Skipf("testenv: integration test skipped: %v (run `make test`, which builds them)", err)
	}
	dir := t.TempDir()
	e := &Env{dir: dir, apiserver: apiBin, etcdBin: etcdBin, logsDir: filepath.Join(dir, "logs")}
	if err := os.MkdirAll(e.logsDir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(e.stop)
	if err := e.startEtcd(); err != nil {
		t.Fatalf("testenv: start etcd: %v", err)
	}
	if err := e.prepareAPIServer(); err != nil {
		t.Fatalf("testenv: prepare kube-apiserver: %v", err)
	}
	if err := e.startAPIServer(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := e.writeClients(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return e
}

func binaries() (etcd, apiserver string, err error) {
	root := repoRoot()
	etcd = firstExecutable(os.Getenv("TESTENV_ETCD"), filepath.Join(root, ".cache/bin/etcd"), "/usr/bin/etcd", "/usr/local/bin/etcd")
	apiserver = firstExecutable(os.Getenv("TESTENV_KUBE_APISERVER"), filepath.Join(root, ".cache/bin/kube-apiserver"))
	var missing []string
	if etcd == "" {
		missing = append(missing, "etcd")
	}
	if apiserver == "" {
		missing = append(missing, "kube-apiserver")
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("%v not found; hack/testenv.sh installs them", missing)
	}
	return etcd, apiserver, nil
}

func firstExecutable(paths ...string) string {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// repoRoot finds the module root by walking up to go.mod.
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// handedOut are the ports FreePort has returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback TCP port that was free a moment ago and that
// it has not returned before in this process. The kernel can hand out a
// port just closed again at once: two calls for one server's addresses
// once gave the same port, and the server failed to bind its second
// listener.
//
// The port is drawn at random below the kernel's ephemeral range
// (ip_local_port_range), which the kernel never hands to a connection
// of its own accord. A port the kernel chose (":0") was once taken, in
// the moment between FreePort and the server's bind, by an outgoing
// connection of a test running beside it (a serve test's webhook port,
// in CI).
func FreePort() (int, error) {
	lo, hi := belowEphemeral()
	for range 100 {
		port := 0
		if hi > lo {
			port = lo + mrand.IntN(hi-lo)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			if port != 0 {
				continue // taken
			}
			return 0, err
		}
		port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		handedOut.Lock()
		again := handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if !again {
			return port, nil
		}
	}
	return 0, errors.New("no loopback port that was not handed out before in 100 tries")
}

// belowEphemeral is the range FreePort draws from: from 10000 to the
// start of the kernel's ephemeral ports; empty (0, 0) when that start
// cannot be read or leaves no room, and FreePort lets the kernel choose.
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, 0
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start <= 10000+1000 {
		return 0, 0
	}
	return 10000, start
}

func (e *Env) startEtcd() error {
	client, err := FreePort()
	if err != nil {
		return err
	}
	peer, err := FreePort()
	if err != nil {
		return err
	}
	cu := "http://127.0.0.1:" + strconv.Itoa(client)
	pu := "http://127.0.0.1:" + strconv.Itoa(peer)
	e.etcdURL = cu
	e.etcdArgs = []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(e.dir, "etcd"),
		"--listen-client-urls=" + cu, "--advertise-client-urls=" + cu,
		"--listen-peer-urls=" + pu, "--initial-advertise-peer-urls=" + pu,
		"--initial-cluster=testenv=" + pu,
		"--log-level=warn",
	}
	e.apiArgs = append(e.apiArgs, "--etcd-servers="+cu)
	return e.runEtcd()
}

// runEtcd starts etcd with the Env's addresses and data directory.
func (e *Env) runEtcd() error {
	p, err := startProcess(e.etcdBin, filepath.Join(e.logsDir, "etcd.log"), e.etcdArgs...)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.etcd = p
	e.mu.Unlock()
	return waitHTTP(p, e.etcdURL+"/health", nil, 60*time.Second)
}

func (e *Env) prepareAPIServer() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	keyFile := filepath.Join(e.dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pubFile := filepath.Join(e.dir, "sa.pub")
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	tokens := filepath.Join(e.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(AdminToken+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		return err
	}
	if e.apiPort, err = FreePort(); err != nil {
		return err
	}
	e.Host = "https://127.0.0.1:" + strconv.Itoa(e.apiPort)
	e.apiArgs = append(e.apiArgs,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The kubernetes Service endpoint cannot be a loopback address.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(e.apiPort),
		"--cert-dir="+filepath.Join(e.dir, "certs"),
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer="+ServiceAccountIssuer,
		"--service-account-key-file="+pubFile,
		"--service-account-signing-key-file="+keyFile,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		// No controller-manager runs here, so no namespace gets its
		// "default" ServiceAccount: the ServiceAccount admission plugin
		// would refuse every Pod. The webhook plugins stay on.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	)
	return nil
}

func (e *Env) startAPIServer() error {
	p, err := startProcess(e.apiserver, filepath.Join(e.logsDir, "kube-apiserver.log"), e.apiArgs...)
	if err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	e.mu.Lock()
	e.api = p
	e.mu.Unlock()
	hdr := http.Header{"Authorization": []string{"Bearer " + AdminToken}}
	if err := waitHTTP(p, e.Host+"/readyz", hdr, 120*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver not ready: %w; log tail:\n%s", err, tail(filepath.Join(e.logsDir, "kube-apiserver.log")))
	}
	return nil
}

func (e *Env) writeClients() error {
	ca, err := os.ReadFile(filepath.Join(e.dir, "certs", "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("read serving certificate: %w", err)
	}
	e.Config = &rest.Config{
		Host:            e.Host,
		BearerToken:     AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS:             1000,
		Burst:           2000,
	}
	if e.Client, err = kubernetes.NewForConfig(e.Config); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: e.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: AdminToken}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	kc.CurrentContext = "testenv"
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	return clientcmd.WriteToFile(*kc, e.Kubeconfig)
}

// StopAPIServer stops kube-apiserver, leaving etcd running.
func (e *Env) StopAPIServer(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	p := e.api
	e.api = nil
	e.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address with the same etcd, and waits until it is ready.
func (e *Env) StartAPIServer(t testing.TB) {
	t.Helper()
	if err := e.startAPIServer(); err != nil {
		t.Fatalf("testenv: restart: %v", err)
	}
}

// StopEtcd stops etcd (SIGTERM), leaving kube-apiserver running without
// its storage.
func (e *Env) StopEtcd(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	p := e.etcd
	e.etcd = nil
	e.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// StartEtcd starts etcd again after StopEtcd, on the same addresses with
// the same data, and waits until it is healthy.
func (e *Env) StartEtcd(t testing.TB) {
	t.Helper()
	if err := e.runEtcd(); err != nil {
		t.Fatalf("testenv: restart etcd: %v", err)
	}
}

// CompactEtcd writes a key of its own to etcd (outside the API server's
// prefix, so that the revision moves past every object's
// resourceVersion) and compacts etcd's history up to that revision, which
// it returns. A watch that resumes from an older resourceVersion then
// expires (410 Gone) and its client must list again. etcd must be
// running; kube-apiserver need not be.
func (e *Env) CompactEtcd(t testing.TB) int64 {
	t.Helper()
	rev, err := e.etcdRevisionAfterPut()
	if err != nil {
		t.Fatalf("testenv: etcd put: %v", err)
	}
	body := fmt.Sprintf(`{"revision":"%d","physical":true}`, rev)
	if _, err := e.etcdPost("/v3/kv/compaction", body); err != nil {
		t.Fatalf("testenv: etcd compaction at %d: %v", rev, err)
	}
	return rev
}

// etcdRevisionAfterPut writes /testenv/compact and returns the revision
// of the write.
func (e *Env) etcdRevisionAfterPut() (int64, error) {
	key := base64.StdEncoding.EncodeToString([]byte("/testenv/compact"))
	val := base64.StdEncoding.EncodeToString([]byte(time.Now().String()))
	out, err := e.etcdPost("/v3/kv/put", fmt.Sprintf(`{"key":%q,"value":%q}`, key, val))
	if err != nil {
		return 0, err
	}
	var resp struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return 0, fmt.Errorf("put answer %q: %w", out, err)
	}
	return strconv.ParseInt(resp.Header.Revision, 10, 64)
}

// etcdPost calls etcd's JSON gateway (the v3 API over HTTP).
func (e *Env) etcdPost(path, body string) ([]byte, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post(e.etcdURL+path, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, bytes.TrimSpace(out))
	}
	return out, nil
}

// APIServerLog returns what kube-apiserver has logged so far.
func (e *Env) APIServerLog() string {
	b, _ := os.ReadFile(filepath.Join(e.logsDir, "kube-apiserver.log"))
	return string(b)
}

func (e *Env) stop() {
	e.mu.Lock()
	api, etcd := e.api, e.etcd
	e.api, e.etcd = nil, nil
	e.mu.Unlock()
	if api != nil {
		api.stop()
	}
	if etcd != nil {
		etcd.stop()
	}
}

// process is a child process in its own process group.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

func startProcess(bin, logFile string, args ...string) (*process, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, and killed if the test binary dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.log.Close()
}

// waitHTTP polls url until it answers 200, the process exits, or timeout.
func waitHTTP(p *process, url string, hdr http.Header, timeout time.Duration) error {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // only to poll readiness of a server whose CA is not written yet
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header = hdr
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("process exited: %w (last: %w)", p.err, last)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}
