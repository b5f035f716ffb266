package server

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Pushes in waves (--xds-push-wave): a change that rebuilds a class's
// configuration goes first to a wave of that class's proxies; the rest
// get it only once every proxy of the wave has acknowledged it. If one of
// them rejects it (NACK), the rest keep their last good configuration,
// the wave is reported in /debug/push_status (and the rejection, as every
// NACK, on the config's status), and the next change to the World starts
// a new wave with everything held merged in. A wave that neither
// acknowledges nor rejects within --xds-push-wave-timeout releases the
// rest: a slow or disconnected proxy must not stall a class.
//
// Endpoint-only pushes are not held: they carry no new configuration
// shape, and holding them would leave traffic going to endpoints that are
// gone. Proxies of one class share one generated configuration, so one
// proxy's answer speaks for its class. istiod has no such gate; it is off
// by default because the rest of a class then waits one round trip longer.

// PushWave is the size of a first wave: Count proxies, or Percent of the
// class, at least one. The zero value is off.
type PushWave struct {
	Count   int
	Percent int
}

// Off reports whether waves are off.
func (w PushWave) Off() bool { return w.Count <= 0 && w.Percent <= 0 }

// Size is the wave for a class of n proxies.
func (w PushWave) Size(n int) int {
	k := w.Count
	if w.Percent > 0 {
		k = (n*w.Percent + 99) / 100
	}
	return max(k, 1)
}

func (w PushWave) String() string {
	switch {
	case w.Percent > 0:
		return strconv.Itoa(w.Percent) + "%"
	case w.Count > 0:
		return strconv.Itoa(w.Count)
	}
	return "0"
}

// Set parses "N" or "P%".
func (w *PushWave) Set(s string) error {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return fmt.Errorf("want a percentage from 0%% to 100%%, got %q", s)
		}
		*w = PushWave{Percent: n}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number of proxies (N) or a share of the class (P%%), got %q", s)
	}
	*w = PushWave{Count: n}
	return nil
}

// Type names the flag's type in help.
func (*PushWave) Type() string { return "N|P%" }

// wave is one class's first wave for one World version.
type wave struct {
	class   string
	world   uint64
	started time.Time
	members map[*conn]bool // true once answered with an ACK of everything
	waiting int
	held    map[*conn]*pushItem
	rec     *record
	timer   *time.Timer
	// outcome is "" while waiting, then acked, nacked, timeout or superseded.
	outcome string
	reject  string // the first NACK: proxy, type and Envoy's error
}

// WaveReport is a wave in /debug/push_status.
type WaveReport struct {
	Class   string `json:"class"`
	Members int    `json:"members"`
	Held    int    `json:"held"`
	Outcome string `json:"outcome"`
	Reject  string `json:"rejected,omitempty"`
}

type waves struct {
	s       *Server
	mu      sync.Mutex
	byClass map[string]*wave
}

func newWaves(s *Server) *waves { return &waves{s: s, byClass: map[string]*wave{}} }

// classItem is one proxy's full push, with its class, before the waves
// decide when it goes.
type classItem struct {
	c     *conn
	class string
	item  *pushItem
}

// dispatch queues this push's items: endpoint-only ones at once, full
// ones by class in waves. Items held by an older wave of a class are
// merged into the new push (the newest change supersedes the wave).
func (ws *waves) dispatch(items []classItem, rec *record) {
	byClass := map[string][]classItem{}
	var order []string
	for _, ci := range items {
		if !ci.item.full {
			ws.s.queue.Push(ci.c, ci.item)
			continue
		}
		if byClass[ci.class] == nil {
			order = append(order, ci.class)
		}
		byClass[ci.class] = append(byClass[ci.class], ci)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, class := range order {
		ws.start(class, byClass[class], rec)
	}
}

// start begins a class's wave. Called with ws.mu held.
func (ws *waves) start(class string, cis []classItem, rec *record) {
	var held map[*conn]*pushItem
	if old := ws.byClass[class]; old != nil {
		held = ws.end(old, "superseded", false)
	}
	for i := range cis {
		if h := held[cis[i].c]; h != nil {
			cis[i].item = mergeItems(h, cis[i].item)
			delete(held, cis[i].c)
		}
	}
	for c, h := range held {
		// Held for a change that this one does not touch: still due.
		cis = append(cis, classItem{c: c, class: class, item: h})
	}
	n := ws.s.opts.PushWave.Size(len(cis))
	if n >= len(cis) {
		for _, ci := range cis {
			ws.s.queue.Push(ci.c, ci.item)
		}
		return
	}
	w := &wave{
		class: class, world: cis[0].item.world.Version, started: time.Now(),
		members: map[*conn]bool{}, held: map[*conn]*pushItem{}, rec: rec,
	}
	for i, ci := range cis {
		if i < n {
			w.members[ci.c] = false
			w.waiting++
			ci.c.mu.Lock()
			ci.c.wave = w
			ci.c.mu.Unlock()
			ws.s.queue.Push(ci.c, ci.item)
			continue
		}
		w.held[ci.c] = ci.item
	}
	ws.byClass[class] = w
	ws.s.m.waves.WithLabelValues("started").Inc()
	timeout := ws.s.opts.PushWaveTimeout
	w.timer = time.AfterFunc(timeout, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if ws.byClass[class] == w && w.outcome == "" {
			ws.s.log.Warn("push wave: not every proxy of the first wave answered in time; the rest of the class gets the change",
				"class", class, "world", w.world, "timeout", timeout)
			ws.end(w, "timeout", true)
		}
	})
}

