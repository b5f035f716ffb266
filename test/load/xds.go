package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// XDSOptions configure an xDS load run.
type XDSOptions struct {
	World  loadkit.WorldOptions
	Fleet  loadkit.FleetOptions
	Server loadkit.ServerOptions
	// Out is the directory for the world, the server's log and the report.
	Out string
	// Kubeconfig, when set, writes the world into that API server (and
	// starts the server with --kubeconfig) instead of a config directory.
	Kubeconfig string
	// Changes per kind.
	Endpoints, VirtualServices, Services, Reconnects int
	// Rate is changes per second within a phase.
	Rate float64
	// Idle is the quiet period after the fleet connected (server CPU at rest).
	Idle time.Duration
	// Timeout bounds the wait for a phase's changes to reach every proxy.
	Timeout time.Duration
	// Profile saves the server's CPU profile (over the change phases) and
	// heap profile, when the server exposes /debug/pprof.
	Profile bool
	// ProfileSeconds is the length of each CPU profile.
	ProfileSeconds time.Duration
	// ToolProfile writes the load tool's own CPU profile to this file.
	ToolProfile string
}

// DefaultXDSOptions are workload S.
func DefaultXDSOptions() XDSOptions {
	return XDSOptions{
		World: loadkit.DefaultWorldOptions(), Fleet: loadkit.DefaultFleetOptions(), Server: loadkit.DefaultServerOptions(),
		Out: "bench-results/xds", Endpoints: 20, VirtualServices: 20, Services: 10, Reconnects: 20, Rate: 2,
		Idle: 10 * time.Second, Timeout: 2 * time.Minute, ProfileSeconds: 30 * time.Second,
	}
}

// AddFlags registers the run's flags.
func (o *XDSOptions) AddFlags(fs *pflag.FlagSet) {
	o.World.AddFlags(fs)
	o.Fleet.AddFlags(fs)
	o.Server.AddFlags(fs)
	fs.StringVar(&o.Out, "out", o.Out, "directory for the world, the server log, profiles and report.json/report.txt (must not hold a world yet)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "write the world into this API server (and start discovery serve --kubeconfig) instead of a config directory")
	fs.IntVar(&o.Endpoints, "endpoint-changes", o.Endpoints, "endpoint changes (one endpoint of a service replaced)")
	fs.IntVar(&o.VirtualServices, "vs-changes", o.VirtualServices, "VirtualService edits")
	fs.IntVar(&o.Services, "service-changes", o.Services, "services added and removed (alternately)")
	fs.IntVar(&o.Reconnects, "reconnects", o.Reconnects, "proxies reconnecting (one at a time, at --rate)")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "changes per second within a phase")
	fs.DurationVar(&o.Idle, "idle", o.Idle, "quiet period after the fleet connected, to measure the server's CPU at rest")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "longest wait for a phase to reach every proxy")
	fs.StringVar(&o.ToolProfile, "tool-cpu-profile", o.ToolProfile, "write the load tool's own CPU profile to this file (to tell the client's cost from the server's)")
	fs.BoolVar(&o.Profile, "profile", o.Profile, "save CPU profiles of the server from the start of the connect phase and of the change phases, and heap profiles after each, taken after a collection (needs --server-pprof or a running server with /debug/pprof on --monitoring-address)")
	fs.DurationVar(&o.ProfileSeconds, "profile-seconds", o.ProfileSeconds, "length of each CPU profile")
}

// Validate reports every invalid option.
func (o *XDSOptions) Validate() error {
	errs := []error{o.World.Validate(), o.Fleet.Validate(), o.Server.Validate()}
	if o.Out == "" {
		errs = append(errs, errors.New("--out must not be empty"))
	}
	if o.Endpoints < 0 || o.VirtualServices < 0 || o.Services < 0 || o.Reconnects < 0 {
		errs = append(errs, errors.New("change counts must not be negative"))
	}
	if o.VirtualServices > 0 && o.World.VirtualServices == 0 {
		errs = append(errs, errors.New("--vs-changes needs --virtual-services above 0"))
	}
	if o.Rate <= 0 || o.Rate > 1000 {
		errs = append(errs, fmt.Errorf("--rate %g: must be above 0 and at most 1000", o.Rate))
	}
	if o.Timeout <= 0 || o.Idle < 0 {
		errs = append(errs, errors.New("--timeout must be positive and --idle not negative"))
	}
	return errors.Join(errs...)
}

// run is one xDS load run in progress.
type run struct {
	o       XDSOptions
	world   *loadkit.World
	fleet   *loadkit.Fleet
	server  *loadkit.Server
	srv     *loadkit.Sampler
	self    *loadkit.Sampler
	report  *Report
	phase0  time.Time
	totals0 loadkit.Totals
	s0, t0  loadkit.ProcSample
	m0      float64
}

