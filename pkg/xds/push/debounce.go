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

	config bool // a change other than endpoints was merged
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
//
// A batch of endpoint changes only has its own, shorter quiet period
// (SetEndpointQuiet), which grows only under a burst: it doubles with each
// further update that arrives while the batch waits, up to Quiet, and is
// back to its base for the next batch. A lone endpoint change is pushed
// after the base period; a burst (a rollout, a node going away) is merged
// as before. A batch that holds any other change waits Quiet: endpoints
// are never pushed ahead of a configuration change already merged with
// them (they share one World, which must reach the proxies whole).
// istiod's PILOT_ENABLE_EDS_DEBOUNCE=false pushes endpoint changes with no
// debounce at all; this keeps a floor against per-event pushes.
type Debouncer struct {
	quiet, max time.Duration
	epQuiet    time.Duration // base quiet period of endpoint-only batches; 0: quiet
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

// SetEndpointQuiet sets the base quiet period of endpoint-only batches (at
// most Quiet; 0 treats them like any other). Call it before Start.
func (d *Debouncer) SetEndpointQuiet(base time.Duration) {
	d.epQuiet = min(base, d.quiet)
}

// pushes reports whether u changed anything a proxy's configuration can
// depend on (not only statuses).
func pushes(u *model.Update) bool {
	for _, c := range u.Changes {
		if !c.StatusOnly {
			return true
		}
	}
	return false
}

// Enqueue adds an update. It never blocks, so it may be called from the
// Store's subscriber callback.
func (d *Debouncer) Enqueue(u *model.Update) {
	d.mu.Lock()
	if !pushes(u) {
		if d.pending != nil {
			d.pending.World = u.World // the newest World, for the push already due
		}
		d.mu.Unlock()
		return
	}
	if d.pending == nil {
		d.pending = &Request{Changes: map[model.Key]model.Op{}, First: d.now()}
	}
	d.pending.World = u.World
	d.pending.Updates++
	for _, c := range u.Changes {
		if c.StatusOnly {
			continue
		}
		d.pending.Changes[c.Key] = c.Op
		if c.Key.Kind != model.KindEndpoints && c.Key.Kind != model.KindEndpointSlice {
			d.pending.config = true
		}
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
	epQuiet := d.epQuiet // the endpoint-only quiet period of this batch
	var lastPush time.Time
	for {
		select {
		case <-ctx.Done():
			quiet.Stop()
			if maxTimer != nil {
				maxTimer.Stop()
			}
			return nil
		case <-d.kick:
			d.mu.Lock()
			none, config := d.pending == nil, d.pending != nil && d.pending.config
			d.mu.Unlock()
			if none {
				continue // its update went out with the last push
			}
			wait := d.quiet
			if d.epQuiet > 0 {
				if !config {
					// A burst: a further change in this batch, or a batch
					// that starts within Quiet of the last push. Otherwise
					// the period is back to its base.
					switch {
					case armed || d.now().Sub(lastPush) < d.quiet:
						epQuiet = min(2*epQuiet, d.quiet)
					default:
						epQuiet = d.epQuiet
					}
					wait = epQuiet
				}
			}
			quiet.Reset(wait)
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
			lastPush = d.now()
		}
	}
}
