package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/test/load/loadkit"
)

// cluster is one scenario's world: an API server, the World written into
// it, discovery replicas behind a balancer, and a fleet of proxies.
type cluster struct {
	t        *testing.T
	ctx      context.Context
	sc       scale
	env      *testenv.Env
	world    *loadkit.World
	bin      string
	args     []string
	replicas []*replica
	lb       *balancer
	res      *result
	dir      string
	fleets   []*loadkit.Fleet
	stops    []func()
	finished bool // finishFigures ran
	// wantNACKs is the NACKs the scenario provokes (0 for every other).
	wantNACKs int64
}

// options of a cluster.
type clusterOptions struct {
	replicas int
	// args are further flags for every replica.
	args []string
}

// newCluster starts the API server, writes the World into it and starts
// the replicas (ready); proxies come with connect.
func newCluster(t *testing.T, scenario string, o clusterOptions) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("runs etcd, kube-apiserver and discovery serve processes; skipped with -short")
	}
	sc := currentScale(t).withOverrides()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &cluster{t: t, ctx: ctx, sc: sc, bin: serverBinary(t), dir: t.TempDir()}
	c.res = newResult(scenario, sc)
	c.env = testenv.Start(t)
	var err error
	start := time.Now()
	if c.world, err = loadkit.NewKubeWorld(ctx, sc.world, c.env.Kubeconfig); err != nil {
		t.Fatalf("write the world: %v", err)
	}
	c.res.figure("world written to the API server", time.Since(start).Seconds(), "s", "")
	c.args = append([]string{
		"--kubeconfig", c.env.Kubeconfig, "--log-format", "json", "--log-level", "info",
		"--leader-lease-duration", sc.lease.String(), "--leader-renew-deadline", sc.renew.String(), "--leader-retry-period", sc.retry.String(),
		"--drain-period", sc.drain.String(),
	}, o.args...)
	for i := range max(1, o.replicas) {
		c.replicas = append(c.replicas, newReplica(t, fmt.Sprintf("r%d", i), c.dir))
	}
	c.lb = newBalancer(c.replicas)
	t.Cleanup(c.cleanup)
	for _, r := range c.replicas {
		r.start(ctx, t, c.bin, c.args)
	}
	return c
}

// cleanup stops the fleets and every replica, then writes the report.
func (c *cluster) cleanup() {
	if !c.finished && len(c.fleets) > 0 { // the scenario stopped early
		c.finishFigures()
	}
	for _, stop := range c.stops {
		stop()
	}
	for _, r := range c.replicas {
		if p := r.current(); p != nil && p.ended.IsZero() {
			r.stopping.Store(true)
			p.srv.Kill()
			p.ended = time.Now()
			p.stop()
		}
	}
	c.res.finish(c.t, *outFlag)
	if *logsFlag != "" {
		c.keepLogs(filepath.Join(*logsFlag, c.res.Scenario))
	}
}

// keepLogs copies every process's log and the API server's into dir.
func (c *cluster) keepLogs(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Error(err)
		return
	}
	for _, l := range c.logs() {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "kube-apiserver.log"), []byte(c.env.APIServerLog()), 0o644)
}

// logs lists every process's log.
func (c *cluster) logs() []string {
	var out []string
	for _, r := range c.replicas {
		r.mu.Lock()
		for _, p := range r.procs {
			out = append(out, p.log)
		}
		r.mu.Unlock()
	}
	return out
}

// fleetOptions are the suite's proxies: delta, Envoy's reconnect back-off,
// presenting what they hold on reconnect, checked against the World.
func (c *cluster) fleetOptions(n int) loadkit.FleetOptions {
	o := loadkit.DefaultFleetOptions()
	o.Proxies, o.Resume, o.Verify, o.Backoff, o.Decode, o.Window = n, true, true, loadkit.EnvoyBackoff(), *decodeFlag, *windowFlag
	return o
}

