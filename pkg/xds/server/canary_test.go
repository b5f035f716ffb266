package server

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// destinationRule caps shared's connections at max: the tests' proxies
// tell one configuration from another by that number.
func destinationRule(t *testing.T, max int) model.Event {
	t.Helper()
	evs, err := worldtest.Decode(fmt.Appendf(nil, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: shared, namespace: ns-a}
spec:
  host: shared.ns-a.svc.cluster.local
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: %d}}
`, max))
	if err != nil || len(evs) != 1 {
		t.Fatalf("decode: %v", err)
	}
	return evs[0]
}

// maxConnections is shared's cap in a CDS response (0 when unset).
func maxConnections(t *testing.T, r *discovery.DiscoveryResponse) int {
	t.Helper()
	return capOf(t, r.GetResources())
}

func deltaMaxConnections(t *testing.T, r *discovery.DeltaDiscoveryResponse) int {
	t.Helper()
	var as []*anypb.Any
	for _, res := range r.GetResources() {
		as = append(as, res.GetResource())
	}
	return capOf(t, as)
}

func capOf(t *testing.T, as []*anypb.Any) int {
	t.Helper()
	for _, a := range as {
		var cl clusterv3.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			t.Error(err)
			return 0
		}
		if cl.GetName() != "outbound|80||shared.ns-a.svc.cluster.local" {
			continue
		}
		for _, th := range cl.GetCircuitBreakers().GetThresholds() {
			if v := th.GetMaxConnections(); v != nil {
				return int(v.GetValue())
			}
		}
	}
	return 0
}

// scriptedProxy subscribes to every cluster and answers each response as
// answer says: ack (after a delay), nack, or not at all. It records the
// caps it was sent and when.
type scriptedProxy struct {
	id   string
	mu   sync.Mutex
	seen []seenCap
}

type seenCap struct {
	max int
	at  time.Time
}

type answer struct {
	delay time.Duration
	nack  bool
	never bool
}

func (p *scriptedProxy) caps() []seenCap {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenCap(nil), p.seen...)
}

func (p *scriptedProxy) saw(max int) (time.Time, bool) {
	for _, s := range p.caps() {
		if s.max == max {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// runScriptedDelta is runScripted on a delta stream.
func runScriptedDelta(t *testing.T, ts *testServer, id string, decide func(p *scriptedProxy, max int) answer) *scriptedProxy {
	t.Helper()
	p := &scriptedProxy{id: id}
	c, first := ackedDeltaCDS(t, ts, node(id, nil))
	p.seen = append(p.seen, seenCap{deltaMaxConnections(t, first), time.Now()})
	go func() {
		for {
			var r *discovery.DeltaDiscoveryResponse
			select {
			case r = <-c.recv:
			case <-c.errc:
				return
			}
			m := deltaMaxConnections(t, r)
			p.mu.Lock()
			p.seen = append(p.seen, seenCap{m, time.Now()})
			p.mu.Unlock()
			a := decide(p, m)
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce()}
			switch {
			case a.never:
				continue
			case a.nack:
				req.ErrorDetail = statusProto("cluster shared: max_connections 666 is refused here")
			default:
				time.Sleep(a.delay)
			}
			_ = c.stream.Send(req)
		}
	}()
	return p
}

func runScripted(t *testing.T, ts *testServer, id string, decide func(p *scriptedProxy, max int) answer) *scriptedProxy {
	t.Helper()
	p := &scriptedProxy{id: id}
	c := newSotwClient(t, dial(t, ts.addr), node(id, nil))
	c.send(gen.ClusterType, nil, "", "", "")
	first := c.next()
	c.ack(first, nil)
	p.seen = append(p.seen, seenCap{maxConnections(t, first), time.Now()})
	go func() {
		for {
			var r *discovery.DiscoveryResponse
			select {
			case r = <-c.recv:
			case <-c.errc:
				return
			}
			m := maxConnections(t, r)
			p.mu.Lock()
			p.seen = append(p.seen, seenCap{m, time.Now()})
			p.mu.Unlock()
			a := decide(p, m)
			switch {
			case a.never:
			case a.nack:
				_ = c.stream.Send(&discovery.DiscoveryRequest{
					TypeUrl: gen.ClusterType, VersionInfo: first.GetVersionInfo(),
					ResponseNonce: r.GetNonce(), ErrorDetail: statusProto("cluster shared: max_connections 666 is refused here"),
				})
			default:
				time.Sleep(a.delay)
				_ = c.stream.Send(&discovery.DiscoveryRequest{TypeUrl: gen.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
			}
		}
	}()
	return p
}

func waveServer(t *testing.T, wave PushWave, timeout time.Duration) (*model.Store, *testServer) {
	t.Helper()
	store := model.NewStore(model.StoreOptions{})
	apply(t, store, worldtest.Service("ns-a", "shared", "10.96.0.1"), worldtest.Slice("ns-a", "shared", "10.1.0.1"))
	ts := startServer(t, store, func(o *Options) { o.PushWave, o.PushWaveTimeout = wave, timeout })
	return store, ts
}

func proxyID(i int) string {
	return fmt.Sprintf("sidecar~10.9.0.%d~p%d.ns-a~ns-a.svc.cluster.local", i+1, i)
}

// A change the first proxy of a class rejects reaches none of the other
// nine; they keep their configuration, the wave is reported, and the next
// change (the fix) reaches all ten.
func TestPushWaveStopsOnNACK(t *testing.T) {
	t.Run("state of the world", func(t *testing.T) { testPushWaveStopsOnNACK(t, runScripted) })
	t.Run("delta", func(t *testing.T) { testPushWaveStopsOnNACK(t, runScriptedDelta) })
}

func testPushWaveStopsOnNACK(t *testing.T, run func(*testing.T, *testServer, string, func(*scriptedProxy, int) answer) *scriptedProxy) { //nolint:thelper // a whole test body shared by two tests: failures point at its lines
	store, ts := waveServer(t, PushWave{Count: 1}, time.Minute)
	var proxies []*scriptedProxy
	for i := range 10 {
		proxies = append(proxies, run(t, ts, proxyID(i), func(_ *scriptedProxy, max int) answer {
			return answer{nack: max == 666}
		}))
	}
	apply(t, store, destinationRule(t, 666))
	eventually(t, "the first wave to reject the change", func() bool {
		return ts.counter(t, "discovery_xds_push_waves_total", "outcome", "nacked") == 1
	})
	// The rest are held, not late: nothing reaches them however long we wait.
	time.Sleep(300 * time.Millisecond)
	gotBad := 0
	for _, p := range proxies {
		if _, ok := p.saw(666); ok {
			gotBad++
		}
	}
	if gotBad != 1 {
		t.Fatalf("%d proxies received the rejected configuration, want 1 (the first wave)", gotBad)
	}
	recs := ts.s.history.records()
	last := recs[len(recs)-1]
	last.mu.Lock()
	waves := append([]WaveReport(nil), last.Waves...)
	last.mu.Unlock()
	if len(waves) != 1 || waves[0].Outcome != "nacked" || waves[0].Held != 9 || waves[0].Reject == "" {
		t.Fatalf("push_status waves %+v, want one nacked wave holding 9", waves)
	}

	apply(t, store, destinationRule(t, 10))
	eventually(t, "every proxy to get the fixed configuration", func() bool {
		for _, p := range proxies {
			if _, ok := p.saw(10); !ok {
				return false
			}
		}
		return true
	})
	// Counted again after the fix: the held change was never delivered late.
	gotBad = 0
	for _, p := range proxies {
		if _, ok := p.saw(666); ok {
			gotBad++
		}
	}
	if gotBad != 1 {
		t.Fatalf("after the fix, %d proxies had received the rejected configuration, want 1", gotBad)
	}
	if n := ts.counter(t, "discovery_xds_push_waves_total", "outcome", "acked"); n != 1 {
		t.Fatalf("%v acked waves after the fix, want 1", n)
	}
}

// The rest of a class gets a change only after every proxy of the first
// wave acknowledged it.
func TestPushWaveWaitsForTheWavesACKs(t *testing.T) {
	store, ts := waveServer(t, PushWave{Count: 2}, time.Minute)
	var members atomic.Int32
	var lastACK atomic.Int64
	var proxies []*scriptedProxy
	for i := range 10 {
		proxies = append(proxies, runScripted(t, ts, proxyID(i), func(_ *scriptedProxy, max int) answer {
			if max == 20 && members.Add(1) <= 2 {
				// A wave member: it takes its time, then acknowledges.
				time.AfterFunc(250*time.Millisecond, func() {
					for {
						prev := lastACK.Load()
						now := time.Now().UnixNano()
						if prev >= now || lastACK.CompareAndSwap(prev, now) {
							return
						}
					}
				})
				return answer{delay: 250 * time.Millisecond}
			}
			return answer{}
		}))
	}
	apply(t, store, destinationRule(t, 20))
	eventually(t, "every proxy to get the change", func() bool {
		for _, p := range proxies {
			if _, ok := p.saw(20); !ok {
				return false
			}
		}
		return true
	})
	var arrivals []time.Time
	for _, p := range proxies {
		at, _ := p.saw(20)
		arrivals = append(arrivals, at)
	}
	first := arrivals[0]
	for _, a := range arrivals {
		if a.Before(first) {
			first = a
		}
	}
	// Two arrive at once (the wave); the eight others after the second ACK.
	early := 0
	for _, a := range arrivals {
		if a.Sub(first) < 200*time.Millisecond {
			early++
		}
	}
	if early != 2 {
		t.Fatalf("%d proxies got the change before the wave had acknowledged it, want the 2 of the wave", early)
	}
	if n := ts.counter(t, "discovery_xds_push_waves_total", "outcome", "acked"); n != 1 {
		t.Fatalf("%v acked waves, want 1", n)
	}
}

// A wave that never answers releases the rest after the timeout.
func TestPushWaveTimeoutReleasesTheRest(t *testing.T) {
	store, ts := waveServer(t, PushWave{Percent: 10}, 300*time.Millisecond)
	var proxies []*scriptedProxy
	for i := range 10 {
		proxies = append(proxies, runScripted(t, ts, proxyID(i), func(_ *scriptedProxy, max int) answer {
			return answer{never: max == 30}
		}))
	}
	apply(t, store, destinationRule(t, 30))
	eventually(t, "every proxy to get the change", func() bool {
		for _, p := range proxies {
			if _, ok := p.saw(30); !ok {
				return false
			}
		}
		return true
	})
	if n := ts.counter(t, "discovery_xds_push_waves_total", "outcome", "timeout"); n != 1 {
		t.Fatalf("%v timed-out waves, want 1", n)
	}
}

func TestPushWaveFlag(t *testing.T) {
	for in, want := range map[string]PushWave{"0": {}, "3": {Count: 3}, "5%": {Percent: 5}, "100%": {Percent: 100}} {
		var w PushWave
		if err := w.Set(in); err != nil || w != want {
			t.Errorf("%q: %+v, %v; want %+v", in, w, err, want)
		}
	}
	for _, in := range []string{"-1", "101%", "x", "5%%"} {
		var w PushWave
		if err := w.Set(in); err == nil {
			t.Errorf("%q accepted as %+v", in, w)
		}
	}
	if got := (PushWave{Percent: 5}).Size(1000); got != 50 {
		t.Errorf("5%% of 1000 is %d", got)
	}
	if got := (PushWave{Percent: 5}).Size(3); got != 1 {
		t.Errorf("5%% of 3 is %d, want at least 1", got)
	}
}
