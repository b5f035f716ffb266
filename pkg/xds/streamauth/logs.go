package streamauth

import (
	"log/slog"
	"sync"

	"golang.org/x/time/rate"
)

// RefusalLog bounds the log lines of refused streams, per reason: a
// burst, then one line a second; what it leaves out is counted and said
// in the next line it writes. Metrics count every refusal (here
// pilot_xds_auth_failures_total, in the xDS server
// discovery_xds_streams_refused_total); a flood of refused streams would
// otherwise write a line each. The xDS server uses one for its own
// refusals.
type RefusalLog struct {
	log *slog.Logger

	mu         sync.Mutex
	limits     map[string]*rate.Limiter // one per reason: bounded
	suppressed map[string]int
}

// NewRefusalLog returns a RefusalLog writing to log.
func NewRefusalLog(log *slog.Logger) *RefusalLog {
	return &RefusalLog{log: log, limits: map[string]*rate.Limiter{}, suppressed: map[string]int{}}
}

// Warn logs msg at WARN for reason unless the reason's budget is spent.
func (l *RefusalLog) Warn(reason, msg string, args ...any) {
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
