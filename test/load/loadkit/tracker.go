package loadkit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kinds of change the tool times.
const (
	KindConnect       = "connect"
	KindEndpoint      = "endpoint"
	KindVirtualSvc    = "virtualservice"
	KindServiceAdd    = "service-add"
	KindServiceRemove = "service-remove"
	KindReconnect     = "reconnect"
)

// Names interns resource names: proxies keep uint32 ids, not strings,
// so 1,000 proxies holding 4,000 names each stay small.
type Names struct {
	mu   sync.RWMutex
	ids  map[string]uint32
	strs []string
}

func newNames() *Names { return &Names{ids: map[string]uint32{}, strs: []string{""}} }

// id returns the id of s, assigning one the first time.
func (n *Names) id(s string) uint32 {
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

// lookup returns the id of s without assigning one (0: never seen).
func (n *Names) lookup(s string) uint32 {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.ids[s]
}

// str returns the name of id.
func (n *Names) str(id uint32) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.strs[id]
}

// Expectation is one thing a proxy must have ACKed for a change to be
// done at that proxy: a resource (of a type, by name) that satisfies
// match, or the resource's removal.
type Expectation struct {
	typeURL string
	name    uint32
	removed bool
	// match checks the resource's digest; nil accepts any version.
	match func(*digest) bool
}

// Change is one change applied to the world (or a reconnect), with the
// proxies it must reach and the time each took.
type Change struct {
	id      int
	kind    string
	start   time.Time
	expects []Expectation
	// target is the one proxy a reconnect concerns; -1 means every proxy
	// (of mask, when it is set).
	target int
	mask   []bool
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

func newChange(id int, kind string, proxies, target int, mask []bool, expects []Expectation) *Change {
	c := &Change{
		id: id, kind: kind, start: time.Now(), expects: expects, target: target, mask: mask,
		progress: make([]uint64, proxies), durations: make([]atomic.Int64, proxies), done: make(chan struct{}),
	}
	c.full = 1<<len(expects) - 1
	n := 0
	for i := 0; i < proxies; i++ {
		if c.concerns(i) {
			n++
		}
	}
	c.remaining.Store(int64(n))
	if n == 0 {
		close(c.done)
	}
	return c
}

func (c *Change) concerns(proxy int) bool {
	if c.target >= 0 {
		return c.target == proxy
	}
	return c.mask == nil || c.mask[proxy]
}

// Kind is the kind of change (KindEndpoint, ...).
func (c *Change) Kind() string { return c.kind }

// Start is when the change was tracked (just before it was written).
func (c *Change) Start() time.Time { return c.start }

// Done is closed once the change reached every proxy it concerns.
func (c *Change) Done() <-chan struct{} { return c.done }

// finish records the proxy's time once: from the change, or from from
// when that is later (a proxy that connected after the phase began counts
// from its own connection).
func (c *Change) finish(proxy int, from, at time.Time) {
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

// Times returns the proxies' times and how many proxies never got there.
func (c *Change) Times() (got []time.Duration, missed int) {
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

// Missing lists the proxies the change has not reached yet.
func (c *Change) Missing() []int {
	var out []int
	for i := range c.durations {
		if c.concerns(i) && c.durations[i].Load() == 0 {
			out = append(out, i)
		}
	}
	return out
}

// tracker holds the changes proxies are checked against.
type tracker struct {
	active atomic.Pointer[[]*Change]
	mu     sync.Mutex
	nextID int
}

func newTracker() *tracker {
	t := &tracker{}
	t.active.Store(&[]*Change{})
	return t
}

// add makes a change active.
func (t *tracker) add(kind string, proxies, target int, mask []bool, expects []Expectation, onComplete bool) *Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextID++
	c := newChange(t.nextID, kind, proxies, target, mask, expects)
	c.onComplete = onComplete
	next := append(append([]*Change(nil), *t.active.Load()...), c)
	t.active.Store(&next)
	return c
}

// retire stops proxies looking for the changes.
func (t *tracker) retire(cs ...*Change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	drop := map[*Change]bool{}
	for _, c := range cs {
		drop[c] = true
	}
	var next []*Change
	for _, c := range *t.active.Load() {
		if !drop[c] {
			next = append(next, c)
		}
	}
	t.active.Store(&next)
}

func (t *tracker) list() []*Change { return *t.active.Load() }

// Explain says what proxy i lacks of the change: each expectation, met or
// not, and what the proxy holds of its resource.
func (f *Fleet) Explain(c *Change, i int) string {
	p := f.proxies[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "proxy %d, %s change %d (progress %b):", i, c.kind, c.id, c.progress[i]&^doneBit)
	for j, e := range c.expects {
		met := c.progress[i]&(1<<j) != 0
		fmt.Fprintf(&b, " [%s %s met=%v", shortType(e.typeURL), f.names.str(e.name), met)
		if s := p.sess; s != nil {
			switch e.typeURL {
			case typeEDS:
				fmt.Fprintf(&b, " held=%+v fp=%x", s.eds.m[e.name], s.fp[e.name])
			case typeRDS:
				fmt.Fprintf(&b, " held=%+v fp=%x", s.rds.m[e.name], s.fp[e.name])
			case typeCDS:
				_, ok := s.clusters[e.name]
				fmt.Fprintf(&b, " held=%v", ok)
			}
			if vs := s.vers[typeIndex[e.typeURL]]; vs != nil {
				fmt.Fprintf(&b, " version=%s", f.versions.str(vs[e.name]))
			}
		}
		b.WriteString("]")
	}
	return b.String()
}
