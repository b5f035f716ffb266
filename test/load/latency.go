package main

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// LatencyReport is the result of a request benchmark (CA, webhook).
type LatencyReport struct {
	Tool    string          `json:"tool"`
	Started time.Time       `json:"started"`
	Commit  string          `json:"commit,omitempty"`
	Machine loadkit.Machine `json:"machine"`
	Params  map[string]any  `json:"params"`
	// Requests counts completed requests in the measured window, Errors
	// the failed ones among them (by kind).
	Requests  int                 `json:"requests"`
	Errors    int                 `json:"errors"`
	ErrorKind map[string]int      `json:"errorsByKind,omitempty"`
	Seconds   float64             `json:"seconds"`
	PerSecond float64             `json:"perSecond"`
	Latency   loadkit.Percentiles `json:"latency"`
	Server    loadkit.ProcWindow  `json:"server"`
	Tool_     loadkit.ProcWindow  `json:"toolProcess"`
	// MachineBusyCores is the whole machine's CPU use over the window.
	MachineBusyCores float64  `json:"machineBusyCores"`
	Notes            []string `json:"notes,omitempty"`
}

// recorder collects latencies and errors from many goroutines.
type recorder struct {
	mu   sync.Mutex
	lat  []time.Duration
	errs map[string]int
}

func newRecorder() *recorder { return &recorder{errs: map[string]int{}} }

func (r *recorder) ok(d time.Duration) {
	r.mu.Lock()
	r.lat = append(r.lat, d)
	r.mu.Unlock()
}

func (r *recorder) fail(kind string) {
	r.mu.Lock()
	r.errs[kind]++
	r.mu.Unlock()
}

// fill completes a report from the recorder over a window of secs.
func (r *recorder) fill(rep *LatencyReport, secs float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Seconds = secs
	rep.Requests = len(r.lat)
	for k, n := range r.errs {
		rep.Errors += n
		rep.ErrorKind[k] = n
	}
	rep.Requests += rep.Errors
	if secs > 0 {
		rep.PerSecond = float64(len(r.lat)) / secs
	}
	rep.Latency = loadkit.PercentilesOf(r.lat)
}

func (rep *LatencyReport) write(dir string, out io.Writer) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	keys := make([]string, 0, len(rep.Params))
	for k := range rep.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "%s:", rep.Tool)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, rep.Params[k])
	}
	fmt.Fprintf(&b, "\nmachine: %d CPUs (%s), load %s -> %s; commit %s\n", rep.Machine.CPUs, rep.Machine.CPUModel,
		rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd, rep.Commit)
	fmt.Fprintf(&b, "%d requests in %.1f s: %.0f/s ok, %d errors %v\n", rep.Requests, rep.Seconds, rep.PerSecond, rep.Errors, rep.ErrorKind)
	fmt.Fprintf(&b, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", rep.Latency.P50, rep.Latency.P90, rep.Latency.P99, rep.Latency.Max)
	fmt.Fprintf(&b, "server: %.1f CPU s (%.2f cores), peak RSS %.0f MiB; load tool %.2f cores; machine busy %.2f cores\n",
		rep.Server.CPUSeconds, rep.Server.CPUCores, rep.Server.PeakRSSMiB, rep.Tool_.CPUCores, rep.MachineBusyCores)
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(out, b.String())
	return err
}

// window measures the server, the tool and the machine over a benchmark.
type window struct {
	srv, self *loadkit.Sampler
	s0, t0    loadkit.ProcSample
	m0        float64
	start     time.Time
}

func startWindow(pid int) *window {
	w := &window{srv: loadkit.NewSampler(pid, 250*time.Millisecond), self: loadkit.NewSampler(os.Getpid(), 250*time.Millisecond)}
	w.s0, w.t0 = w.srv.Sample(), w.self.Sample()
	w.m0, _ = loadkit.MachineCPU()
	w.start = time.Now()
	return w
}

func (w *window) stop(rep *LatencyReport) {
	s1, t1 := w.srv.Sample(), w.self.Sample()
	m1, _ := loadkit.MachineCPU()
	rep.Server, rep.Tool_ = w.srv.Window(w.s0, s1), w.self.Window(w.t0, t1)
	if d := time.Since(w.start).Seconds(); d > 0 {
		rep.MachineBusyCores = (m1 - w.m0) / d
	}
	rep.Machine.LoadAvgEnd = loadkit.LoadAvg()
}

// readRoot reads the server's root certificate from its CA directory.
func readRoot(caDir string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(filepath.Join(caDir, "root-cert.pem"))
	if err != nil {
		return nil, fmt.Errorf("the server's root: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s/root-cert.pem", caDir)
	}
	return pool, nil
}
