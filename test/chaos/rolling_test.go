package chaos

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// Scenario 3: three replicas on one API server, proxies spread over them
// by a short --max-stream-age, while endpoints and routes change and
// namespaces appear (each needs the leader to publish its root
// certificate ConfigMap). A rolling restart (SIGTERM, drain, new process)
// of all three, then kill -9 of the leader. Every proxy must end correct,
// with no NACK; the time each proxy spent without a complete
// configuration is reported; leadership (from every process's log and
// the Lease) must never be held twice at once, must move within the
// lease time when the leader dies, and the singleton job (root
// certificate publishing) must keep up.
func TestRollingRestartOfThreeReplicas(t *testing.T) {
	c := newCluster(t, "RollingRestartOfThreeReplicas", clusterOptions{replicas: 3, args: []string{"--max-stream-age", c0(t).streamAge.String()}})
	leases := c.watchLease()
	f, took := c.connect(c.fleetOptions(c.sc.proxies), nil)
	c.res.figure("initial connect: every proxy complete", took.Seconds(), "s", c.byRemote(f.Status()))
	f.ResetGaps()
	m := c.mark()
	ns := c.createNamespaces()
	changes := c.changeInBackground(f)

	for i, r := range c.replicas {
		start := time.Now()
		share := f.Status().ByRemote[r.ports.XDS]
		on := onReplica(f, r)
		if code := r.term(t, c.sc.drain+30*time.Second); code != 0 {
			t.Errorf("replica %s exited %d after SIGTERM, want 0", r.name, code)
		}
		drained := time.Since(start)
		r.start(c.ctx, t, c.bin, c.args)
		if !waitRedialed(c.ctx, f, on, start, c.sc.timeout) {
			t.Fatalf("after restarting %s: its %d proxies not all complete on a connection dialed since the SIGTERM, or another proxy still without a configuration it lost before, within %s: %+v", r.name, share, c.sc.timeout, f.Status())
		}
		c.res.figure(fmt.Sprintf("restart %d (%s, serving %d proxies): SIGTERM until exit", i+1, r.name, share), drained.Seconds(), "s", "")
		c.res.figure(fmt.Sprintf("restart %d: SIGTERM until every proxy it served is complete on a new connection", i+1), time.Since(start).Seconds(), "s", c.byRemote(f.Status()))
		if c.sc.shareWait > 0 {
			c.waitShare(f, r)
		}
	}

	// The leader dies.
	holder := leases.holder()
	var leader *replica
	for _, r := range c.replicas {
		if p := r.current(); p != nil && strings.HasSuffix(holder, "_"+strconv.Itoa(p.srv.PID)) {
			leader = r
		}
	}
	if leader == nil {
		t.Fatalf("the Lease names %q, no running replica", holder)
	}
	on := onReplica(f, leader)
	killed := time.Now()
	leader.kill()
	moved, ok := leases.waitHolderOtherThan(holder, 3*c.sc.lease+10*time.Second)
	if !ok {
		t.Errorf("leadership did not move within %s of killing the leader %s", 3*c.sc.lease+10*time.Second, leader.name)
	}
	c.res.figure("leader killed until another replica holds the Lease", moved.Sub(killed).Seconds(), "s", fmt.Sprintf("lease duration %s", c.sc.lease))
	// A standby sees the Lease expire a lease duration after the dead
	// leader's last renewal, and tries every retry period with client-go's
	// jitter (up to 2.2 periods apart); 2 s more for a loaded machine.
	if bound := c.sc.lease + 3*c.sc.retry + 2*time.Second; moved.Sub(killed) > bound {
		t.Errorf("leadership moved %s after the leader died; want within the lease duration %s and the retries (%s)", moved.Sub(killed), c.sc.lease, bound)
	}
	leader.start(c.ctx, t, c.bin, c.args)
	if !waitRedialed(c.ctx, f, on, killed, c.sc.timeout) {
		t.Fatalf("after the leader's death: the leader's proxies not all complete on a connection dialed since the kill, or another proxy still without a configuration it lost before, within %s: %+v", c.sc.timeout, f.Status())
	}

	c.cpuFigures("rolling restart and leader kill", m)
	cs := changes()
	if err := loadkit.WaitChanges(c.ctx, c.sc.timeout, cs...); err != nil {
		t.Errorf("changes made during the restarts did not reach every proxy: %v", err)
		for _, ch := range cs {
			if m := ch.Missing(); len(m) > 0 {
				t.Errorf("%d proxies lack it: %s", len(m), f.Explain(ch, m[0]))
			}
		}
	}
	var times []time.Duration
	for _, ch := range cs {
		got, _ := ch.Times()
		times = append(times, got...)
	}
	p := loadkit.PercentilesOf(times)
	c.res.figure("changes during the restarts", float64(len(cs)), "", fmt.Sprintf("p50 %.0f ms, p99 %.0f ms, max %.0f ms per (change, proxy)", p.P50, p.P99, p.Max))
	gaps := c.gapFigures(f, "time without a complete configuration, per proxy")
	c.res.RecoveryMs, c.res.RecoveryFrom = gaps.Max, "the longest a proxy was without a complete configuration"
	c.res.figure("streams lost (ended by drain, max stream age or kill)", float64(f.Totals().Drops), "", "")
	ns.check(t, c)
	c.checkLeadership(t, leases)
	c.verify()
	c.finishFigures()
}

