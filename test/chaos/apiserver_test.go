package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// Scenario 2: the API server goes away while the proxies stay connected;
// changes queue and are written the moment it returns; meanwhile etcd's
// history is compacted past everything the server's informers saw, so
// their watches expire (410 Gone) and they list again. Then etcd itself
// restarts, with changes queued again. Readiness must stay true all along
// (the last World is served), and the World must catch up with every
// change, including a deletion only a relist can see.
func TestAPIServerAndEtcdFaults(t *testing.T) {
	c := newCluster(t, "APIServerAndEtcdFaults", clusterOptions{replicas: 1})
	r := c.replicas[0]
	f, took := c.connect(c.fleetOptions(c.sc.proxies), nil)
	c.res.figure("initial connect: every proxy complete", took.Seconds(), "s", "")
	// A service to delete while the API server is away.
	added, err := c.world.AddService(0, f.Names())
	if err != nil {
		t.Fatal(err)
	}
	c.apply(f, []*loadkit.Edit{added})
	quiesce(c.ctx, f)
	seen := c.resourceVersion(t)

	// The API server away, changes queued, history compacted.
	before := f.Totals()
	m := c.mark()
	c.env.StopAPIServer(t)
	down := time.Now()
	removed, err := c.world.RemoveService(0, f.Names())
	if err != nil {
		t.Fatal(err)
	}
	addedAgain, err := c.world.AddService(1, f.Names())
	if err != nil {
		t.Fatal(err)
	}
	edits := append([]*loadkit.Edit{removed, addedAgain}, c.edits(f, 0, c.sc.changes)...)
	qs, written := c.queue(f, edits)
	time.Sleep(c.sc.outage / 2)
	rev := c.env.CompactEtcd(t)
	time.Sleep(time.Until(down.Add(c.sc.outage)))
	c.env.StartAPIServer(t)
	up := time.Now()
	c.res.figure("API server down", up.Sub(down).Seconds(), "s", fmt.Sprintf("%d changes queued; etcd compacted at revision %d", len(edits), rev))
	inWorld := c.waitRegistry(r, addedAgain.Host, removed.Host)
	recovered := c.waitQueued(t, f, qs, written, up)
	if at := <-inWorld; !at.IsZero() {
		c.res.figure("  API server back until the server's World has the service added and lacks the one removed (/debug/registryz)", at.Sub(up).Seconds(), "s", "")
	}
	c.res.RecoveryMs, c.res.RecoveryFrom = loadkit.Ms(recovered), "from the API server's return, every queued change at every proxy"
	c.res.figure("API server back until every change at every proxy", recovered.Seconds(), "s", "")
	c.expired(t, seen)
	quiesce(c.ctx, f)
	c.pushedFigures(f, before, len(edits), "after the API server outage")
	c.cpuFigures("API server outage and catch-up", m)
	if v := f.Verify(c.world); !v.OK() {
		t.Errorf("after the API server outage: %v", v)
	}

	// etcd restarted, changes queued.
	before = f.Totals()
	m = c.mark()
	c.env.StopEtcd(t)
	down = time.Now()
	edits = c.edits(f, c.sc.changes, c.sc.changes)
	qs, written = c.queue(f, edits)
	time.Sleep(c.sc.etcdOutage)
	c.env.StartEtcd(t)
	up = time.Now()
	c.res.figure("etcd down", up.Sub(down).Seconds(), "s", fmt.Sprintf("%d changes queued", len(edits)))
	recovered = c.waitQueued(t, f, qs, written, up)
	c.res.figure("etcd back until every change at every proxy", recovered.Seconds(), "s", "")
	quiesce(c.ctx, f)
	c.pushedFigures(f, before, len(edits), "after the etcd restart")
	c.cpuFigures("etcd restart and catch-up", m)

	c.res.figure("readiness polls that failed (every 100 ms, whole run)", float64(r.notReady.Load()), "", "")
	if n := r.notReady.Load(); n != 0 {
		t.Errorf("/ready failed %d times while the server served its last World (first at %v)", n, r.notReadyAt[0].Format(time.StampMilli))
	}
	c.verify()
	c.finishFigures()
}

