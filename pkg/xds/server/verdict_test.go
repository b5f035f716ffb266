package server

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	verdicts []Verdict
	accepts  atomic.Bool
}

func (r *recorder) Rejected(v Verdict) { r.add(v) }
func (r *recorder) Accepted(v Verdict) { r.add(v) }
func (r *recorder) WantsAccepts() bool { return r.accepts.Load() }

func (r *recorder) add(v Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.verdicts = append(r.verdicts, v)
}

func (r *recorder) all() []Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Verdict(nil), r.verdicts...)
}

func TestNackTracedToVirtualService(t *testing.T) {
	store := meshStore(t, 4)
	apply(t, store, vsEdit("ns-1", "svc-3", "1", 70))
	ts := startServer(t, store)
	rec := &recorder{}
	ts.s.SetObserver(rec)
	c := newSotwClient(t, dial(t, ts.addr), node(sidecarID, map[string]any{"ISTIO_VERSION": "1.32.0"}))
	route := gen.RouteName(model.Hostname("svc-3", "ns-1", "cluster.local"), 80)
	vsKey := model.Key{Kind: model.KindVirtualService, Namespace: "ns-1", Name: "svc-3"}

	c.send(gen.RouteType, []string{route}, "", "", "")
	r1 := c.next()
	if got := joined(names(t, r1)); got != route {
		t.Fatalf("RDS response carries %q, want %q", got, route)
	}
	c.send(gen.RouteType, []string{route}, "", r1.GetNonce(), "route rejected by test")
	eventually(t, "the NACK to reach the observer", func() bool { return len(rec.all()) == 1 })
	v := rec.all()[0]
	if !v.Rejected || v.ProxyID != sidecarID || v.Error != "route rejected by test" || v.TypeURL != gen.RouteType || v.Nonce != r1.GetNonce() {
		t.Fatalf("verdict %+v, want a rejection of %s by %s with the test's error", v, route, sidecarID)
	}
	src := v.Sources()
	if len(src) != 1 || src[0].Key != vsKey || src[0].ResourceVersion != "1" {
		t.Fatalf("sources of the rejected route: %+v, want only %s at resourceVersion 1", src, vsKey)
	}

	t.Run("ACKs reach the observer only while it wants them", func(t *testing.T) {
		apply(t, store, vsEdit("ns-1", "svc-3", "2", 60))
		r2 := c.next()
		c.ack(r2, []string{route})
		apply(t, store, vsEdit("ns-1", "svc-3", "3", 50))
		r3 := c.next()
		rec.accepts.Store(true)
		c.ack(r3, []string{route})
		eventually(t, "the ACK to reach the observer", func() bool { return len(rec.all()) == 2 })
		all := rec.all()
		v := all[1]
		if v.Rejected || v.Nonce != r3.GetNonce() {
			t.Fatalf("verdicts %+v: want the ACK of the third response (nonce %s) and not the second", all, r3.GetNonce())
		}
		if src := v.Sources(); len(src) != 1 || src[0].Key != vsKey || src[0].ResourceVersion != "3" {
			t.Fatalf("sources of the accepted route: %+v, want %s at resourceVersion 3", src, vsKey)
		}
	})
}