// RunXDS generates the world, starts (or attaches to) the server, connects
// the fleet, applies the changes phase by phase and writes the report.
func RunXDS(ctx context.Context, o XDSOptions, out io.Writer) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	out = orDiscard(out)
	if o.ToolProfile != "" {
		stop, err := profileSelf(o.ToolProfile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	world, server, err := o.startWorld(ctx)
	if err != nil {
		return nil, err
	}
	defer server.Stop()
	f, err := loadkit.NewFleet(o.Fleet, world)
	if err != nil {
		return nil, err
	}
	r := &run{
		o: o, world: world, fleet: f, server: server,
		srv: loadkit.NewSampler(server.PID, o.Server.SampleInterval), self: loadkit.NewSampler(os.Getpid(), o.Server.SampleInterval),
		report: &Report{
			Tool: "discovery-load xds", Started: time.Now(), Commit: o.Server.ReportCommit(), Machine: loadkit.MachineInfo(),
			World: o.World, Fleet: o.Fleet, Args: o.Server.Args, ServerStarted: server.Started,
		},
	}
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go r.srv.Run(sctx)
	go r.self.Run(sctx)
	first := r.srv.Sample()
	busyStart, _ := loadkit.MachineCPU()
	selfStart := r.self.Sample()

	fctx, stopFleet := context.WithCancel(ctx)
	wait, err := r.connect(fctx, out)
	if err != nil {
		stopFleet()
		return nil, err
	}
	err = r.phases(ctx, out)
	if o.Fleet.Verify {
		v := r.fleet.Verify(r.world)
		r.report.Verify = &v
	}
	stopFleet()
	wait()
	r.finish(first, selfStart, busyStart)
	if err != nil {
		r.report.Notes = append(r.report.Notes, "run stopped: "+err.Error())
	}
	if werr := r.report.write(o.Out, out); werr != nil {
		return r.report, errors.Join(err, werr)
	}
	return r.report, err
}

// startWorld writes the world (files or API server) and starts the server
// on it.
func (o *XDSOptions) startWorld(ctx context.Context) (*loadkit.World, *loadkit.Server, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, nil, err
	}
	if o.Kubeconfig != "" {
		world, err := loadkit.NewKubeWorld(ctx, o.World, o.Kubeconfig)
		if err != nil {
			return nil, nil, err
		}
		server, err := loadkit.StartServer(ctx, o.Server, "", o.Out, "--kubeconfig", o.Kubeconfig)
		return world, server, err
	}
	dir := filepath.Join(o.Out, "world")
	world, err := loadkit.NewWorld(ctx, o.World, dir)
	if err != nil {
		return nil, nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, err
	}
	server, err := loadkit.StartServer(ctx, o.Server, abs, o.Out)
	return world, server, err
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// begin marks the start of a phase.
func (r *run) begin() {
	r.phase0 = time.Now()
	r.totals0 = r.fleet.Totals()
	r.s0, r.t0 = r.srv.Sample(), r.self.Sample()
	r.m0, _ = loadkit.MachineCPU()
}

// quiesce waits until the proxies have received nothing for a second (at
// most 30 s), so that pushes a phase caused after its changes converged
// (a removed service's listeners and routes) count in that phase.
func (r *run) quiesce(ctx context.Context) {
	const quiet, most, poll = time.Second, 30 * time.Second, 100 * time.Millisecond
	deadline := time.Now().Add(most)
	last, since := r.fleet.Totals().Pushes(), time.Now()
	for time.Since(since) < quiet && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(poll):
		}
		if n := r.fleet.Totals().Pushes(); n != last {
			last, since = n, time.Now()
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// end records a phase of the given changes once the proxies are quiet.
func (r *run) end(ctx context.Context, name string, changes []*loadkit.Change, out io.Writer) PhaseResult {
	if name != "idle" {
		r.quiesce(ctx)
	}
	s1, t1 := r.srv.Sample(), r.self.Sample()
	m1, _ := loadkit.MachineCPU()
	d := r.fleet.Totals().Minus(r.totals0)
	p := PhaseResult{
		Name: name, Seconds: time.Since(r.phase0).Seconds(), Changes: len(changes), Pushes: d.Pushes(), ByType: d.Responses,
		Bytes: d.Bytes, NACKs: d.NACKs, StreamsDropped: d.Drops, Server: r.srv.Window(r.s0, s1), Tool: r.self.Window(r.t0, t1),
	}
	if p.Seconds > 0 {
		p.MachineBusyCores = (m1 - r.m0) / p.Seconds
	}
	var all, first, last []time.Duration
	for _, c := range changes {
		got, missed := c.Times()
		all = append(all, got...)
		p.Converged += len(got)
		p.Missed += missed
		ct := ChangeTimes{At: c.Start().UnixMilli()}
		if missed == 0 && len(got) > 0 {
			last = append(last, slices.Max(got))
			ct.LastMs = ms(slices.Max(got))
		}
		if len(got) > 0 {
			first = append(first, slices.Min(got))
			ct.FirstMs = ms(slices.Min(got))
		}
		p.PerChange = append(p.PerChange, ct)
	}
	p.PerProxy, p.AllProxies, p.FirstProxy = loadkit.PercentilesOf(all), loadkit.PercentilesOf(last), loadkit.PercentilesOf(first)
	switch name {
	case loadkit.KindConnect: // one full configuration per proxy
		p.BytesPerProxyPerChange = float64(p.Bytes) / float64(r.o.Fleet.Proxies)
	case loadkit.KindReconnect: // one full configuration per reconnect
		p.BytesPerProxyPerChange = float64(p.Bytes) / float64(max(1, len(changes)))
	default:
		p.BytesPerProxyPerChange = float64(p.Bytes) / float64(max(1, len(changes)*r.o.Fleet.Proxies))
	}
	r.report.Phases = append(r.report.Phases, p)
	fmt.Fprintf(out, "%-15s %4d changes  p50 %8.1f ms  p99 %8.1f ms  max %8.1f ms  missed %d  NACKs %d  server %.1f CPU s, peak %.0f MiB\n",
		name, p.Changes, p.PerProxy.P50, p.PerProxy.P99, p.PerProxy.Max, p.Missed, p.NACKs, p.Server.CPUSeconds, p.Server.PeakRSSMiB)
	return p
}

// connect starts the fleet and waits until every proxy holds a complete
// configuration (phase "connect": time from each proxy's stream opening to
// its complete configuration; all at once, that is from the phase's start).
func (r *run) connect(ctx context.Context, out io.Writer) (func(), error) {
	r.begin()
	stopProfile := r.startProfile(ctx, "connect")
	defer stopProfile()
	c := r.fleet.Track(loadkit.KindConnect, -1, nil, true)
	wait, err := r.fleet.Start(ctx, r.server.XDS)
	if err != nil {
		return nil, err
	}
	werr := loadkit.WaitChanges(ctx, r.o.Timeout, c)
	r.fleet.Retire(c)
	r.end(ctx, loadkit.KindConnect, []*loadkit.Change{c}, out)
	if werr != nil {
		r.report.Notes = append(r.report.Notes, fmt.Sprintf("connect: not every proxy converged within %s", r.o.Timeout))
	}
	return wait, nil
}

// phases runs the quiet period, then each kind of change.
func (r *run) phases(ctx context.Context, out io.Writer) error {
	if r.o.Idle > 0 {
		r.begin()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.o.Idle):
		}
		r.end(ctx, "idle", nil, out)
	}
	stopProfile := r.startProfile(ctx, "changes")
	defer stopProfile()
	kinds := []struct {
		n    int
		make func(int, *loadkit.Names) (*loadkit.Edit, error)
	}{
		{r.o.Endpoints, r.world.ChurnEndpoint},
		{r.o.VirtualServices, r.world.EditVirtualService},
		{(r.o.Services + 1) / 2, r.world.AddService},
		{(r.o.Services + 1) / 2, r.world.RemoveService},
	}
	for _, k := range kinds {
		if k.n == 0 {
			continue
		}
		if err := r.changePhase(ctx, k.n, k.make, out); err != nil {
			return err
		}
	}
	if r.o.Reconnects > 0 {
		return r.reconnectPhase(ctx, out)
	}
	return nil
}

