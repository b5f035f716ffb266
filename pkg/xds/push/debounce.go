package push

import (
	"context"
	"sync"
	"time"

	"github.com/meshplane/discovery/pkg/model"
)

// Request is what a debounced push is about: the newest World and every
// change since the previous push.
type Request struct {
	World *model.World
	// Changes maps each changed object to its last operation.
	Changes map[model.Key]model.Op
	// First is when the first of the merged updates arrived.
	First time.Time
	// Updates is the number of merged updates.
	Updates int
}

// EndpointsOnly reports whether nothing but endpoints changed.
func (r *Request) EndpointsOnly() bool {
	for k := range r.Changes {
		if k.Kind != model.KindEndpoints && k.Kind != model.KindEndpointSlice {
			return false
		}
	}
	return len(r.Changes) > 0
}

// Reasons counts the changes by kind, for metrics and /debug/push_status.
func (r *Request) Reasons() map[string]int {
	out := map[string]int{}
	for k := range r.Changes {
		out[string(k.Kind)]++
	}
	return out
}

// Debouncer merges Updates and calls its handler once the World has been
// quiet for Quiet, or Max after the first unhandled update, whichever comes
// first. The handler runs on Start's goroutine, one Request at a time;
// updates arriving meanwhile wait for the next Request.
type Debouncer struct {
	quiet, max time.Duration
	handle     func(context.Context, *Request)
	now        func() time.Time

	mu      sync.Mutex
	pending *Request
	kick    chan struct{}
}

// NewDebouncer returns a Debouncer that calls handle.
func NewDebouncer(quiet, max time.Duration, handle func(context.Context, *Request)) *Debouncer {
	return &Debouncer{quiet: quiet, max: max, handle: handle, now: time.Now, kick: make(chan struct{}, 1)}
}

// Enqueue adds an update. It never blocks, so it may be called from the
// Store's subscriber callback.
func (d *Debouncer) Enqueue(u *model.Update) {
	d.mu.Lock()
	if d.pending == nil {
		d.pending = &Request{Changes: map[model.Key]model.Op{}, First: d.now()}
	}
	d.pending.World = u.World
	d.pending.Updates++
	for _, c := range u.Changes {
		d.pending.Changes[c.Key] = c.Op
	}
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Start runs the debounce loop until ctx ends.
func (d *Debouncer) Start(ctx context.Context) error {
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	var deadline <-chan time.Time
	var maxTimer *time.Timer
	armed := false
	for {
		select {
		case <-ctx.Done():
			quiet.Stop()
			if maxTimer != nil {
				maxTimer.Stop()
			}
			return nil
		case <-d.kick:
			quiet.Reset(d.quiet)
			if !armed {
				armed = true
				maxTimer = time.NewTimer(d.max)
				deadline = maxTimer.C
			}
			continue
		case <-quiet.C:
		case <-deadline:
			quiet.Stop()
		}
		armed = false
		deadline = nil
		if maxTimer != nil {
			maxTimer.Stop()
		}
		d.mu.Lock()
		req := d.pending
		d.pending = nil
		d.mu.Unlock()
		if req != nil {
			d.handle(ctx, req)
		}
	}
}
