package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Percentiles of a set of durations, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(q*float64(len(s))+0.999999) - 1 // nearest rank
		return ms(s[min(max(i, 0), len(s)-1)])
	}
	return Percentiles{Count: len(s), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// PhaseResult is one phase of a run: one kind of change, or the
// connection of the fleet, or a quiet period.
type PhaseResult struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Changes int     `json:"changes"`
	// PerProxy is, over every change and every proxy it concerns, the time
	// from the change's write to the proxy's ACK of it.
	PerProxy Percentiles `json:"perProxy"`
	// AllProxies is, per change, the time until the last proxy had it.
	AllProxies Percentiles `json:"allProxies"`
	// Converged and Missed count (change, proxy) pairs.
	Converged int              `json:"converged"`
	Missed    int              `json:"missed"`
	Pushes    int64            `json:"pushes"`
	ByType    map[string]int64 `json:"pushesByType"`
	Bytes     int64            `json:"bytes"`
	// BytesPerProxyPerChange is Bytes over changes and proxies.
	BytesPerProxyPerChange float64    `json:"bytesPerProxyPerChange"`
	NACKs                  int64      `json:"nacks"`
	StreamsDropped         int64      `json:"streamsDropped"`
	Server                 ProcWindow `json:"server"`
	Tool                   ProcWindow `json:"tool"`
	// MachineBusyCores is the whole machine's CPU use over the phase.
	MachineBusyCores float64 `json:"machineBusyCores"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs         int     `json:"cpus"`
	CPUModel     string  `json:"cpuModel"`
	MemTotalMiB  float64 `json:"memTotalMiB"`
	Kernel       string  `json:"kernel"`
	GoVersion    string  `json:"goVersion"`
	LoadAvgStart string  `json:"loadAvgStart"`
	LoadAvgEnd   string  `json:"loadAvgEnd"`
	OtherCores   float64 `json:"otherBusyCores"` // machine CPU not used by server or tool, averaged over the run
}

// Report is the result of a run, written as report.json and report.txt.
type Report struct {
	Tool     string             `json:"tool"`
	Started  time.Time          `json:"started"`
	Commit   string             `json:"commit,omitempty"`
	Machine  Machine            `json:"machine"`
	World    WorldOptions       `json:"world"`
	Fleet    FleetOptions       `json:"fleet"`
	Args     []string           `json:"serverArgs,omitempty"`
	Phases   []PhaseResult      `json:"phases"`
	Server   ProcWindow         `json:"server"`
	Metrics  map[string]float64 `json:"serverMetrics,omitempty"`
	Profiles []string           `json:"profiles,omitempty"`
	Notes    []string           `json:"notes,omitempty"`
}

func machineInfo() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %f kB", &kb); err == nil {
			m.MemTotalMiB = kb / 1024
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	return m
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
	fmt.Fprintln(tw, "phase\tchanges\tp50 ms\tp90 ms\tp99 ms\tmax ms\tall-proxies p99 ms\tmissed\tpushes\tbytes/proxy/change\tNACKs\tserver CPU s\tserver cores\tserver peak RSS MiB\ttool CPU s\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.0f\t%d\t%.2f\t%.2f\t%.0f\t%.1f\t\n",
			p.Name, p.Changes, p.PerProxy.P50, p.PerProxy.P90, p.PerProxy.P99, p.PerProxy.Max, p.AllProxies.P99,
			p.Missed, p.Pushes, p.BytesPerProxyPerChange, p.NACKs, p.Server.CPUSeconds, p.Server.CPUCores, p.Server.PeakRSSMiB, p.Tool.CPUSeconds)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "server over the run: %.1f CPU s, peak RSS %.0f MiB, end RSS %.0f MiB\n", r.Server.CPUSeconds, r.Server.PeakRSSMiB, r.Server.EndRSSMiB)
	for _, p := range r.Profiles {
		fmt.Fprintf(w, "profile: %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}
