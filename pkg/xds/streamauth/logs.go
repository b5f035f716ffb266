package streamauth

import (
	"log/slog"
	"sync"

	"golang.org/x/time/rate"
)

// refusalLog bounds the log lines of refused streams, per reason: a
// burst, then one line a second; what it leaves out is counted and said
// in the next line it writes. pilot_xds_auth_failures_total counts every
// refusal. A flood of unauthenticated streams would otherwise write a line
// each.
type refusalLog struct {
	log *slog.Logger

	mu         sync.Mutex
	limits     map[string]*rate.Limiter // one per reason: bounded
	suppressed map[string]int
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, limits: map[string]*rate.Limiter{}, suppressed: map[string]int{}}
}

// warn logs msg for reason unless its budget is spent.
func (l *refusalLog) warn(reason, msg string, args ...any) {
	l.mu.Lock()
	lim := l.limits[reason]
	if lim == nil {
		lim = rate.NewLimiter(1, 10)
		l.limits[reason] = lim
	}
	if !lim.Allow() {
		l.suppressed[reason]++
		l.mu.Unlock()
		return
	}
	n := l.suppressed[reason]
	l.suppressed[reason] = 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressedBefore", n)
	}
	l.log.Warn(msg, args...)
}