// pace waits until the i-th change of a phase that began at start is due.
func (r *run) pace(ctx context.Context, start time.Time, i int) error {
	due := start.Add(time.Duration(float64(i) / r.o.Rate * float64(time.Second)))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(due)):
		return nil
	}
}

func (r *run) changePhase(ctx context.Context, n int, make func(int, *loadkit.Names) (*loadkit.Edit, error), out io.Writer) error {
	r.begin()
	var cs []*loadkit.Change
	kind := ""
	for i := 0; i < n; i++ {
		if err := r.pace(ctx, r.phase0, i); err != nil {
			return err
		}
		e, err := make(i, r.fleet.Names())
		if err != nil {
			return err
		}
		c := r.fleet.Track(e.Kind, -1, e.Expects, false)
		if err := e.Write(); err != nil {
			return fmt.Errorf("write %s change: %w", e.Kind, err)
		}
		kind = e.Kind
		cs = append(cs, c)
	}
	werr := loadkit.WaitChanges(ctx, r.o.Timeout, cs...)
	if werr != nil {
		r.report.Notes = append(r.report.Notes, fmt.Sprintf("%s: not every proxy converged within %s", kind, r.o.Timeout))
		for i, c := range cs {
			if m := c.Missing(); len(m) > 0 {
				r.report.Notes = append(r.report.Notes, fmt.Sprintf("%s change %d: %d proxies lack it, the first: %s (node %s)",
					kind, i, len(m), r.fleet.Explain(c, m[0]), r.fleet.NodeID(m[0])))
			}
		}
	}
	r.fleet.Retire(cs...)
	r.end(ctx, kind, cs, out)
	return nil
}