// resourceVersion is the API server's current resourceVersion (of a
// list of Services).
func (c *cluster) resourceVersion(t *testing.T) string {
	t.Helper()
	l, err := c.env.Client.CoreV1().Services("ns-0").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.ResourceVersion
}

// expired checks that a watch resuming from rv, as the server's informers
// had to, is refused with 410 Gone: they could only catch up by listing.
func (c *cluster) expired(t *testing.T, rv string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	w, err := c.env.Client.CoreV1().Services("ns-0").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			c.res.note("a watch from resourceVersion %s (before the outage) is refused: %v", rv, err)
			return
		}
		t.Fatalf("watch from %s: %v", rv, err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if st, ok := ev.Object.(*metav1.Status); ok && ev.Type == watch.Error && st.Code == http.StatusGone {
			c.res.note("a watch from resourceVersion %s (before the outage) expires: %s; the server's informers had to list again", rv, st.Message)
			return
		}
		t.Errorf("a watch from %s after the compaction got %s %T, want 410 Gone: the scenario did not expire the informers' watches", rv, ev.Type, ev.Object)
	case <-ctx.Done():
		t.Errorf("a watch from %s after the compaction got nothing, want 410 Gone", rv)
	}
}

// waitQueued waits until the queued changes are written and reached every
// proxy; it returns the time from up until then.
func (c *cluster) waitQueued(t *testing.T, f *loadkit.Fleet, qs []*queued, written <-chan struct{}, up time.Time) time.Duration {
	t.Helper()
	select {
	case <-written:
	case <-time.After(c.sc.timeout):
		t.Fatalf("the queued changes were not all written within %s of the API server's return", c.sc.timeout)
	}
	var cs []*loadkit.Change
	var last time.Time
	for _, q := range qs {
		cs = append(cs, q.change)
		if q.written.After(last) {
			last = q.written
		}
	}
	c.res.figure("  the last queued change accepted by the API server", last.Sub(up).Seconds(), "s after its return", "")
	if err := loadkit.WaitChanges(c.ctx, c.sc.timeout, cs...); err != nil {
		for _, ch := range cs {
			if m := ch.Missing(); len(m) > 0 {
				t.Errorf("%s change: %d proxies never got it", ch.Kind(), len(m))
			}
		}
		t.Fatalf("the queued changes did not reach every proxy within %s", c.sc.timeout)
	}
	f.Retire(cs...)
	return time.Since(up)
}

// pushedFigures reports what the proxies received for n changes.
func (c *cluster) pushedFigures(f *loadkit.Fleet, before loadkit.Totals, n int, when string) {
	d := f.Totals().Minus(before)
	p := float64(f.Len())
	c.res.figure("resources pushed per proxy "+when, float64(d.ResourceCount())/p, "",
		fmt.Sprintf("for %d changes; cds %d, eds %d, lds %d, rds %d in all; %.0f bytes per proxy", n,
			d.Resources["cds"], d.Resources["eds"], d.Resources["lds"], d.Resources["rds"], float64(d.Bytes)/p))
}

// waitRegistry polls the replica's /debug/registryz until it lists
// present and not absent; the channel yields when (zero: never, within
// the scale's timeout).
func (c *cluster) waitRegistry(r *replica, present, absent string) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(c.sc.timeout)
		for time.Now().Before(deadline) && c.ctx.Err() == nil {
			res, err := loadkit.PlainHTTP.Get("http://" + r.ports.Monitor + "/debug/registryz")
			if err == nil {
				b, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if strings.Contains(string(b), `"`+present+`"`) && !strings.Contains(string(b), `"`+absent+`"`) {
					out <- time.Now()
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		out <- time.Time{}
	}()
	return out
}
