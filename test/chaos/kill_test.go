package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// Scenario 1: kill -9 of the only replica with every proxy connected,
// and a restart on the same address. Every proxy reconnects with Envoy's
// back-off, presenting the versions it holds (delta
// initial_resource_versions); nothing changed meanwhile, so whatever the
// server sends again is an unnecessary resend, and is reported.
func TestKillNineOfTheOnlyReplica(t *testing.T) {
	c := newCluster(t, "KillNineOfTheOnlyReplica", clusterOptions{replicas: 1})
	r := c.replicas[0]
	m := c.mark()
	f, took := c.connect(c.fleetOptions(c.sc.proxies), nil)
	c.res.figure("initial connect: every proxy complete", took.Seconds(), "s", "")
	c.cpuFigures("initial connect", m)
	quiesce(c.ctx, f)
	full := f.Totals()
	n := float64(f.Len())
	c.res.figure("full configuration per proxy", float64(full.Bytes)/n, "bytes", fmt.Sprintf("%.0f resources", float64(full.ResourceCount())/n))
	if v := f.Verify(c.world); !v.OK() {
		t.Fatalf("before the kill: %v", v)
	}
	f.ResetGaps()

	m = c.mark()
	killed := time.Now()
	r.kill()
	if !waitLost(f, 10*time.Second) {
		t.Errorf("not every proxy noticed the kill within 10 s: %+v", f.Status())
	}
	r.start(c.ctx, t, c.bin, c.args)
	ready := time.Since(killed)
	profiled := c.profile(r, "recovery-cpu", 30*time.Second)
	c.res.figure("kill until the new process is ready", ready.Seconds(), "s", "")
	after, ok := c.waitCorrect(f, c.sc.timeout)
	recovery := time.Since(killed)
	if !ok {
		t.Errorf("not every proxy was complete and correct within %s of the restart: %+v", c.sc.timeout, f.Status())
	}
	c.res.RecoveryMs, c.res.RecoveryFrom = loadkit.Ms(recovery), "from the kill"
	c.res.figure("ready until every proxy complete and correct", after.Seconds(), "s", "")
	c.cpuFigures("kill until every proxy complete and correct", m)
	profiled()

	quiesce(c.ctx, f)
	d := f.Totals().Minus(full)
	c.res.figure("resent after the restart, per proxy", float64(d.Bytes)/n, "bytes",
		fmt.Sprintf("%.1f%% of a full configuration", 100*float64(d.Bytes)/float64(max(1, full.Bytes))))
	c.res.figure("resources resent after the restart, per proxy", float64(d.ResourceCount())/n, "",
		fmt.Sprintf("cds %d, eds %d, lds %d, rds %d in all", d.Resources["cds"], d.Resources["eds"], d.Resources["lds"], d.Resources["rds"]))
	if d.ResourceCount() > 0 {
		c.res.note("with nothing changed, proxies presenting the versions they hold were sent %.0f%% of their resources again (%.1f%% of the bytes)",
			100*float64(d.ResourceCount())/float64(max(1, full.ResourceCount())), 100*float64(d.Bytes)/float64(max(1, full.Bytes)))
	} else {
		c.res.note("with nothing changed, proxies presenting the versions they hold were sent no resource again")
	}
	c.gapFigures(f, "time without a control plane, per proxy (stream lost until a new one complete)")
	c.verify()
	c.finishFigures()
}

// waitLost waits until every well-behaved proxy's stream has ended.
func waitLost(f *loadkit.Fleet, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if st := f.Status(); st.Complete == 0 {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
