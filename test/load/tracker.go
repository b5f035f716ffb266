package main

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
)

// Kinds of change the tool times.
const (
	kindConnect       = "connect"
	kindEndpoint      = "endpoint"
	kindVirtualSvc    = "virtualservice"
	kindServiceAdd    = "service-add"
	kindServiceRemove = "service-remove"
	kindReconnect     = "reconnect"
)

// names interns resource names: proxies keep uint32 ids, not strings,
// so 1,000 proxies holding 4,000 names each stay small.
type names struct {
	mu   sync.RWMutex
	ids  map[string]uint32
	strs []string
}

func newNames() *names { return &names{ids: map[string]uint32{}, strs: []string{""}} }

// id returns the id of s, assigning one the first time.
func (n *names) id(s string) uint32 {
	n.mu.RLock()
	id, ok := n.ids[s]
	n.mu.RUnlock()
	if ok {
		return id
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.ids[s]; ok {
		return id
	}
	id = uint32(len(n.strs))
	s = string([]byte(s)) // do not keep the decoded response alive
	n.ids[s] = id
	n.strs = append(n.strs, s)
	return id
}

// str returns the name of id.
func (n *names) str(id uint32) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.strs[id]
}

// expectation is one thing a proxy must have ACKed for a change to be done
// at that proxy: a resource (of a type, by name) that satisfies match, or
// the resource's removal.
type expectation struct {
	typeURL string
	name    uint32
	removed bool
	// match checks the decoded resource; nil accepts any version.
	match func(proto.Message) bool
}

// change is one change applied to the world (or a reconnect), with the
// proxies it must reach and the time each took.
type change struct {
	id      int
	kind    string
	start   time.Time
	expects []expectation
	// target is the one proxy a reconnect concerns; -1 means every proxy.
	target int
	// onComplete: done at a proxy when a stream opened after start holds a
	// complete configuration (connect and reconnect).
	onComplete bool
	full       uint64

	progress  []uint64       // per proxy, written only by that proxy's goroutine
	durations []atomic.Int64 // per proxy, nanoseconds; 0 while not done
	remaining atomic.Int64
	done      chan struct{}
}

const doneBit = 1 << 63

func newChange(id int, kind string, proxies, target int, expects []expectation) *change {
	c := &change{id: id, kind: kind, start: time.Now(), expects: expects, target: target,
		progress: make([]uint64, proxies), durations: make([]atomic.Int64, proxies), done: make(chan struct{})}
	c.full = 1<<len(expects) - 1
	if target >= 0 {
		c.remaining.Store(1)
	} else {
		c.remaining.Store(int64(proxies))
	}
	return c
}

func (c *change) concerns(proxy int) bool { return c.target < 0 || c.target == proxy }

// finish records the proxy's time once: from the change, or from from
// when that is later (a proxy that connected after the phase began counts
// from its own connection).
func (c *change) finish(proxy int, from, at time.Time) {
	if c.progress[proxy]&doneBit != 0 {
		return
	}
	if from.Before(c.start) {
		from = c.start
	}
	c.progress[proxy] |= doneBit
	c.durations[proxy].Store(max(int64(at.Sub(from)), 1))
	if c.remaining.Add(-1) == 0 {
		close(c.done)
	}
}

// times returns the proxies' times and how many proxies never got there.
func (c *change) times() (got []time.Duration, missed int) {
	for i := range c.durations {
		if !c.concerns(i) {
			continue
		}
		if d := c.durations[i].Load(); d > 0 {
			got = append(got, time.Duration(d))
		} else {
			missed++
		}
	}
	return got, missed
}

// tracker holds the changes proxies are checked against.
type tracker struct {
	active atomic.Pointer[[]*change]
	mu     sync.Mutex
	nextID int
}

func newTracker() *tracker {
	t := &tracker{}
	t.active.Store(&[]*change{})
	return t
}

// add makes a change active: proxies start looking for it. Call it before
// the change is written, so that no proxy can see the change first.
func (t *tracker) add(kind string, proxies, target int, expects []expectation, onComplete bool) *change {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextID++
	c := newChange(t.nextID, kind, proxies, target, expects)
	c.onComplete = onComplete
	next := append(append([]*change(nil), *t.active.Load()...), c)
	t.active.Store(&next)
	return c
}

// retire stops proxies looking for the changes.
func (t *tracker) retire(cs ...*change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	drop := map[*change]bool{}
	for _, c := range cs {
		drop[c] = true
	}
	var next []*change
	for _, c := range *t.active.Load() {
		if !drop[c] {
			next = append(next, c)
		}
	}
	t.active.Store(&next)
}

func (t *tracker) list() []*change { return *t.active.Load() }
