package server

import (
	"context"
	"runtime"
	"sort"
	"time"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/push"
)

// pushItem is what one proxy is due: a full push, or new endpoints of some
// services. Items for one proxy merge while they wait.
type pushItem struct {
	full bool
	// keepOwn is set when no change behind the item can change the
	// proxy's own configuration (gen.Proxy: inbound clusters and
	// listener), which a full push then reuses instead of rebuilding it
	// for every proxy.
	keepOwn  bool
	eds      map[model.NamespacedName]bool
	world    *model.World
	first    time.Time // first change behind the item
	enqueued time.Time
	records  []*record
	class    string // the proxy's class in world (matters), for push waves
}

func mergeItems(a, b *pushItem) *pushItem {
	out := &pushItem{full: a.full || b.full, keepOwn: a.keepOwn && b.keepOwn, world: b.world, first: a.first, enqueued: a.enqueued, class: b.class}
	if b.first.Before(out.first) {
		out.first = b.first
	}
	if !out.full {
		out.eds = map[model.NamespacedName]bool{}
		for k := range a.eds {
			out.eds[k] = true
		}
		for k := range b.eds {
			out.eds[k] = true
		}
	}
	out.records = append(append(out.records, a.records...), b.records...)
	return out
}

// enqueueInitial queues the first, full push of a newly identified proxy.
func (s *Server) enqueueInitial(c *conn) {
	now := time.Now()
	s.queue.Push(c, &pushItem{full: true, world: s.world.World(), first: now, enqueued: now})
}

// onPush turns one debounced Request into queued items for the proxies the
// changes matter to.
func (s *Server) onPush(_ context.Context, req *push.Request) {
	now := time.Now()
	s.m.debounce.Observe(now.Sub(req.First).Seconds())
	s.m.services.Set(float64(req.World.ServiceCount()))
	reasons := req.Reasons()
	for kind, n := range reasons {
		s.m.triggers.WithLabelValues(kind).Add(float64(n))
	}
	changes := push.Split(req.Changes)
	rec := s.history.begin(req, reasons)
	live := map[string]bool{}
	var waved []classItem
	s.conns.Range(func(_, v any) bool {
		c := v.(*conn)
		item := s.matters(c, req.World, changes, live)
		if item == nil {
			return true
		}
		item.first, item.enqueued, item.records = req.First, now, []*record{rec}
		rec.enqueue(item.full)
		if !s.opts.PushWave.Off() {
			waved = append(waved, classItem{c: c, class: item.class, item: item})
			return true
		}
		s.queue.Push(c, item)
		return true
	})
	if waved != nil {
		s.waves.dispatch(waved, rec)
	}
	rec.enqueued()
	s.classes.Forget(live)
}

// matters plans what a change means for one proxy (push.Changes.For).
func (s *Server) matters(c *conn, w *model.World, changes push.Changes, live map[string]bool) *pushItem {
	c.mu.Lock()
	p, cfg := c.proxy, c.cfg
	c.mu.Unlock()
	if p == nil {
		return nil // not identified yet; its initial push reads the newest World
	}
	plan, class := changes.For(w, p, cfg)
	live[class] = true
	if plan == nil {
		return nil
	}
	return &pushItem{full: plan.Full, keepOwn: plan.KeepOwn, eds: plan.EDS, world: w, class: plan.Class}
}

// work prepares one proxy's push: its class's configuration (generated
// once per class and World), its own part, and the answer to its watches.
func (s *Server) work(_ context.Context, c *conn, item *pushItem) {
	start := time.Now()
	s.m.queueTime.Observe(start.Sub(item.enqueued).Seconds())
	c.mu.Lock()
	p, prev, closed := c.proxy, c.cfg, c.closed
	c.mu.Unlock()
	if closed || p == nil {
		return
	}
	kind := "full"
	var svcs []model.NamespacedName
	if !item.full && prev != nil {
		svcs = make([]model.NamespacedName, 0, len(item.eds))
		for nn := range item.eds {
			svcs = append(svcs, nn)
		}
		sort.Slice(svcs, func(i, j int) bool { return svcs[i].String() < svcs[j].String() })
	}
	// Clusters verify the service accounts of their endpoints (Envoy and
	// proxyless gRPC): an endpoint change that changes them needs the
	// clusters, not only the endpoints.
	if item.full || prev == nil || gen.IdentitiesChanged(prev.Class, item.world, svcs) {
		cls := s.classes.Full(s.gen, item.world, p)
		if cls == nil {
			return // logged by the generator; nothing good to send yet
		}
		var pc *gen.ProxyConfig
		if item.keepOwn && prev != nil {
			pc = prev.WithClass(cls)
		} else {
			pc = s.gen.Proxy(item.world, p, cls)
		}
		c.setConfig(pc, push.ChangedSince(prev, pc), item.first)
	} else {
		kind = "eds"
		cls := s.classes.Endpoints(s.gen, item.world, p, svcs)
		if cls == nil {
			return // logged by the generator; nothing good to send yet
		}
		pc := prev.WithClass(cls)
		dirty := push.ChangedSince(prev, pc)
		if cls == prev.Class {
			// Already sent this class (an earlier push took it further
			// than its own World): this item's names, which cost little
			// to compare again.
			var names []string
			for _, nn := range svcs {
				names = append(names, cls.EndpointsOf[nn]...)
			}
			dirty = map[string][]string{gen.EndpointType: names}
		}
		// Otherwise what the class changed since prev's, which is more
		// than this item's services when another proxy's push took the
		// class past this item's World (its endpoints of later changes
		// too), or everything when the class moved on by several steps:
		// a state-of-the-world stream would otherwise count the names
		// left out as compared, and never send them.
		c.setConfig(pc, dirty, item.first)
	}
	s.m.pushTime.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	for _, r := range item.records {
		r.done()
	}
	letWritersRun()
}

// letWritersRun lets the proxy's stream and its connection's writer run
// before the worker prepares the next proxy's push. gRPC's writer takes
// a pooled 16 KiB buffer for what it writes and, with under 1,000 bytes
// of it (most pushes after the first configuration), yields once holding
// it (loopyWriter.run), to the back of the global run queue. While the
// workers kept both cores busy preparing pushes, the writers of most of
// M1's 1,000 proxies waited there at once: the collections during the
// service changes found 3-12 MB of those buffers live, which the heap's
// goal doubled; 2.1-2.8 MB with the workers yielding (BENCHMARKS.md,
// "Write buffers held across a push; responses in flight 8 MiB").
func letWritersRun() { runtime.Gosched() }
