package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// ServerOptions say which server to measure: one the tool starts from a
// discovery binary, or one already running (by PID and addresses).
type ServerOptions struct {
	// Binary is the discovery binary to start (discovery serve).
	Binary string
	// Args are extra flags for discovery serve.
	Args []string
	// PID, XDSAddr and MonitorAddr name a running server instead.
	PID         int
	XDSAddr     string
	MonitorAddr string
	// SampleInterval is how often the server's RSS and CPU are read.
	SampleInterval time.Duration
	// Commit is the commit the server was built from, for the report;
	// empty: the commit of the working tree the tool runs in.
	Commit string
	// Pprof says the binary was built with the pprof overlay
	// (test/load/serverpprof): the tool has it serve /debug/pprof on a
	// loopback port and fetches profiles there.
	Pprof bool
}

// DefaultServerOptions start bin/discovery.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{Binary: "bin/discovery", SampleInterval: 500 * time.Millisecond}
}

// AddFlags registers the server's flags.
func (o *ServerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Binary, "server-binary", o.Binary, "discovery binary the tool starts (discovery serve on loopback ports)")
	fs.StringArrayVar(&o.Args, "server-arg", o.Args, "extra flag for discovery serve (repeatable), for example --server-arg=--debounce-after=50ms")
	fs.IntVar(&o.PID, "server-pid", o.PID, "measure this running server instead of starting one (needs --xds-address)")
	fs.StringVar(&o.XDSAddr, "xds-address", o.XDSAddr, "xDS address of the running server named by --server-pid")
	fs.StringVar(&o.MonitorAddr, "monitoring-address", o.MonitorAddr, "monitoring address (/metrics, /debug) of the running server named by --server-pid")
	fs.StringVar(&o.Commit, "server-commit", o.Commit, "commit the server binary was built from, for the report (default: the working tree's HEAD)")
	fs.BoolVar(&o.Pprof, "server-pprof", o.Pprof, "the server binary was built with the pprof overlay (go build -overlay test/load/serverpprof/overlay.json): fetch profiles from it")
	fs.DurationVar(&o.SampleInterval, "sample-interval", o.SampleInterval, "how often the server's RSS and CPU are read")
}

// Validate reports options that cannot work.
func (o *ServerOptions) Validate() error {
	if o.SampleInterval < 10*time.Millisecond {
		return fmt.Errorf("--sample-interval %s: must be at least 10ms", o.SampleInterval)
	}
	if o.PID != 0 {
		if o.XDSAddr == "" {
			return errors.New("--server-pid needs --xds-address")
		}
		return nil
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return fmt.Errorf("--server-binary: %w (build it with make build)", err)
	}
	return nil
}

// serverProc is the measured server.
type serverProc struct {
	pid                                      int
	xds, secure, monitor, readiness, webhook string
	caDir                                    string
	cmd                                      *exec.Cmd
	exited                                   chan struct{}
	log                                      string
	pprof                                    string // where /debug/pprof is served
}

// plainHTTP talks to the server's monitoring and readiness ports without
// keeping connections (nothing lingers once a run ends).
var plainHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// freePorts finds n free loopback ports.
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var out []string
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// startServer starts discovery serve on loopback ports in file mode, with
// its CA in work/ca and its log in work/server.log, and waits until it is
// ready. extra are flags the caller needs (CA token file, rate limits).
func startServer(ctx context.Context, o ServerOptions, configDir, work string, extra ...string) (*serverProc, error) {
	if o.PID != 0 {
		return &serverProc{pid: o.PID, xds: o.XDSAddr, monitor: o.MonitorAddr, pprof: o.MonitorAddr}, nil
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	s := &serverProc{xds: ports[0], secure: ports[1], monitor: ports[2], readiness: ports[3], webhook: ports[4],
		caDir: filepath.Join(work, "ca"), exited: make(chan struct{}), log: filepath.Join(work, "server.log"), pprof: ports[2]}
	args := []string{"serve",
		"--grpc-address", s.xds, "--secure-grpc-address", s.secure, "--monitoring-address", s.monitor,
		"--readiness-address", s.readiness, "--webhook-address", s.webhook, "--log-level", "warn"}
	if configDir != "" { // file mode: the CA lives in a directory too
		args = append(args, "--config-dir", configDir, "--ca-dir", s.caDir)
	}
	args = append(append(args, extra...), o.Args...)
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(o.Binary, args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// The server goes with the tool, however the tool ends.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if o.Pprof {
		s.pprof = ports[5]
		s.cmd.Env = append(os.Environ(), "DISCOVERY_PPROF_ADDR="+s.pprof)
	}
	if err := s.cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", o.Binary, err)
	}
	s.pid = s.cmd.Process.Pid
	go func() { _ = s.cmd.Wait(); _ = logf.Close(); close(s.exited) }()
	if err := s.waitReady(ctx, 2*time.Minute); err != nil {
		s.stop()
		return nil, fmt.Errorf("%w; see %s:\n%s", err, s.log, tail(s.log, 20))
	}
	return s, nil
}

func (s *serverProc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		res, err := plainHTTP.Get("http://" + s.readiness + "/ready")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("discovery serve exited: %v", s.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("discovery serve not ready within %s", timeout)
		}
	}
}

// stop ends a server the tool started: SIGTERM, then SIGKILL after 10 s.
func (s *serverProc) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// commit is the commit to report for the server.
func (o *ServerOptions) commit() string {
	if o.Commit != "" {
		return o.Commit
	}
	return gitCommit()
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// scrapeMetrics reads the server's Prometheus metrics, summing the series
// of each name.
func scrapeMetrics(addr string) (map[string]float64, error) {
	if addr == "" {
		return nil, errors.New("no monitoring address")
	}
	res, err := plainHTTP.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", res.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name := line[:sp]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, sc.Err()
}

// fetchProfile saves /debug/pprof/<what> of the server to path. It
// returns an error naming the status when the server exposes no pprof.
func fetchProfile(ctx context.Context, addr, what, path string) error {
	if addr == "" {
		return errors.New("no monitoring address")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	res, err := (&http.Client{Transport: plainHTTP.Transport}).Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/%s: %s (the server exposes no pprof)", what, res.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
