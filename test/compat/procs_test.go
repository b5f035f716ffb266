package compat

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshplane/discovery/internal/testenv"
)

// discoveryBinary is the real discovery command, built once per run.
func discoveryBinary(t *testing.T) string {
	t.Helper()
	return testenv.DiscoveryBinary(t)
}

// pilotAgentBinary finds the pilot-agent that hack/istio-agent.sh built. It
// skips the test without one (and with -short), unless COMPAT_REQUIRED or
// CI asks for it.
func pilotAgentBinary(t *testing.T) string {
	t.Helper()
	required := os.Getenv("COMPAT_REQUIRED") != "" || os.Getenv("CI") != ""
	if testing.Short() && !required {
		t.Skip("-short: the compatibility test runs pilot-agent, discovery and a kube-apiserver")
	}
	candidates := []string{os.Getenv("COMPAT_PILOT_AGENT")}
	if wd, err := os.Getwd(); err == nil {
		candidates = append(candidates, filepath.Join(wd, "..", "..", ".cache", "bin", "pilot-agent"))
	}
	for _, p := range candidates {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	msg := "no pilot-agent binary: run eval \"$(hack/istio-agent.sh)\" (sets COMPAT_PILOT_AGENT)"
	if required {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// syncBuffer collects a child's output.
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

// child is a running process whose output is kept for the test's log.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// startChild starts cmd and stops it (SIGTERM, then SIGKILL after 10 s)
// when t ends, printing its output if t failed.
func startChild(t *testing.T, name string, cmd *exec.Cmd) *child {
	t.Helper()
	c := &child{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.out, c.out
	// Wait returns even if a grandchild still holds the output pipe.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, c.out.String())
		}
	})
	return c
}

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// waitFor polls cond every 50 ms until it holds, failing t after timeout;
// it fails early when one of the watched children exits.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, watch ...*child) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, c := range watch {
			if c.exited() {
				t.Fatalf("%s exited (%v) while waiting for %s", c.name, c.cmd.ProcessState, what)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// discovery is a running `discovery serve --kubeconfig` on loopback.
type discovery struct {
	proc    *child
	secure  string // xDS and the CA, TLS
	monitor string // /debug/*
}

// startDiscovery runs the real binary against the API server and waits
// until it is ready.
func startDiscovery(t *testing.T, kubeconfig string) *discovery {
	t.Helper()
	d := &discovery{secure: freeAddr(t), monitor: freeAddr(t)}
	readiness := freeAddr(t)
	d.proc = startChild(t, "discovery", exec.Command(discoveryBinary(t), "serve",
		"--kubeconfig", kubeconfig,
		"--grpc-address", freeAddr(t), "--secure-grpc-address", d.secure, "--webhook-address", freeAddr(t),
		"--monitoring-address", d.monitor, "--readiness-address", readiness))
	waitFor(t, 60*time.Second, "discovery /ready", func() bool {
		return httpStatus("http://"+readiness+"/ready") == http.StatusOK
	}, d.proc)
	return d
}

// httpStatus is the status code of a GET of url, 0 when it fails.
func httpStatus(url string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