// connect starts a fleet through the balancer and waits until every
// well-behaved proxy holds a complete configuration; it returns the time
// that took.
func (c *cluster) connect(o loadkit.FleetOptions, setup func(*loadkit.Fleet)) (*loadkit.Fleet, time.Duration) {
	c.t.Helper()
	f, err := loadkit.NewFleet(o, c.world)
	if err != nil {
		c.t.Fatal(err)
	}
	if setup != nil {
		setup(f)
	}
	ctx, stop := context.WithCancel(c.ctx)
	start := time.Now()
	ch := f.Track(loadkit.KindConnect, -1, nil, true)
	wait, err := f.StartDial(ctx, c.lb.dial)
	if err != nil {
		stop()
		c.t.Fatal(err)
	}
	c.fleets = append(c.fleets, f)
	c.stops = append(c.stops, func() { stop(); wait() })
	if err := loadkit.WaitChanges(ctx, c.sc.timeout, ch); err != nil {
		c.t.Fatalf("connect: %d proxies without a complete configuration after %s: %v; notes %v", len(ch.Missing()), c.sc.timeout, err, f.Notes())
	}
	f.Retire(ch)
	took := time.Since(start)
	if *heapFlag != "" && len(c.fleets) == 1 {
		writeHeapProfile(c.t, *heapFlag)
	}
	return f, took
}

// writeHeapProfile writes the test process's heap profile, after a
// collection, to path.
func writeHeapProfile(t *testing.T, path string) {
	t.Helper()
	runtime.GC()
	out, err := os.Create(path)
	if err != nil {
		t.Errorf("heap profile: %v", err)
		return
	}
	defer out.Close()
	if err := pprof.WriteHeapProfile(out); err != nil {
		t.Errorf("heap profile: %v", err)
	}
}

// quiesce waits until the fleet has received nothing for a second (at
// most a minute).
func quiesce(ctx context.Context, f *loadkit.Fleet) {
	const quiet, most = time.Second, time.Minute
	deadline := time.Now().Add(most)
	last, since := f.Totals().Bytes, time.Now()
	for time.Since(since) < quiet && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if n := f.Totals().Bytes; n != last {
			last, since = n, time.Now()
		}
	}
}

// queued is a change written as soon as the API server takes it.
type queued struct {
	edit    *loadkit.Edit
	change  *loadkit.Change
	written time.Time
	tries   int
}

