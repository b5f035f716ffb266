package loadkit

import (
	"time"
)

// FleetStatus is a moment's view of the well-behaved proxies' streams.
type FleetStatus struct {
	// Proxies counts the well-behaved proxies; Complete those whose
	// current stream holds a complete configuration.
	Proxies, Complete int
	// ByRemote counts the complete proxies by the address their
	// connection was dialed to (the replica serving them).
	ByRemote map[string]int
	// Without counts the proxies that had a complete stream, lost it,
	// and have no complete stream yet; Longest is the longest of these
	// open gaps so far.
	Without int
	Longest time.Duration
}

// Status reports the fleet's streams now.
func (f *Fleet) Status() FleetStatus {
	st := FleetStatus{ByRemote: map[string]int{}}
	now := time.Now()
	for _, p := range f.proxies {
		if !p.behavior.normal() {
			continue
		}
		st.Proxies++
		p.mu.Lock()
		complete, lost := p.complete, p.lostAt
		p.mu.Unlock()
		if complete {
			st.Complete++
			if r, ok := p.remote.Load().(string); ok {
				st.ByRemote[r]++
			}
		}
		if !lost.IsZero() {
			st.Without++
			st.Longest = max(st.Longest, now.Sub(lost))
		}
	}
	return st
}

// Gaps returns every time a well-behaved proxy spent between losing a
// complete stream and holding a complete configuration on a new one, and
// the gaps still open (measured until now).
func (f *Fleet) Gaps() (closed, open []time.Duration) {
	now := time.Now()
	for _, p := range f.proxies {
		if !p.behavior.normal() {
			continue
		}
		p.mu.Lock()
		closed = append(closed, p.gaps...)
		if !p.lostAt.IsZero() {
			open = append(open, now.Sub(p.lostAt))
		}
		p.mu.Unlock()
	}
	return closed, open
}

// GapPhases returns the phases of every closed gap (Gaps), in no order.
func (f *Fleet) GapPhases() []GapPhases {
	var out []GapPhases
	for _, p := range f.proxies {
		if !p.behavior.normal() {
			continue
		}
		p.mu.Lock()
		out = append(out, p.phases...)
		p.mu.Unlock()
	}
	return out
}

// ResetGaps forgets the gaps recorded so far (not the open ones).
func (f *Fleet) ResetGaps() {
	for _, p := range f.proxies {
		p.mu.Lock()
		p.gaps, p.phases = nil, nil
		p.mu.Unlock()
	}
}

// WaitComplete waits until every well-behaved proxy's current stream
// holds a complete configuration, or timeout; it returns how long that
// took and whether it happened.
func (f *Fleet) WaitComplete(done <-chan struct{}, timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		st := f.Status()
		if st.Complete == st.Proxies {
			return time.Since(start), true
		}
		if time.Now().After(deadline) {
			return time.Since(start), false
		}
		select {
		case <-done:
			return time.Since(start), false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Outages returns, for each well-behaved proxy in Dialed's order, when a
// stream of its last became complete and when it last lost a complete
// configuration without having one again yet (zero for neither).
func (f *Fleet) Outages() (completed, lost []time.Time) {
	for _, p := range f.proxies {
		if !p.behavior.normal() {
			continue
		}
		p.mu.Lock()
		completed, lost = append(completed, p.completedAt), append(lost, p.lostAt)
		p.mu.Unlock()
	}
	return completed, lost
}

// Dialed returns, for each well-behaved proxy, when its last connection
// was dialed and to which address (zero and "" before its first).
func (f *Fleet) Dialed() (at []time.Time, to []string) {
	for _, p := range f.proxies {
		if !p.behavior.normal() {
			continue
		}
		var t time.Time
		if n := p.dialed.Load(); n != 0 {
			t = time.Unix(0, n)
		}
		r, _ := p.remote.Load().(string)
		at, to = append(at, t), append(to, r)
	}
	return at, to
}
