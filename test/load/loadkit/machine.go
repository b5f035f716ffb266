package loadkit

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
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

// PercentilesOf computes nearest-rank percentiles of ds.
func PercentilesOf(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(q*float64(len(s))+0.999999) - 1 // nearest rank
		return Ms(s[min(max(i, 0), len(s)-1)])
	}
	return Percentiles{Count: len(s), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: Ms(s[len(s)-1])}
}

// Ms is d in milliseconds, to the microsecond.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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

// MachineInfo describes this machine now.
func MachineInfo() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: LoadAvg()}
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
