package chaos

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// Scenario 6: a change that one class of proxies cannot take. One replica
// pushes in waves (--xds-push-wave 1). Every proxy of one namespace (one
// class among the scale's namespaces) rejects the route of one
// VirtualService edit that every proxy sees, as an Envoy of another
// version that cannot take it would. The edit must reach every proxy of
// the other classes; in the rejecting class only the first wave may
// receive it (one NACK), and the rest of that class must keep its last
// good configuration past the wave timeout, so they are held, not late.
// The next edit, which they accept, must reach every proxy.
func TestCanaryPushStopsOnNACK(t *testing.T) {
	const waveTimeout = 2 * time.Second
	c := newCluster(t, "CanaryPushStopsOnNACK", clusterOptions{
		replicas: 1,
		args:     []string{"--xds-push-wave", "1", "--xds-push-wave-timeout", waveTimeout.String()},
	})
	r := c.replicas[0]
	bad := fmt.Sprintf("ns-%d", c.sc.world.Namespaces-1)
	var edit *loadkit.Edit
	var class []int // the rejecting class's proxies
	f, took := c.connect(c.fleetOptions(c.sc.proxies), func(f *loadkit.Fleet) {
		var err error
		if edit, err = c.world.EditVirtualService(0, f.Names()); err != nil {
			t.Fatal(err)
		}
		for i := range f.Len() {
			if proxyNamespace(f.NodeID(i)) == bad {
				f.SetBehavior(i, loadkit.Behavior{Reject: loadkit.RejectRoute(edit.Route)})
				class = append(class, i)
			}
		}
	})
	if len(class) < 2 {
		t.Fatalf("%d proxies in %s: the scenario needs a class larger than its first wave", len(class), bad)
	}
	c.res.figure("initial connect: every proxy complete", took.Seconds(), "s", "")
	c.res.figure("classes (namespaces)", float64(c.sc.world.Namespaces), "", fmt.Sprintf("%s rejects the edit: %d proxies", bad, len(class)))
	quiesce(c.ctx, f)

	// The change every proxy sees and one class rejects.
	m := c.mark()
	ch := f.Track(edit.Kind, -1, edit.Expects, false)
	if err := edit.Write(); err != nil {
		t.Fatal(err)
	}
	others, ok := waitMissingOnly(c, ch, class)
	if !ok {
		t.Fatalf("the edit did not reach every proxy outside %s within %s; missing at %d proxies", bad, c.sc.timeout, len(ch.Missing()))
	}
	c.res.figure("the rejected edit at every proxy of the other classes", others.Seconds(), "s", "")
	time.Sleep(2 * waveTimeout) // past the wave timeout: the rest would be released by now if they were only late
	got := 0
	for _, i := range class {
		if f.NACKs(i) > 0 {
			got++
		}
	}
	c.res.figure("proxies of the rejecting class that received the edit", float64(got), "", fmt.Sprintf("of %d; first wave 1", len(class)))
	if got != 1 {
		t.Errorf("%d proxies of %s received (and rejected) the edit, want 1: the first wave only", got, bad)
	}
	if missing := ch.Missing(); len(missing) != len(class) {
		t.Errorf("%d proxies lack the edit %s after the wave timeout, want the %d of %s", len(missing), 2*waveTimeout, len(class), bad)
	}
	if w, err := nackedWave(r.ports.Monitor, bad); err != nil {
		t.Errorf("/debug/push_status: %v", err)
	} else {
		c.res.figure("held in the nacked wave (/debug/push_status)", float64(w.Held), "", fmt.Sprintf("class %s, members %d, rejected %q", w.Class, w.Members, w.Reject))
		if w.Held != len(class)-1 {
			t.Errorf("push_status: the nacked wave holds %d proxies, want %d", w.Held, len(class)-1)
		}
	}
	f.Retire(ch)

	// The next edit (which the class accepts) resumes the class.
	next, err := c.world.EditVirtualService(0, f.Names())
	if err != nil {
		t.Fatal(err)
	}
	times := c.apply(f, []*loadkit.Edit{next})
	p := loadkit.PercentilesOf(times)
	c.res.figure("the next edit at every proxy", p.P99, "ms p99", fmt.Sprintf("max %.0f ms", p.Max))
	c.res.RecoveryMs, c.res.RecoveryFrom = p.Max, "the next edit, the rejecting class included"
	c.cpuFigures("rejected edit and the next one", m)
	c.wantNACKs = 1
	c.verify()
	c.finishFigures()
}

// proxyNamespace is the namespace of a sidecar node ID
// (sidecar~IP~pod.ns~ns.svc.cluster.local).
func proxyNamespace(id string) string {
	parts := strings.Split(id, "~")
	if len(parts) < 4 {
		return ""
	}
	ns, _, _ := strings.Cut(parts[3], ".")
	return ns
}

// waitMissingOnly waits until the proxies still missing ch are exactly
// those in want (or fewer); it returns the time from ch's start.
func waitMissingOnly(c *cluster, ch *loadkit.Change, want []int) (time.Duration, bool) {
	allowed := map[int]bool{}
	for _, i := range want {
		allowed[i] = true
	}
	deadline := time.Now().Add(c.sc.timeout)
	for time.Now().Before(deadline) && c.ctx.Err() == nil {
		outside := 0
		for _, i := range ch.Missing() {
			if !allowed[i] {
				outside++
			}
		}
		if outside == 0 {
			return time.Since(ch.Start()), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(ch.Start()), false
}

// nackedWave finds, in /debug/push_status, the latest wave of a class of
// namespace ns (type/generator/namespace/version...) that ended nacked.
func nackedWave(monitor, ns string) (*waveReport, error) {
	res, err := loadkit.PlainHTTP.Get("http://" + monitor + "/debug/push_status")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var recs []struct {
		Waves []waveReport `json:"waves"`
	}
	if err := json.NewDecoder(res.Body).Decode(&recs); err != nil {
		return nil, err
	}
	for _, r := range recs { // newest first
		for _, w := range r.Waves {
			if w.Outcome == "nacked" && strings.Contains(w.Class, "/"+ns+"/") {
				return &w, nil
			}
		}
	}
	return nil, fmt.Errorf("no nacked wave of a class of %s", ns)
}

// waveReport is a wave as /debug/push_status shows it.
type waveReport struct {
	Class   string `json:"class"`
	Members int    `json:"members"`
	Held    int    `json:"held"`
	Outcome string `json:"outcome"`
	Reject  string `json:"rejected"`
}
