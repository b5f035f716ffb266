package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// Scenario 5: slow and hostile clients. Nine tenths of the proxies behave;
// changes are applied and timed (the baseline). Then the last tenth
// connects: half never answer a response (no ACK), half read each
// response only after a delay, with gRPC's smallest flow-control windows
// so that the server's sends wait on them. The same number of changes is
// applied again: the well-behaved proxies must get every one, and the
// times and the server's memory are reported beside the baseline.
func TestSlowAndHostileClients(t *testing.T) {
	c := newCluster(t, "SlowAndHostileClients", clusterOptions{replicas: 1})
	r := c.replicas[0]
	bad := max(2, int(float64(c.sc.proxies)**hostileFlag))
	good, took := c.connect(c.fleetOptions(c.sc.proxies-bad), nil)
	c.res.figure("initial connect of the well-behaved proxies", took.Seconds(), "s", fmt.Sprintf("%d proxies", good.Len()))
	quiesce(c.ctx, good)
	p := r.current()

	s0 := p.sampler.Sample()
	m := c.mark()
	base := loadkit.PercentilesOf(c.apply(good, c.edits(good, 0, c.sc.changes)))
	quiesce(c.ctx, good)
	s1 := p.sampler.Sample()
	wb := p.sampler.Window(s0, s1)
	c.res.figure("baseline: changes at every well-behaved proxy", base.P99, "ms p99", fmt.Sprintf("%d changes, p50 %.0f ms, max %.0f ms", c.sc.changes, base.P50, base.Max))
	c.cpuFigures("baseline changes", m)
	c.res.figure("baseline: server RSS", wb.PeakRSSMiB, "MiB peak", fmt.Sprintf("%.0f MiB at the end", wb.EndRSSMiB))

	o := c.fleetOptions(bad)
	o.FirstIndex = c.sc.proxies - bad
	c.res.Proxies = c.sc.proxies
	o.Resume = false
	hostile, _ := c.connect(o, func(f *loadkit.Fleet) {
		for i := range f.Len() {
			if i%2 == 0 {
				f.SetBehavior(i, loadkit.Behavior{NoACK: true})
			} else {
				f.SetBehavior(i, loadkit.Behavior{ReadDelay: c.sc.slowRead})
			}
		}
	})
	// Let the hostile proxies take their first responses (the slow ones
	// one every slowRead).
	time.Sleep(4 * c.sc.slowRead)
	h0 := hostile.Totals()
	s2 := p.sampler.Sample()
	m = c.mark()
	with := loadkit.PercentilesOf(c.apply(good, c.edits(good, c.sc.changes, c.sc.changes)))
	quiesce(c.ctx, good)
	s3 := p.sampler.Sample()
	ww := p.sampler.Window(s2, s3)
	c.res.figure("with hostile proxies: changes at every well-behaved proxy", with.P99, "ms p99", fmt.Sprintf("%d changes, p50 %.0f ms, max %.0f ms", c.sc.changes, with.P50, with.Max))
	c.cpuFigures("changes with hostile proxies", m)
	c.res.figure("with hostile proxies: server RSS", ww.PeakRSSMiB, "MiB peak", fmt.Sprintf("%.0f MiB at the end", ww.EndRSSMiB))
	c.res.RecoveryMs, c.res.RecoveryFrom = with.Max, "the slowest change at a well-behaved proxy with the hostile ones connected"
	h := hostile.Totals()
	hd := h.Minus(h0)
	c.res.figure("hostile proxies", float64(bad), "", fmt.Sprintf("%d never ACK, %d read one response every %s", (bad+1)/2, bad/2, c.sc.slowRead))
	c.res.figure("responses the hostile proxies read during the changes", float64(hd.Pushes()), "", fmt.Sprintf("%d bytes; %d streams ended by the server over the run", hd.Bytes, h.Drops))
	if m, err := loadkit.ScrapeMetrics(r.ports.Monitor); err == nil {
		c.res.figure("streams the server closed (discovery_xds_streams_closed_total)", m["discovery_xds_streams_closed_total"], "", "")
	}
	if good.Totals().Drops != 0 {
		t.Errorf("%d streams of well-behaved proxies ended: %v", good.Totals().Drops, good.Notes())
	}
	c.verify()
	c.finishFigures()
}
