package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// PhaseResult is one phase of a run: one kind of change, or the
// connection of the fleet, or a quiet period.
type PhaseResult struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Changes int     `json:"changes"`
	// PerProxy is, over every change and every proxy it concerns, the time
	// from the change's write to the proxy's ACK of it.
	PerProxy loadkit.Percentiles `json:"perProxy"`
	// AllProxies is, per change, the time until the last proxy had it.
	AllProxies loadkit.Percentiles `json:"allProxies"`
	// FirstProxy is, per change, the time until the first proxy had it:
	// what the server takes before its fan-out (watch, debounce,
	// generation, one send and its ACK); AllProxies less FirstProxy is the
	// fan-out.
	FirstProxy loadkit.Percentiles `json:"firstProxy"`
	// Converged and Missed count (change, proxy) pairs.
	Converged int              `json:"converged"`
	Missed    int              `json:"missed"`
	Pushes    int64            `json:"pushes"`
	ByType    map[string]int64 `json:"pushesByType"`
	Bytes     int64            `json:"bytes"`
	// BytesPerProxyPerChange is Bytes over changes and proxies.
	BytesPerProxyPerChange float64            `json:"bytesPerProxyPerChange"`
	NACKs                  int64              `json:"nacks"`
	StreamsDropped         int64              `json:"streamsDropped"`
	Server                 loadkit.ProcWindow `json:"server"`
	Tool                   loadkit.ProcWindow `json:"tool"`
	// MachineBusyCores is the whole machine's CPU use over the phase.
	MachineBusyCores float64 `json:"machineBusyCores"`
	// PerChange is, for each change in the order written, when it was
	// written and how long its first and its last proxy took: the tail of
	// AllProxies, change by change.
	PerChange []ChangeTimes `json:"perChange,omitempty"`
}

// ChangeTimes is one change's timing. LastMs is 0 when a proxy missed
// the change.
type ChangeTimes struct {
	// At is when the change was written, in Unix milliseconds.
	At      int64   `json:"at"`
	FirstMs float64 `json:"firstMs"`
	LastMs  float64 `json:"lastMs"`
}

// Report is the result of a run, written as report.json and report.txt.
type Report struct {
	Tool    string               `json:"tool"`
	Started time.Time            `json:"started"`
	Commit  string               `json:"commit,omitempty"`
	Machine loadkit.Machine      `json:"machine"`
	World   loadkit.WorldOptions `json:"world"`
	Fleet   loadkit.FleetOptions `json:"fleet"`
	Args    []string             `json:"serverArgs,omitempty"`
	// ServerStarted is when the server process started.
	ServerStarted time.Time          `json:"serverStarted"`
	Phases        []PhaseResult      `json:"phases"`
	Server        loadkit.ProcWindow `json:"server"`
	Metrics       map[string]float64 `json:"serverMetrics,omitempty"`
	Profiles      []string           `json:"profiles,omitempty"`
	// Verify is the check of every proxy's configuration at the end
	// (--verify).
	Verify *loadkit.Verification `json:"verify,omitempty"`
	Notes  []string              `json:"notes,omitempty"`
}

// write saves the report as JSON and text in dir and prints the text.
func (r *Report) write(dir string, out io.Writer) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(dir+"/report.json", append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	r.text(&b)
	if err := os.WriteFile(dir+"/report.txt", []byte(b.String()), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(out, b.String())
	return err
}

func (r *Report) text(w io.Writer) {
	mode := "delta"
	if r.Fleet.SotW {
		mode = "sotw"
	}
	fmt.Fprintf(w, "world: %d services x %d ports, %d endpoints each, %d namespaces, %d VirtualServices; %d %s proxies\n",
		r.World.Services, r.World.Ports, r.World.EndpointsPer, r.World.Namespaces, r.World.VirtualServices, r.Fleet.Proxies, mode)
	fmt.Fprintf(w, "machine: %d CPUs (%s), load %s -> %s, other processes %.2f cores; commit %s\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd, r.Machine.OtherCores, r.Commit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tchanges\tp50 ms\tp90 ms\tp99 ms\tmax ms\tfirst-proxy p50 ms\tall-proxies p99 ms\tmissed\tpushes\tbytes/proxy/change\tNACKs\tserver CPU s\tserver cores\tserver peak RSS MiB\ttool CPU s\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.0f\t%d\t%.2f\t%.2f\t%.0f\t%.1f\t\n",
			p.Name, p.Changes, p.PerProxy.P50, p.PerProxy.P90, p.PerProxy.P99, p.PerProxy.Max, p.FirstProxy.P50, p.AllProxies.P99,
			p.Missed, p.Pushes, p.BytesPerProxyPerChange, p.NACKs, p.Server.CPUSeconds, p.Server.CPUCores, p.Server.PeakRSSMiB, p.Tool.CPUSeconds)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "server over the run: %.1f CPU s, peak RSS %.0f MiB (anonymous %.0f MiB), end RSS %.0f MiB\n", r.Server.CPUSeconds, r.Server.PeakRSSMiB, r.Server.PeakAnonMiB, r.Server.EndRSSMiB)
	if r.Verify != nil {
		fmt.Fprintf(w, "verify: %s\n", r.Verify)
	}
	for _, p := range r.Profiles {
		fmt.Fprintf(w, "profile: %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}