// reconnectPhase closes one proxy's stream at a time (spread over the
// fleet) and times until the new stream holds a complete configuration.
func (r *run) reconnectPhase(ctx context.Context, out io.Writer) error {
	r.begin()
	var cs []*loadkit.Change
	stride := max(1, r.fleet.Len()/max(1, r.o.Reconnects))
	for i := 0; i < r.o.Reconnects; i++ {
		if err := r.pace(ctx, r.phase0, i); err != nil {
			return err
		}
		target := (i * stride) % r.fleet.Len()
		c := r.fleet.Track(loadkit.KindReconnect, target, nil, true)
		r.fleet.Reconnect(target)
		cs = append(cs, c)
	}
	werr := loadkit.WaitChanges(ctx, r.o.Timeout, cs...)
	r.fleet.Retire(cs...)
	r.end(ctx, loadkit.KindReconnect, cs, out)
	if werr != nil {
		r.report.Notes = append(r.report.Notes, fmt.Sprintf("reconnect: not every proxy converged within %s", r.o.Timeout))
	}
	return nil
}

// startProfile, when asked, fetches a CPU profile of the server over the
// next ProfileSeconds under the name server-cpu-<name>.pprof; the
// returned function waits for it and saves a heap profile
// server-heap-<name>.pprof, taken after a collection (gc=1): what is
// live once the phase is over, not what was at the last collection
// during it.
func (r *run) startProfile(ctx context.Context, name string) func() {
	if !r.o.Profile {
		return func() {}
	}
	done := make(chan error, 1)
	cpu := filepath.Join(r.o.Out, "server-cpu-"+name+".pprof")
	what := fmt.Sprintf("profile?seconds=%d", int(r.o.ProfileSeconds.Seconds()))
	go func() { done <- loadkit.FetchProfile(ctx, r.server.Pprof, what, cpu) }()
	return func() {
		if err := <-done; err != nil {
			r.report.Notes = append(r.report.Notes, "CPU profile: "+err.Error())
		} else {
			r.report.Profiles = append(r.report.Profiles, cpu)
		}
		heap := filepath.Join(r.o.Out, "server-heap-"+name+".pprof")
		if err := loadkit.FetchProfile(ctx, r.server.Pprof, "heap?gc=1", heap); err != nil {
			r.report.Notes = append(r.report.Notes, "heap profile: "+err.Error())
		} else {
			r.report.Profiles = append(r.report.Profiles, heap)
		}
	}
}

// finish fills in the run's totals.
func (r *run) finish(first, selfStart loadkit.ProcSample, busyStart float64) {
	last, selfEnd := r.srv.Sample(), r.self.Sample()
	busyEnd, _ := loadkit.MachineCPU()
	r.report.Server = r.srv.Window(first, last)
	if d := last.At.Sub(first.At).Seconds(); d > 0 {
		other := (busyEnd - busyStart) - (last.CPU - first.CPU) - (selfEnd.CPU - selfStart.CPU)
		r.report.Machine.OtherCores = max(0, other/d)
	}
	r.report.Machine.LoadAvgEnd = loadkit.LoadAvg()
	if m, err := loadkit.ScrapeMetrics(r.server.Monitor); err == nil {
		r.report.Metrics = map[string]float64{}
		for _, k := range []string{"pilot_xds", "pilot_xds_pushes", "pilot_total_xds_rejects", "discovery_xds_streams_closed_total", "pilot_push_triggers", "pilot_services"} {
			r.report.Metrics[k] = m[k]
		}
	} else {
		r.report.Notes = append(r.report.Notes, "server metrics: "+err.Error())
	}
	r.report.Notes = append(r.report.Notes, r.fleet.Notes()...)
}

// profileSelf profiles the tool's CPU into path until stop is called.
func profileSelf(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}
