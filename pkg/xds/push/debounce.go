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
// A batch's quiet period starts at a base and grows only under a burst:
// it doubles with each further update that arrives while the batch waits
// (and for a batch that starts within Quiet of the last push), up to
// Quiet, and is back to its base for the next batch after a quiet spell.
// A lone change is pushed after the base; a burst (a rollout, a node
// going away, kubectl apply of a directory) is merged as with a fixed
// Quiet, at the price of a push or two at its start. The base of a batch
// of endpoint changes only (SetEndpointQuiet) is shorter than that of a
// batch holding any other change (SetConfigQuiet; Quiet unless set):
// endpoints merged with a configuration change wait with it, never ahead
// of it (they share one World, which must reach the proxies whole).
// istiod waits a fixed PILOT_DEBOUNCE_AFTER (100ms) for every change, and
// with PILOT_ENABLE_EDS_DEBOUNCE=false pushes endpoint changes with no
// debounce at all; this keeps a floor against per-event pushes.
type Debouncer struct {
	quiet, max time.Duration
	epQuiet    time.Duration // base quiet period of endpoint-only batches; 0: cfgQuiet
	cfgQuiet   time.Duration // base quiet period of other batches; 0: quiet
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

// SetConfigQuiet sets the base quiet period of batches holding a change
// other than endpoints (at most Quiet; 0: Quiet, a fixed period). Call it
// before Start.
func (d *Debouncer) SetConfigQuiet(base time.Duration) {
	d.cfgQuiet = min(base, d.quiet)
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
	var cur time.Duration // the quiet period of this batch
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
			base := d.quiet
			if d.cfgQuiet > 0 {
				base = d.cfgQuiet
			}
			if !config && d.epQuiet > 0 {
				base = min(d.epQuiet, base)
			}
			switch {
			case armed || d.now().Sub(lastPush) < d.quiet:
				// A burst: a further change in this batch, or a batch
				// that starts within Quiet of the last push.
				cur = min(max(2*cur, base), d.quiet)
			default:
				cur = base
			}
			wait := cur
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