// end closes w with outcome; with release its held items are queued, else
// returned (to a newer wave). Called with ws.mu held.
func (ws *waves) end(w *wave, outcome string, release bool) map[*conn]*pushItem {
	if w.timer != nil {
		w.timer.Stop()
	}
	if ws.byClass[w.class] == w {
		delete(ws.byClass, w.class)
	}
	if w.outcome == "" || w.outcome == "nacked" {
		if w.outcome == "" {
			w.outcome = outcome
			ws.s.m.waves.WithLabelValues(outcome).Inc()
		}
		if w.rec != nil {
			w.rec.wave(WaveReport{Class: w.class, Members: len(w.members), Held: len(w.held), Outcome: w.outcome, Reject: w.reject})
		}
	}
	for c := range w.members {
		c.mu.Lock()
		if c.wave == w {
			c.wave = nil
		}
		c.mu.Unlock()
	}
	held := w.held
	w.held = nil
	if release {
		for c, item := range held {
			ws.s.queue.Push(c, item)
		}
		return nil
	}
	return held
}

// answered is called (not with c.mu held) when member c of w has
// acknowledged everything of w's World or newer.
func (ws *waves) answered(w *wave, c *conn) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byClass[w.class] != w || w.outcome != "" || w.members[c] {
		return
	}
	w.members[c] = true
	if w.waiting--; w.waiting == 0 {
		ws.end(w, "acked", true)
	}
}

// rejected is called (not with c.mu held) when member c of w rejected a
// response: the rest of the class keeps its configuration until the next
// change.
func (ws *waves) rejected(w *wave, c *conn, proxy, typeURL, msg string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byClass[w.class] != w || w.outcome != "" {
		return
	}
	w.outcome = "nacked"
	w.reject = fmt.Sprintf("%s rejected %s: %s", proxy, gen.ShortType(typeURL), clipText(msg, 256))
	if w.timer != nil {
		w.timer.Stop()
	}
	ws.s.m.waves.WithLabelValues("nacked").Inc()
	ws.s.log.Warn("push wave: a proxy of the first wave rejected the change; the rest of its class keeps its last good configuration until the next change",
		"class", w.class, "world", w.world, "proxy", proxy, "type", gen.ShortType(typeURL), "held", len(w.held))
	if w.rec != nil {
		w.rec.wave(WaveReport{Class: w.class, Members: len(w.members), Held: len(w.held), Outcome: w.outcome, Reject: w.reject})
	}
	// The wave stays in byClass, holding the rest, until a change
	// supersedes it.
}

// checkWave tells the waves when c, a member of a wave, has acknowledged
// everything of the wave's World: its configuration is of that World or
// newer, and every type it was sent is answered with an ACK of the last
// response. Called with c.mu held, after c's responses were handed over.
func (c *conn) checkWave() {
	w := c.wave
	if w == nil || c.cfg == nil || c.cfg.Class.WorldVersion < w.world {
		return
	}
	for _, st := range c.statuses() {
		if st.pending || st.AckedNonce != st.SentNonce {
			return
		}
	}
	c.wave = nil
	go c.s.waves.answered(w, c)
}

// waveRejected tells the waves that c, a member of a wave, rejected a
// response. Called with c.mu held.
func (c *conn) waveRejected(t, msg string) {
	w := c.wave
	if w == nil || c.proxy == nil {
		return
	}
	c.wave = nil
	proxy := c.proxy.ID
	go c.s.waves.rejected(w, c, proxy, t, msg)
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
