package ca

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// Bounds of untrusted text in logs: one field a caller controls (a SAN, the
// ImpersonatedIdentity, a PEM type, an API server's or x509's error text
// that quotes them), and a whole refusal detail.
const (
	maxFieldLog  = 128
	maxDetailLog = 1024
)

// clip bounds s, an untrusted string on its way to a log, to maxFieldLog
// bytes with a marker saying how much was cut.
func clip(s string) string { return clipTo(s, maxFieldLog) }

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("...[%d bytes truncated]", len(s)-cut)
}

// refusalLog rate-limits the log lines of refused requests: per reason,
// the first burst refusals of each interval are logged in full; the rest
// are counted, and a summary line says how many were suppressed when the
// interval is over (at the next refusal of that reason, or at the next
// flush). Metrics count every refusal whether logged or not.
type refusalLog struct {
	log      *slog.Logger
	burst    int // 0: log every refusal
	interval time.Duration
	now      func() time.Time
	metrics  *metrics

	mu      sync.Mutex
	windows map[Reason]*refusalWindow // one per Reason: bounded
}

type refusalWindow struct {
	start      time.Time
	logged     int
	suppressed int
}

func newRefusalLog(log *slog.Logger, burst int, interval time.Duration, m *metrics) *refusalLog {
	return &refusalLog{log: log, burst: burst, interval: interval, now: time.Now, metrics: m, windows: map[Reason]*refusalWindow{}}
}

// allow reports whether a refusal for r is logged in full.
func (l *refusalLog) allow(r Reason) bool {
	if l.burst <= 0 {
		return true
	}
	now := l.now()
	l.mu.Lock()
	w := l.windows[r]
	if w == nil || now.Sub(w.start) >= l.interval {
		if w != nil {
			l.summarize(r, w, now)
		}
		w = &refusalWindow{start: now}
		l.windows[r] = w
	}
	ok := w.logged < l.burst
	if ok {
		w.logged++
	} else {
		w.suppressed++
	}
	l.mu.Unlock()
	if !ok {
		l.metrics.logsSuppressed.WithLabelValues(r.String()).Inc()
	}
	return ok
}

// summarize logs how many refusals of w were suppressed, if any. l.mu is held.
func (l *refusalLog) summarize(r Reason, w *refusalWindow, now time.Time) {
	if w.suppressed == 0 {
		return
	}
	l.log.Warn(fmt.Sprintf("suppressed %d certificate request refusals (reason %s)", w.suppressed, r),
		"suppressed", w.suppressed, "reason", r.String(), "logged", w.logged, "since", w.start.UTC().Format(time.RFC3339),
		"over", now.Sub(w.start).Round(time.Millisecond).String())
	w.suppressed = 0
}

// flush logs the summaries of windows that are over (or all, when final).
func (l *refusalLog) flush(final bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for r, w := range l.windows {
		if final || now.Sub(w.start) >= l.interval {
			l.summarize(r, w, now)
			delete(l.windows, r)
		}
	}
}

// run flushes the summaries every interval until ctx ends, then once more.
func (l *refusalLog) run(ctx context.Context) error {
	if l.burst <= 0 {
		return nil
	}
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.flush(true)
			return nil
		case <-t.C:
			l.flush(false)
		}
	}
}
