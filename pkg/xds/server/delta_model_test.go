package server

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// modelClient is a delta ADS client that keeps what it holds the way
// Envoy does: CDS as a wildcard, EDS subscribed to the EDS clusters it
// holds, every response applied (resources replaced, removed names
// dropped) and acknowledged.
type modelClient struct {
	c      *deltaClient
	mu     sync.Mutex
	held   map[string]map[string]string // type -> name -> version
	subEDS map[string]bool
	paused map[string]bool // EDS names the test unsubscribed
}

func newModelClient(t *testing.T, ts *testServer) *modelClient {
	t.Helper()
	m := &modelClient{
		c: newDeltaClient(t, ts), held: map[string]map[string]string{gen.ClusterType: {}, gen.EndpointType: {}},
		subEDS: map[string]bool{}, paused: map[string]bool{},
	}
	m.c.send(&discovery.DeltaDiscoveryRequest{Node: node(sidecarID, nil), TypeUrl: gen.ClusterType})
	m.c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: []string{}})
	go m.loop()
	return m
}

func (m *modelClient) loop() {
	for {
		var r *discovery.DeltaDiscoveryResponse
		select {
		case r = <-m.c.recv:
		case <-m.c.errc:
			return
		}
		m.mu.Lock()
		t := r.GetTypeUrl()
		for _, res := range r.GetResources() {
			m.held[t][res.GetName()] = res.GetVersion()
		}
		for _, n := range r.GetRemovedResources() {
			delete(m.held[t], n)
		}
		var sub, unsub []string
		if t == gen.ClusterType {
			sub, unsub = m.edsDiffLocked()
		}
		m.mu.Unlock()
		m.c.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: r.GetNonce()}) //nolint:errcheck // the stream's end shows in errc
		if len(sub)+len(unsub) > 0 {
			m.c.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}) //nolint:errcheck
		}
	}
}

// edsDiffLocked brings the EDS subscription in line with the clusters
// held (EDS clusters are the outbound ones), minus the paused names.
func (m *modelClient) edsDiffLocked() (sub, unsub []string) {
	want := map[string]bool{}
	for n := range m.held[gen.ClusterType] {
		if strings.HasPrefix(n, "outbound|") && !m.paused[n] {
			want[n] = true
		}
	}
	for n := range want {
		if !m.subEDS[n] {
			m.subEDS[n] = true
			sub = append(sub, n)
		}
	}
	for n := range m.subEDS {
		if !want[n] {
			delete(m.subEDS, n)
			delete(m.held[gen.EndpointType], n) // Envoy drops what it unsubscribes
			unsub = append(unsub, n)
		}
	}
	sort.Strings(sub)
	sort.Strings(unsub)
	return sub, unsub
}

// pause unsubscribes from the endpoints of name, or subscribes again.
func (m *modelClient) pause(name string, on bool) {
	m.mu.Lock()
	if on {
		m.paused[name] = true
	} else {
		delete(m.paused, name)
	}
	sub, unsub := m.edsDiffLocked()
	m.mu.Unlock()
	m.c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub})
}

// mismatch compares what the client holds with what a fresh generation
// from w gives; "" when they agree.
func (m *modelClient) mismatch(t *testing.T, w *model.World) string {
	t.Helper()
	p, err := model.ParseProxy(sidecarID, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := newGen(t)
	cls, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cls)
	m.mu.Lock()
	defer m.mu.Unlock()
	var diffs []string
	check := func(typ string, names []string) {
		want := map[string]string{}
		for _, n := range names {
			if r := pc.Get(typ, n); r != nil {
				want[n] = r.Hash
			}
		}
		for n, v := range want {
			if m.held[typ][n] != v {
				diffs = append(diffs, fmt.Sprintf("%s %s: holds %q, want %q", gen.ShortType(typ), n, m.held[typ][n], v))
			}
		}
		for n := range m.held[typ] {
			if _, ok := want[n]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s %s: held, want gone", gen.ShortType(typ), n))
			}
		}
	}
	check(gen.ClusterType, pc.Names(gen.ClusterType))
	var eds []string
	for n := range m.subEDS {
		eds = append(eds, n)
	}
	check(gen.EndpointType, eds)
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// TestDeltaStreamsConvergeUnderChurn drives a delta client through random
// changes (services added and removed, endpoints moved, EDS names
// unsubscribed and subscribed again) and requires after each that what it
// holds is exactly what generation from nothing gives: the stream's
// bookkeeping (a shared base plus its own overrides) loses nothing.
func TestDeltaStreamsConvergeUnderChurn(t *testing.T) {
	store := meshStore(t, 6)
	ts := startServer(t, store)
	m := newModelClient(t, ts)
	rng := rand.New(rand.NewSource(7))
	converge := func(step string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			d := m.mismatch(t, store.World())
			if d == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s the client never converged: %s", step, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	converge("connecting")
	extra := 0
	var live []int
	for i := 0; i < 60; i++ {
		var step string
		switch k := rng.Intn(5); {
		case k == 0:
			extra++
			live = append(live, extra)
			apply(t, store, worldtest.Service(fmt.Sprintf("ns-%d", extra%2), fmt.Sprintf("x-%d", extra), fmt.Sprintf("10.96.7.%d", extra)))
			step = "adding a service"
		case k == 1 && len(live) > 0:
			j := rng.Intn(len(live))
			n := live[j]
			live = append(live[:j], live[j+1:]...)
			apply(t, store, model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindService, Namespace: fmt.Sprintf("ns-%d", n%2), Name: fmt.Sprintf("x-%d", n)}})
			step = "removing a service"
		case k == 3:
			n := rng.Intn(6)
			name := fmt.Sprintf("outbound|80||svc-%d.ns-%d.svc.cluster.local", n, n%2)
			m.pause(name, rng.Intn(2) == 0)
			step = "changing the EDS subscription"
		default:
			n := rng.Intn(6)
			apply(t, store, worldtest.Slice(fmt.Sprintf("ns-%d", n%2), fmt.Sprintf("svc-%d", n), fmt.Sprintf("10.5.%d.%d", n, i+1)))
			step = "moving an endpoint"
		}
		converge(fmt.Sprintf("step %d (%s)", i, step))
	}
}