// c0 is the scale, before the cluster exists.
func c0(t *testing.T) scale {
	t.Helper()
	return currentScale(t)
}

// waitShare waits until the restarted replica serves its share of the
// proxies again (a sixth, as --max-stream-age moves them), at most the
// scale's shareWait.
func (c *cluster) waitShare(f *loadkit.Fleet, r *replica) {
	deadline := time.Now().Add(c.sc.shareWait)
	for time.Now().Before(deadline) && c.ctx.Err() == nil {
		if f.Status().ByRemote[r.ports.XDS] >= f.Len()/(2*len(c.replicas)) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// changeInBackground writes endpoint changes and VirtualService edits at
// the scale's rate until the returned function is called, which returns
// them.
func (c *cluster) changeInBackground(f *loadkit.Fleet) func() []*loadkit.Change {
	ctx, stop := context.WithCancel(c.ctx)
	var mu sync.Mutex
	var cs []*loadkit.Change
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			var e *loadkit.Edit
			var err error
			if i%2 == 0 {
				e, err = c.world.ChurnEndpoint(i, f.Names())
			} else {
				e, err = c.world.EditVirtualService(i, f.Names())
			}
			if err != nil {
				c.res.note("change %d: %v", i, err)
				return
			}
			ch := f.Track(e.Kind, -1, e.Expects, false)
			if err := e.Write(); err != nil {
				c.res.note("write change %d: %v", i, err)
			}
			mu.Lock()
			cs = append(cs, ch)
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(float64(time.Second) / c.sc.rate)):
			}
		}
	}()
	return func() []*loadkit.Change {
		stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return cs
	}
}

// leaseWatch polls the leader Lease.
type leaseWatch struct {
	mu      sync.Mutex
	changes []leaseChange
}

type leaseChange struct {
	at     time.Time
	holder string
}