// queue tracks the changes now and writes them one after another, each
// retried every 200 ms until the API server accepts it; the returned
// channel is closed once all are written.
func (c *cluster) queue(f *loadkit.Fleet, edits []*loadkit.Edit) ([]*queued, <-chan struct{}) {
	var qs []*queued
	for _, e := range edits {
		qs = append(qs, &queued{edit: e, change: f.Track(e.Kind, -1, e.Expects, false)})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, q := range qs {
			for c.ctx.Err() == nil {
				q.tries++
				ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
				err := writeWith(ctx, q.edit)
				cancel()
				if err == nil {
					q.written = time.Now()
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	return qs, done
}

// writeWith writes an edit, giving up when ctx ends (a write to an API
// server whose etcd is down hangs).
func writeWith(ctx context.Context, e *loadkit.Edit) error {
	errc := make(chan error, 1)
	go func() { errc <- e.Write() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// edits makes n changes of mixed kinds: endpoint changes and
// VirtualService edits, one after the other, starting at k.
func (c *cluster) edits(f *loadkit.Fleet, k, n int) []*loadkit.Edit {
	c.t.Helper()
	var out []*loadkit.Edit
	for i := range n {
		var e *loadkit.Edit
		var err error
		if i%2 == 0 {
			e, err = c.world.ChurnEndpoint(k+i, f.Names())
		} else {
			e, err = c.world.EditVirtualService(k+i, f.Names())
		}
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// apply writes edits at the scale's rate and waits until they reached
// every proxy; it returns each (change, proxy) time.
func (c *cluster) apply(f *loadkit.Fleet, edits []*loadkit.Edit) []time.Duration {
	c.t.Helper()
	var cs []*loadkit.Change
	start := time.Now()
	for i, e := range edits {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / c.sc.rate * float64(time.Second)))))
		ch := f.Track(e.Kind, -1, e.Expects, false)
		if err := e.Write(); err != nil {
			c.t.Fatalf("write %s change: %v", e.Kind, err)
		}
		cs = append(cs, ch)
	}
	if err := loadkit.WaitChanges(c.ctx, c.sc.timeout, cs...); err != nil {
		c.t.Errorf("changes did not reach every proxy within %s: %v", c.sc.timeout, err)
		for _, ch := range cs {
			if m := ch.Missing(); len(m) > 0 {
				c.t.Errorf("%d proxies lack it: %s", len(m), f.Explain(ch, m[0]))
			}
		}
	}
	f.Retire(cs...)
	var all []time.Duration
	for _, ch := range cs {
		got, _ := ch.Times()
		all = append(all, got...)
	}
	return all
}

// verify checks every fleet's proxies against the World and records it.
func (c *cluster) verify() loadkit.Verification {
	c.t.Helper()
	var v loadkit.Verification
	for _, f := range c.fleets {
		fv := f.Verify(c.world)
		if fv.Checked == 0 {
			continue // a fleet of misbehaving proxies only
		}
		v.Checked += fv.Checked
		v.Correct += fv.Correct
		v.WrongCount += fv.WrongCount
		v.Wrong = append(v.Wrong, fv.Wrong...)
	}
	c.res.Correct, c.res.Checked = v.Correct, v.Checked
	if !v.OK() {
		c.t.Errorf("not every proxy holds the World's configuration: %v", v)
	}
	return v
}

// waitCorrect waits until every proxy's stream is complete and holds the
// World's configuration; it returns how long that took.
func (c *cluster) waitCorrect(f *loadkit.Fleet, timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < timeout {
		if _, ok := f.WaitComplete(c.ctx.Done(), timeout-time.Since(start)); !ok {
			break
		}
		at := time.Since(start)
		// Checking 1,000 proxies against the World costs about a second
		// of CPU: only once every stream is complete.
		if f.Verify(c.world).OK() {
			return at, true
		}
		select {
		case <-c.ctx.Done():
			return time.Since(start), false
		case <-time.After(time.Second):
		}
	}
	return time.Since(start), false
}

// finishFigures records what every scenario reports: NACKs, the logs'
// errors, the servers' peak RSS.
func (c *cluster) finishFigures() {
	c.finished = true
	var nacks int64
	for _, f := range c.fleets {
		nacks += f.Totals().NACKs
	}
	c.res.NACKs = nacks
	ended := map[string]int{}
	for _, f := range c.fleets {
		for k, v := range f.Ended() {
			ended[k] += v
		}
	}
	keys := make([]string, 0, len(ended))
	for k := range ended {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return ended[keys[i]] > ended[keys[j]] || (ended[keys[i]] == ended[keys[j]] && keys[i] < keys[j])
	})
	for _, k := range keys[:min(6, len(keys))] {
		c.res.note("streams ended without the proxy asking: %dx %s", ended[k], k)
	}
	if nacks != c.wantNACKs {
		c.t.Errorf("%d NACKs, want %d; notes %v", nacks, c.wantNACKs, c.fleets[0].Notes())
	}
	s := summarizeLogs(c.t, c.logs())
	c.res.ServerErrors, c.res.ServerWarnings, c.res.LogMessages = s.Errors, s.Warnings, s.top(12)
	for _, r := range c.replicas {
		c.res.PeakRSSMiB = max(c.res.PeakRSSMiB, r.peakRSS())
	}
}

// gapFigures records the time proxies spent without a complete
// configuration.
func (c *cluster) gapFigures(f *loadkit.Fleet, what string) loadkit.Percentiles {
	closed, open := f.Gaps()
	p := loadkit.PercentilesOf(append(closed, open...))
	c.res.figure(what+": gaps", float64(p.Count), "", fmt.Sprintf("%d still open", len(open)))
	c.res.figure(what+": p50", p.P50, "ms", "")
	c.res.figure(what+": p99", p.P99, "ms", "")
	c.res.figure(what+": max", p.Max, "ms", "")
	c.gapPhaseFigures(f, what)
	return p
}

// gapPhaseFigures divides the gaps into their phases (loadkit.GapPhases):
// over all of them, and over the slowest 1%, where the tail is.
func (c *cluster) gapPhaseFigures(f *loadkit.Fleet, what string) {
	phases := f.GapPhases()
	if len(phases) == 0 {
		return
	}
	sort.Slice(phases, func(i, j int) bool { return phases[i].Total > phases[j].Total })
	for _, part := range []struct {
		name string
		of   []loadkit.GapPhases
	}{{"all", phases}, {"slowest 1%", phases[:max(1, len(phases)/100)]}} {
		var reconnect, first, fill []time.Duration
		var streams []int
		for _, ph := range part.of {
			reconnect, first, fill = append(reconnect, ph.Reconnect), append(first, ph.FirstResponse), append(fill, ph.Fill)
			streams = append(streams, ph.Streams)
		}
		sort.Ints(streams)
		r, fr, fl := loadkit.PercentilesOf(reconnect), loadkit.PercentilesOf(first), loadkit.PercentilesOf(fill)
		c.res.figure(fmt.Sprintf("%s, %s (%d gaps): until the stream that ended the gap was opened, p50/p99", what, part.name, len(part.of)), r.P50, "ms",
			fmt.Sprintf("p99 %.0f ms; streams opened per gap p50 %d, max %d", r.P99, streams[len(streams)/2], streams[len(streams)-1]))
		c.res.figure(fmt.Sprintf("%s, %s: that stream's first response, p50/p99", what, part.name), fr.P50, "ms", fmt.Sprintf("p99 %.0f ms", fr.P99))
		c.res.figure(fmt.Sprintf("%s, %s: first response until complete, p50/p99", what, part.name), fl.P50, "ms", fmt.Sprintf("p99 %.0f ms", fl.P99))
	}
}

// byRemote names each replica's share of the fleet.
func (c *cluster) byRemote(st loadkit.FleetStatus) string {
	var parts []string
	for _, r := range c.replicas {
		parts = append(parts, fmt.Sprintf("%s %d", r.name, st.ByRemote[r.ports.XDS]))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// sampleFleetBytes is bytes and resources received since t0.
func resentSince(t0, t1 loadkit.Totals) (bytes int64, resources int64) {
	d := t1.Minus(t0)
	return d.Bytes, d.ResourceCount()
}

// mark is a moment's CPU readings: every server process, this process
// (the proxies) and the machine.
type mark struct {
	at    time.Time
	procs map[*process]float64
	self  float64
	busy  float64
}

func (c *cluster) mark() mark {
	m := mark{at: time.Now(), procs: map[*process]float64{}}
	for _, r := range c.replicas {
		r.mu.Lock()
		for _, p := range r.procs {
			m.procs[p] = p.sampler.Sample().CPU
		}
		r.mu.Unlock()
	}
	if s, err := loadkit.ReadProc(os.Getpid()); err == nil {
		m.self = s.CPU
	}
	m.busy, _ = loadkit.MachineCPU()
	return m
}

// cpuFigures records the CPU the servers, the proxies and the whole
// machine used since m.
func (c *cluster) cpuFigures(name string, m mark) {
	var srv float64
	for _, r := range c.replicas {
		r.mu.Lock()
		procs := append([]*process(nil), r.procs...)
		r.mu.Unlock()
		for _, p := range procs {
			now := p.sampler.Sample().CPU
			if !p.ended.IsZero() { // exited: its last reading
				now = p.sampler.All().CPUSeconds + p.sampler.FirstCPU()
			}
			srv += now - m.procs[p]
		}
	}
	secs := time.Since(m.at).Seconds()
	var self float64
	if s, err := loadkit.ReadProc(os.Getpid()); err == nil {
		self = s.CPU - m.self
	}
	busy, _ := loadkit.MachineCPU()
	c.res.figure(name+": CPU", srv, "s servers", fmt.Sprintf("proxies (the test process) %.1f s; machine busy %.2f of %d cores over %.0f s",
		self, (busy-m.busy)/max(secs, 1e-9), c.res.Machine.CPUs, secs))
}

// profile saves a CPU profile of r's current process over the next d
// into the logs directory, when the server has pprof (-chaos.server-pprof
// and -chaos.logs); wait for it with the returned function.
func (c *cluster) profile(r *replica, name string, d time.Duration) func() {
	if !*pprofFlag || *logsFlag == "" {
		return func() {}
	}
	dir := filepath.Join(*logsFlag, c.res.Scenario)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Error(err)
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path := filepath.Join(dir, name+".pprof")
		what := fmt.Sprintf("profile?seconds=%d", int(d.Seconds()))
		if err := loadkit.FetchProfile(c.ctx, r.ports.Pprof, what, path); err != nil {
			c.res.note("CPU profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}
