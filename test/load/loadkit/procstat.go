package loadkit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcSample is one reading of a process.
type ProcSample struct {
	At  time.Time
	CPU float64 // seconds of user + system time since the process started
	RSS int64   // bytes
	// Anon is the part of RSS that is the process's own memory (heap,
	// stacks): RSS less its file-backed and shared pages, which for a Go
	// server are mostly its binary's, as much of it as page faults (and
	// the kernel's fault-around) mapped; 0 when /proc/PID/statm is
	// unreadable.
	Anon int64
}

// ReadProc reads a process's CPU time and resident set from /proc.
func ReadProc(pid int) (ProcSample, error) {
	s := ProcSample{At: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name (field 2) may hold spaces: fields count from its ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 22 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	rssPages, err3 := strconv.ParseInt(f[21], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return s, fmt.Errorf("/proc/%d/stat: unreadable times or rss", pid)
	}
	s.CPU = float64(utime+stime) / clockTicks
	s.RSS = rssPages * int64(os.Getpagesize())
	s.Anon = readAnon(pid)
	return s, nil
}

// readAnon reads a process's anonymous resident memory in bytes from
// /proc/PID/statm (resident less shared, both in pages); 0 if unreadable.
func readAnon(pid int) int64 {
	statm, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(statm))
	if len(f) < 3 {
		return 0
	}
	resident, err1 := strconv.ParseInt(f[1], 10, 64)
	shared, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || shared > resident {
		return 0
	}
	return (resident - shared) * int64(os.Getpagesize())
}

// Sampler reads a process every interval and keeps the samples.
type Sampler struct {
	pid      int
	interval time.Duration

	mu      sync.Mutex
	samples []ProcSample
	err     error
}

// NewSampler samples pid every interval once Run runs.
func NewSampler(pid int, interval time.Duration) *Sampler {
	return &Sampler{pid: pid, interval: interval}
}

// Run samples until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.Sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample takes one reading now and returns it.
func (s *Sampler) Sample() ProcSample {
	p, err := ReadProc(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return ProcSample{At: time.Now()}
	}
	s.samples = append(s.samples, p)
	return p
}

// ProcWindow is what a process used over a time window.
type ProcWindow struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUCores is CPUSeconds over the window's length.
	CPUCores   float64 `json:"cpuCores"`
	PeakRSSMiB float64 `json:"peakRssMiB"`
	EndRSSMiB  float64 `json:"endRssMiB"`
	// PeakAnonMiB is the highest anonymous part of RSS (ProcSample.Anon)
	// in the window: the server's own memory, without its binary's pages.
	PeakAnonMiB float64 `json:"peakAnonMiB,omitempty"`
}

// Window summarises the samples between from and to (inclusive).
func (s *Sampler) Window(from, to ProcSample) ProcWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := ProcWindow{CPUSeconds: to.CPU - from.CPU, EndRSSMiB: MiB(to.RSS)}
	if d := to.At.Sub(from.At).Seconds(); d > 0 {
		w.CPUCores = w.CPUSeconds / d
	}
	peak, anon := max(from.RSS, to.RSS), max(from.Anon, to.Anon)
	for _, x := range s.samples {
		if !x.At.Before(from.At) && !x.At.After(to.At) {
			peak, anon = max(peak, x.RSS), max(anon, x.Anon)
		}
	}
	w.PeakRSSMiB, w.PeakAnonMiB = MiB(peak), MiB(anon)
	return w
}

// MiB converts bytes to mebibytes.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// MachineCPU reads the machine's busy and total CPU time (all cores).
func MachineCPU() (busy, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy / clockTicks, total / clockTicks
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// All summarises every sample taken so far.
func (s *Sampler) All() ProcWindow {
	s.mu.Lock()
	if len(s.samples) == 0 {
		s.mu.Unlock()
		return ProcWindow{}
	}
	first, last := s.samples[0], s.samples[len(s.samples)-1]
	s.mu.Unlock()
	return s.Window(first, last)
}

// FirstCPU is the CPU time of the first sample (0 before any).
func (s *Sampler) FirstCPU() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return 0
	}
	return s.samples[0].CPU
}
