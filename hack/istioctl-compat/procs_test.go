package istioctlcompat

import (
	"bytes"
	"fmt"
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

// required reports whether a missing binary fails the test instead of
// skipping it.
func required() bool { return os.Getenv("COMPAT_REQUIRED") != "" || os.Getenv("CI") != "" }

// tool finds a binary built by a hack/ script: the environment variable
// env, else .cache/bin/name at the repository's top. It skips the test
// without one (and with -short) unless COMPAT_REQUIRED or CI asks for it.
func tool(t *testing.T, env, name, script string) string {
	t.Helper()
	if testing.Short() && !required() {
		t.Skip("-short: the istioctl tests run istioctl, pilot-agent, discovery and a kube-apiserver")
	}
	candidates := []string{os.Getenv(env)}
	if wd, err := os.Getwd(); err == nil {
		candidates = append(candidates, filepath.Join(wd, "..", "..", ".cache", "bin", name))
	}
	for _, p := range candidates {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	msg := "no " + name + " binary: run eval \"$(" + script + ")\" (sets " + env + ")"
	if required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// discoveryBinary builds ./cmd/discovery once per test process, in the
// main module (this module's go.sum holds only what the tests import).
func discoveryBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "discovery-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "discovery")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/discovery")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/discovery: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
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

// waitFor polls cond every 100 ms until it holds, failing t after timeout
// or as soon as a watched child exits.
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
		time.Sleep(100 * time.Millisecond)
	}
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