func (c *cluster) watchLease() *leaseWatch {
	w := &leaseWatch{}
	go func() {
		for c.ctx.Err() == nil {
			l, err := c.env.Client.CoordinationV1().Leases("istio-system").Get(c.ctx, "discovery-default", metav1.GetOptions{})
			holder := ""
			if err == nil && l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			if err == nil {
				w.mu.Lock()
				if n := len(w.changes); n == 0 || w.changes[n-1].holder != holder {
					w.changes = append(w.changes, leaseChange{time.Now(), holder})
				}
				w.mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return w
}

func (w *leaseWatch) holder() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.changes) == 0 {
		return ""
	}
	return w.changes[len(w.changes)-1].holder
}

// waitHolderOtherThan waits until the Lease names a holder other than
// old (and not empty); it returns when it first saw that.
func (w *leaseWatch) waitHolderOtherThan(old string, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		for _, ch := range w.changes {
			if ch.holder != old && ch.holder != "" && !ch.at.Before(deadline.Add(-timeout)) {
				w.mu.Unlock()
				return ch.at, true
			}
		}
		w.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now(), false
}

// interval is one process's leadership, from its log.
type interval struct {
	who        string
	start, end time.Time
	open       bool // no "stopped leading": it ended with the process
}

// checkLeadership reads every process's log: the intervals between
// "started leading" and "stopped leading" (or the process's end), during
// which its singleton jobs run, must not overlap.
func (c *cluster) checkLeadership(t *testing.T, leases *leaseWatch) {
	t.Helper()
	var ivs []interval
	for _, r := range c.replicas {
		r.mu.Lock()
		procs := append([]*process(nil), r.procs...)
		r.mu.Unlock()
		for k, p := range procs {
			entries, err := readLog(p.log)
			if err != nil {
				t.Error(err)
				continue
			}
			who := fmt.Sprintf("%s#%d", r.name, k+1)
			var cur *interval
			for _, e := range entries {
				switch e.Msg {
				case "started leading":
					cur = &interval{who: who, start: e.Time}
				case "stopped leading":
					if cur != nil {
						cur.end = e.Time
						ivs = append(ivs, *cur)
						cur = nil
					}
				}
			}
			if cur != nil {
				end := p.ended
				if end.IsZero() {
					end = time.Now()
				}
				cur.end, cur.open = end, true
				ivs = append(ivs, *cur)
			}
		}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
	var overlap, longestGap time.Duration
	var desc []string
	for i, iv := range ivs {
		desc = append(desc, fmt.Sprintf("%s %s-%s", iv.who, iv.start.Format("15:04:05.000"), iv.end.Format("15:04:05.000")))
		if i == 0 {
			continue
		}
		prev := ivs[i-1]
		if iv.start.Before(prev.end) {
			o := prev.end.Sub(iv.start)
			overlap += o
			t.Errorf("%s started leading %s before %s stopped: the singleton jobs ran twice at once", iv.who, o, prev.who)
		} else {
			longestGap = max(longestGap, iv.start.Sub(prev.end))
		}
	}
	c.res.figure("leadership intervals (from the logs)", float64(len(ivs)), "", strings.Join(desc, "; "))
	c.res.figure("leaders at once, overlap in all", overlap.Seconds(), "s", "")
	c.res.figure("longest time without a leader", longestGap.Seconds(), "s", "")
	leases.mu.Lock()
	c.res.figure("Lease holder changes seen (polled every 100 ms)", float64(len(leases.changes)-1), "", "")
	leases.mu.Unlock()
}

// namespaces creates a namespace every second (every one needs the
// leader's root certificate ConfigMap) until checked.
type namespaces struct {
	mu      sync.Mutex
	created map[string]time.Time
	stop    context.CancelFunc
	done    chan struct{}
}

func (c *cluster) createNamespaces() *namespaces {
	ctx, stop := context.WithCancel(c.ctx)
	n := &namespaces{created: map[string]time.Time{}, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("chaos-%d", i)
			_, err := c.env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err == nil {
				n.mu.Lock()
				n.created[name] = time.Now()
				n.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return n
}

// check stops creating namespaces and waits until each has the root
// certificate ConfigMap, reporting the longest wait.
func (n *namespaces) check(t *testing.T, c *cluster) {
	t.Helper()
	n.stop()
	<-n.done
	n.mu.Lock()
	defer n.mu.Unlock()
	var delays []time.Duration
	deadline := time.Now().Add(c.sc.timeout)
	for name, created := range n.created {
		for {
			cm, err := c.env.Client.CoreV1().ConfigMaps(name).Get(c.ctx, "istio-ca-root-cert", metav1.GetOptions{})
			if err == nil && strings.Contains(cm.Data["root-cert.pem"], "BEGIN CERTIFICATE") {
				delays = append(delays, cm.CreationTimestamp.Sub(created.Truncate(time.Second)))
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("namespace %s never got istio-ca-root-cert: %v", name, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	p := loadkit.PercentilesOf(delays)
	c.res.figure("namespaces created during the restarts, each given istio-ca-root-cert by the leader", float64(len(n.created)), "",
		fmt.Sprintf("creation until published: p50 %.0f ms, max %.0f ms (ConfigMap creationTimestamp, 1 s resolution)", p.P50, p.Max))
}
