package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
)

// discoveryBinary is the real discovery command, built once per run.
func discoveryBinary(t *testing.T) string {
	t.Helper()
	return testenv.DiscoveryBinary(t)
}

// proc is a running `discovery serve`.
type proc struct {
	cmd       *exec.Cmd
	out       *syncBuffer
	done      chan struct{}
	monitor   string
	readiness string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) string {
	t.Helper()
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

func startServe(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{out: &syncBuffer{}, done: make(chan struct{}), monitor: freePort(t), readiness: freePort(t)}
	args = append([]string{
		"serve",
		"--grpc-address", freePort(t), "--secure-grpc-address", freePort(t), "--webhook-address", freePort(t),
		"--monitoring-address", p.monitor, "--readiness-address", p.readiness,
	}, args...)
	p.cmd = exec.Command(discoveryBinary(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("discovery output:\n%s", p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("discovery did not exit within 30s of SIGTERM")
	}
	return p.cmd.ProcessState.ExitCode()
}

func httpGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) waitReady(t *testing.T) {
	t.Helper()
	waitFor(t, 60*time.Second, "/ready to answer 200", func() bool {
		code, _, _ := httpGet("http://" + p.readiness + "/ready")
		return code == http.StatusOK
	})
}

func TestFileModeServesTheDirectoryAndFollowsEdits(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) {
		t.Helper()
		tmp := filepath.Join(dir, ".svc.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "svc.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	write(`apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  ports: [{name: http, port: 9080}]
`)
	p := startServe(t, "--config-dir", dir, "--ca-dir", t.TempDir())
	p.waitReady(t)
	hosts := func() []string {
		_, body, err := httpGet("http://" + p.monitor + "/debug/registryz")
		if err != nil {
			return nil
		}
		var reg []struct {
			Hostname string `json:"hostname"`
		}
		if json.Unmarshal([]byte(body), &reg) != nil {
			return nil
		}
		var out []string
		for _, s := range reg {
			out = append(out, s.Hostname)
		}
		return out
	}
	waitFor(t, 10*time.Second, "reviews in /debug/registryz", func() bool {
		return strings.Join(hosts(), ",") == "reviews.shop.svc.cluster.local"
	})
	write(`apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: shop}
spec:
  ports: [{name: http, port: 9080}]
`)
	waitFor(t, 10*time.Second, "ratings to replace reviews", func() bool {
		return strings.Join(hosts(), ",") == "ratings.shop.svc.cluster.local"
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

func TestServeRefusesBadFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"an unknown log format":        {[]string{"--log-format", "xml"}, "--log-format"},
		"a config dir that is missing": {[]string{"--config-dir", "/nonexistent/dir"}, "--config-dir"},
		"a domain suffix with a dot":   {[]string{"--domain-suffix", ".local"}, "--domain-suffix"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(discoveryBinary(t), append([]string{"serve"}, tt.args...)...).CombinedOutput()
			if err == nil {
				t.Fatalf("serve %v succeeded", tt.args)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output does not name %s:\n%s", tt.want, out)
			}
		})
	}
}

// Two replicas on one real API server: exactly one holds the Lease; when
// it is stopped, the other takes over within the lease duration.
func TestTwoReplicasElectOneLeader(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject("istio-system"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leaseFlags := []string{"--kubeconfig", env.Kubeconfig, "--leader-lease-duration", "4s", "--leader-renew-deadline", "3s", "--leader-retry-period", "500ms"}
	a, b := startServe(t, leaseFlags...), startServe(t, leaseFlags...)
	a.waitReady(t)
	b.waitReady(t)
	holder := func() string {
		l, err := env.Client.CoordinationV1().Leases("istio-system").Get(ctx, "discovery-default", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	pidOf := func(p *proc) string { return "_" + strconv.Itoa(p.cmd.Process.Pid) }
	waitFor(t, 20*time.Second, "a lease holder", func() bool { return holder() != "" })
	leader, standby := a, b
	if strings.HasSuffix(holder(), pidOf(b)) {
		leader, standby = b, a
	}
	if !strings.HasSuffix(holder(), pidOf(leader)) {
		t.Fatalf("lease holder %q is neither replica", holder())
	}
	if strings.Contains(standby.out.String(), "started leading") {
		t.Fatal("the standby says it leads")
	}
	if code := leader.stop(t); code != 0 {
		t.Errorf("leader exit code = %d, want 0", code)
	}
	waitFor(t, 6*time.Second, "the standby to take the Lease", func() bool {
		return strings.HasSuffix(holder(), pidOf(standby))
	})
	waitFor(t, 5*time.Second, "the standby to log that it leads", func() bool {
		return strings.Contains(standby.out.String(), "started leading")
	})
}

func nsObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// reviewsConfigDir returns a config directory holding one Service,
// reviews.shop, on port 9080.
func reviewsConfigDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	svc := "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: shop}\nspec:\n  ports: [{name: http, port: 9080}]\n"
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
