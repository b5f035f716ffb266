package loadkit

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

// Server is the measured server: one the tool started, or one named by
// its PID and addresses.
type Server struct {
	PID int
	// Ports are its addresses: xDS (plaintext), secure (xDS + CA over
	// TLS), monitoring, readiness, webhook, pprof.
	Ports
	// CADir is its CA directory in file mode.
	CADir string
	// Log is the file its output goes to.
	Log string
	// Started is when its process started: the origin of the times its
	// runtime prints (GODEBUG=gctrace=1 writes "gc N @Ss" to Log).
	Started time.Time

	cmd    *exec.Cmd
	exited chan struct{}
}

// Ports are the loopback addresses a server listens on.
type Ports struct {
	XDS, Secure, Monitor, Readiness, Webhook string
	// Pprof is where /debug/pprof is served (the monitoring address
	// unless the binary has the pprof overlay).
	Pprof string
}

// FreeServerPorts picks free loopback ports for a server.
func FreeServerPorts() (Ports, error) {
	ports, err := freePorts(6)
	if err != nil {
		return Ports{}, err
	}
	return Ports{XDS: ports[0], Secure: ports[1], Monitor: ports[2], Readiness: ports[3], Webhook: ports[4], Pprof: ports[5]}, nil
}

// PlainHTTP talks to the server's monitoring and readiness ports without
// keeping connections (nothing lingers once a run ends).
var PlainHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

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

// StartServer starts discovery serve on loopback ports in file mode, with
// its CA in work/ca and its log in work/server.log, and waits until it is
// ready. extra are flags the caller needs (CA token file, rate limits).
// With o.PID set it returns the running server instead.
func StartServer(ctx context.Context, o ServerOptions, configDir, work string, extra ...string) (*Server, error) {
	if o.PID != 0 {
		return &Server{PID: o.PID, Ports: Ports{XDS: o.XDSAddr, Monitor: o.MonitorAddr, Pprof: o.MonitorAddr}}, nil
	}
	ports, err := FreeServerPorts()
	if err != nil {
		return nil, err
	}
	bin, err := copyBinary(o.Binary, work)
	if err != nil {
		return nil, err
	}
	// The running server keeps the file it was started from.
	defer func() { _ = os.Remove(bin) }()
	o.Binary = bin
	return Launch(ctx, o, LaunchOptions{
		Ports: ports, ConfigDir: configDir, CADir: filepath.Join(work, "ca"),
		Log: filepath.Join(work, "server.log"), Extra: extra, Wait: 2 * time.Minute,
	})
}

// copyBinary copies the server binary into dir and returns the copy's
// path. A binary fresh from the Go linker maps more of its own file than
// the same bytes written by cp: started on an empty directory, 68 MB of
// file pages against 57 MB for its copy, and 10-12 MiB more at M1's peak
// (BENCHMARKS.md, "Route encodings dropped when unused; stacks kept
// small"). Runs of a binary just built and of one built earlier are
// compared as two copies, written the way a container image's layer is.
func copyBinary(path, dir string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = in.Close() }()
	out, err := os.CreateTemp(dir, "server-binary-*")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(out.Name(), 0o755)
	}
	if err != nil {
		_ = os.Remove(out.Name())
		return "", fmt.Errorf("copy the server binary: %w", err)
	}
	return out.Name(), nil
}

// LaunchOptions say how to start one server process.
type LaunchOptions struct {
	Ports Ports
	// ConfigDir, when set, is file mode: --config-dir and --ca-dir CADir.
	ConfigDir, CADir string
	// Log is the file the server's output is appended to.
	Log string
	// Extra are further flags (before ServerOptions.Args).
	Extra []string
	// Wait, when positive, waits this long for /ready to answer 200.
	Wait time.Duration
}

