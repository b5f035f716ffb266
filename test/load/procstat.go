package main

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

// procSample is one reading of a process.
type procSample struct {
	at  time.Time
	cpu float64 // seconds of user + system time since the process started
	rss int64   // bytes
}

// readProc reads a process's CPU time and resident set from /proc.
func readProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
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
	s.cpu = float64(utime+stime) / clockTicks
	s.rss = rssPages * int64(os.Getpagesize())
	return s, nil
}

// sampler reads a process every interval and keeps the samples.
type sampler struct {
	pid      int
	interval time.Duration

	mu      sync.Mutex
	samples []procSample
	err     error
}

func newSampler(pid int, interval time.Duration) *sampler {
	return &sampler{pid: pid, interval: interval}
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample takes one reading now and returns it.
func (s *sampler) sample() procSample {
	p, err := readProc(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return procSample{at: time.Now()}
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
}

// window summarises the samples between from and to (inclusive).
func (s *sampler) window(from, to procSample) ProcWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := ProcWindow{CPUSeconds: to.cpu - from.cpu, EndRSSMiB: mib(to.rss)}
	if d := to.at.Sub(from.at).Seconds(); d > 0 {
		w.CPUCores = w.CPUSeconds / d
	}
	peak := max(from.rss, to.rss)
	for _, x := range s.samples {
		if !x.at.Before(from.at) && !x.at.After(to.at) {
			peak = max(peak, x.rss)
		}
	}
	w.PeakRSSMiB = mib(peak)
	return w
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// machineCPU reads the machine's busy and total CPU time (all cores).
func machineCPU() (busy, total float64) {
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

func loadAvg() string {
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
