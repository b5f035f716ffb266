package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// replica is one discovery serve replica: fixed loopback ports (its Pod)
// and the processes that ran on them one after another.
type replica struct {
	name  string
	ports loadkit.Ports
	dir   string
	procs []*process
	// ready mirrors /ready, polled every 100 ms while a process runs: the
	// balancer sends new connections only to ready replicas, as a
	// Service's endpoints would.
	ready atomic.Bool
	// notReady counts polls that found /ready failing while the process
	// was expected to be ready (up, not being stopped).
	notReady   atomic.Int64
	stopping   atomic.Bool
	mu         sync.Mutex
	notReadyAt []time.Time
}

// process is one run of discovery serve.
type process struct {
	srv     *loadkit.Server
	log     string
	started time.Time
	ended   time.Time
	killed  bool // SIGKILL rather than SIGTERM
	sampler *loadkit.Sampler
	stop    context.CancelFunc
}

func newReplica(t *testing.T, name, dir string) *replica {
	t.Helper()
	ports, err := loadkit.FreeServerPorts()
	if err != nil {
		t.Fatal(err)
	}
	return &replica{name: name, ports: ports, dir: dir}
}

// current is the running (or last) process.
func (r *replica) current() *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.procs) == 0 {
		return nil
	}
	return r.procs[len(r.procs)-1]
}

// start runs a new process on the replica's ports and waits until it is
// ready.
func (r *replica) start(ctx context.Context, t *testing.T, bin string, args []string) *process {
	t.Helper()
	r.mu.Lock()
	n := len(r.procs) + 1
	r.mu.Unlock()
	log := filepath.Join(r.dir, fmt.Sprintf("%s-%d.log", r.name, n))
	o := loadkit.DefaultServerOptions()
	o.Binary, o.Pprof = bin, *pprofFlag
	r.stopping.Store(false)
	var srv *loadkit.Server
	for attempt := 1; ; attempt++ {
		var err error
		srv, err = loadkit.Launch(ctx, o, loadkit.LaunchOptions{Ports: r.ports, Log: log, Extra: args, Wait: 3 * time.Minute})
		if err == nil {
			break
		}
		if n > 1 || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("replica %s: %v", r.name, err)
		}
		// Another process (go test runs packages side by side) took one
		// of the ports between their choice and this first start, which
		// no proxy knows yet: choose them again. A restart keeps its
		// ports, which its own process held until it exited.
		t.Logf("replica %s: a port was taken before its first start, choosing others: %v", r.name, firstLine(err.Error()))
		ports, perr := loadkit.FreeServerPorts()
		if perr != nil {
			t.Fatal(perr)
		}
		r.ports = ports
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &process{srv: srv, log: log, started: time.Now(), sampler: loadkit.NewSampler(srv.PID, 250*time.Millisecond), stop: cancel}
	go p.sampler.Run(pctx)
	go r.watchReady(pctx, srv)
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	r.ready.Store(true)
	return p
}

// watchReady polls /ready until ctx ends.
func (r *replica) watchReady(ctx context.Context, srv *loadkit.Server) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-srv.Exited():
			r.ready.Store(false)
			return
		case <-time.After(100 * time.Millisecond):
		}
		ok := srv.Ready()
		r.ready.Store(ok)
		if !ok && !r.stopping.Load() && ctx.Err() == nil {
			select {
			case <-srv.Exited():
				continue
			default:
			}
			r.notReady.Add(1)
			r.mu.Lock()
			r.notReadyAt = append(r.notReadyAt, time.Now())
			r.mu.Unlock()
		}
	}
}

// kill ends the process with SIGKILL.
func (r *replica) kill() {
	p := r.current()
	r.stopping.Store(true)
	r.ready.Store(false)
	p.killed = true
	p.srv.Kill()
	p.ended = time.Now()
	p.stop()
}

// term sends SIGTERM and waits until the process exits (its drain) or
// timeout; it returns the exit code.
func (r *replica) term(t *testing.T, timeout time.Duration) int {
	t.Helper()
	p := r.current()
	r.stopping.Store(true)
	if err := p.srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("replica %s: SIGTERM: %v", r.name, err)
	}
	select {
	case <-p.srv.Exited():
	case <-time.After(timeout):
		t.Errorf("replica %s did not exit within %s of SIGTERM; killing it", r.name, timeout)
		p.srv.Kill()
	}
	r.ready.Store(false)
	p.ended = time.Now()
	p.stop()
	return p.srv.ExitCode()
}

// peakRSS is the highest RSS any of the replica's processes reached.
func (r *replica) peakRSS() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m float64
	for _, p := range r.procs {
		m = max(m, p.sampler.All().PeakRSSMiB)
	}
	return m
}

// balancer is the Service in front of the replicas: each new connection
// goes to a ready replica picked at random (kube-proxy's choice).
type balancer struct {
	replicas []*replica
	mu       sync.Mutex
	rnd      *rand.Rand
	// exclude keeps a replica out of the choice whatever its readiness.
	exclude map[*replica]bool
}

func newBalancer(rs []*replica) *balancer {
	return &balancer{replicas: rs, rnd: rand.New(rand.NewPCG(1, 2)), exclude: map[*replica]bool{}}
}

func (b *balancer) setExcluded(r *replica, v bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.exclude[r] = v
}

func (b *balancer) dial(ctx context.Context, _ int) (net.Conn, error) {
	b.mu.Lock()
	var ready []*replica
	for _, r := range b.replicas {
		if r.ready.Load() && !b.exclude[r] {
			ready = append(ready, r)
		}
	}
	var r *replica
	if len(ready) > 0 {
		r = ready[b.rnd.IntN(len(ready))]
	}
	b.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("no ready replica")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", r.ports.XDS)
}

// logEntry is one line of a server's JSON log.
type logEntry struct {
	Time     time.Time `json:"time"`
	Level    string    `json:"level"`
	Msg      string    `json:"msg"`
	Identity string    `json:"identity"`
	Err      string    `json:"err"`
	Error    string    `json:"error"`
}

// readLog parses a server log (JSON lines; other lines are skipped).
func readLog(path string) ([]logEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e logEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil && !e.Time.IsZero() {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// logSummary counts the errors and warnings of logs by message.
type logSummary struct {
	Errors, Warnings int
	// ByMessage is "LEVEL msg: detail" -> count, for errors and warnings.
	ByMessage map[string]int
}

func summarizeLogs(t *testing.T, paths []string) logSummary {
	t.Helper()
	s := logSummary{ByMessage: map[string]int{}}
	for _, p := range paths {
		entries, err := readLog(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			continue
		}
		for _, e := range entries {
			switch e.Level {
			case "ERROR":
				s.Errors++
			case "WARN":
				s.Warnings++
			default:
				continue
			}
			detail := e.Err + e.Error
			if len(detail) > 120 {
				detail = detail[:120] + "..."
			}
			s.ByMessage[e.Level+" "+e.Msg+": "+detail]++
		}
	}
	return s
}

// top lists the n most frequent messages.
func (s logSummary) top(n int) []string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range s.ByMessage {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || (all[i].v == all[j].v && all[i].k < all[j].k) })
	var out []string
	for _, e := range all[:min(n, len(all))] {
		out = append(out, fmt.Sprintf("%dx %s", e.v, strings.TrimSuffix(e.k, ": ")))
	}
	return out
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