// Launch starts discovery serve with the given ports and flags. The
// server is killed if the calling process dies.
func Launch(ctx context.Context, o ServerOptions, lo LaunchOptions) (*Server, error) {
	s := &Server{Ports: lo.Ports, CADir: lo.CADir, exited: make(chan struct{}), Log: lo.Log}
	if !o.Pprof {
		s.Pprof = s.Monitor
	}
	args := []string{
		"serve",
		"--grpc-address", s.XDS, "--secure-grpc-address", s.Secure, "--monitoring-address", s.Monitor,
		"--readiness-address", s.Readiness, "--webhook-address", s.Webhook, "--log-level", "warn",
	}
	if lo.ConfigDir != "" { // file mode: the CA lives in a directory too
		args = append(args, "--config-dir", lo.ConfigDir, "--ca-dir", s.CADir)
	}
	args = append(append(args, lo.Extra...), o.Args...)
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		s.cmd = exec.Command(o.Binary, args...)
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
		// The server goes with the tool, however the tool ends.
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if o.Pprof {
			s.cmd.Env = append(os.Environ(), "DISCOVERY_PPROF_ADDR="+s.Pprof)
		}
		err = s.cmd.Start()
		if err == nil {
			break
		}
		// A binary just written (copyBinary) is busy while a child
		// forked meanwhile still holds the writer's descriptor.
		if !errors.Is(err, syscall.ETXTBSY) || try == 20 {
			_ = logf.Close()
			return nil, fmt.Errorf("start %s: %w", o.Binary, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.PID, s.Started = s.cmd.Process.Pid, time.Now()
	go func() { _ = s.cmd.Wait(); _ = logf.Close(); close(s.exited) }()
	if lo.Wait > 0 {
		if err := s.WaitReady(ctx, lo.Wait); err != nil {
			s.Stop()
			return nil, fmt.Errorf("%w; see %s:\n%s", err, s.Log, Tail(s.Log, 20))
		}
	}
	return s, nil
}

// Ready reports whether /ready answers 200 now.
func (s *Server) Ready() bool {
	res, err := PlainHTTP.Get("http://" + s.Readiness + "/ready")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// WaitReady waits until /ready answers 200.
func (s *Server) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if s.Ready() {
			return nil
		}
		select {
		case <-s.Exited():
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

// Exited is closed once a server the tool started has exited (never for
// one named by PID).
func (s *Server) Exited() <-chan struct{} { return s.exited }

// ExitCode is the exit code of a server that exited (-1 when killed by a
// signal).
func (s *Server) ExitCode() int {
	if s.cmd == nil || s.cmd.ProcessState == nil {
		return -1
	}
	return s.cmd.ProcessState.ExitCode()
}

// Signal sends sig to a server the tool started.
func (s *Server) Signal(sig os.Signal) error {
	if s.cmd == nil {
		return errors.New("not started by the tool")
	}
	return s.cmd.Process.Signal(sig)
}

// Kill ends a server the tool started with SIGKILL and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Stop ends a server the tool started: SIGTERM, then SIGKILL after 10 s
// (its drain period may be longer: stop it with Signal to wait for that).
func (s *Server) Stop() {
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

// ReportCommit is the commit to report for the server.
func (o *ServerOptions) ReportCommit() string {
	if o.Commit != "" {
		return o.Commit
	}
	return GitCommit()
}

// Tail returns the last n lines of the file at path.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ScrapeMetrics reads the server's Prometheus metrics, summing the series
// of each name.
func ScrapeMetrics(addr string) (map[string]float64, error) {
	if addr == "" {
		return nil, errors.New("no monitoring address")
	}
	res, err := PlainHTTP.Get("http://" + addr + "/metrics")
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

// FetchProfile saves /debug/pprof/<what> of the server to path. It
// returns an error naming the status when the server exposes no pprof.
func FetchProfile(ctx context.Context, addr, what, path string) error {
	if addr == "" {
		return errors.New("no monitoring address")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	res, err := (&http.Client{Transport: PlainHTTP.Transport}).Do(req)
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

// GitCommit is the commit of the working tree the tool runs in, if any.
func GitCommit() string {
	b, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(b))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " (tree has uncommitted changes)"
	}
	return c
}
