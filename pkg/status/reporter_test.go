package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type write struct {
	ref   gen.ConfigRef
	c     Condition
	event string
}

// fakeWriter records writes; fail makes the next write fail.
type fakeWriter struct {
	mu        sync.Mutex
	writes    []write
	fail      bool
	failEvent bool
}

func (f *fakeWriter) Write(_ context.Context, ref gen.ConfigRef, c Condition, event string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		f.fail = false
		return errors.New("injected")
	}
	f.writes = append(f.writes, write{ref, c, event})
	if f.failEvent {
		f.failEvent = false
		return fmt.Errorf("%w: injected", ErrEvent)
	}
	return nil
}

func (f *fakeWriter) all() []write {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]write(nil), f.writes...)
}

var vsKey = model.Key{Kind: model.KindVirtualService, Namespace: "ns", Name: "vs"}

func vsRef(generation int64) gen.ConfigRef {
	return gen.ConfigRef{Key: vsKey, Generation: generation, ResourceVersion: "rv" + strconv.FormatInt(generation, 10)}
}

func rep(rejected bool, proxy string, at time.Time, refs ...gen.ConfigRef) report {
	return report{
		proxyID: proxy, typeURL: gen.RouteType, err: "bad route", rejected: rejected, time: at,
		sources: func() []gen.ConfigRef { return refs },
	}
}

// run starts r and returns a function that stops it and waits.
func run(t *testing.T, r *Reporter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for !r.active.Load() {
		if time.Now().After(deadline) {
			t.Fatal("reporter did not start")
		}
		time.Sleep(time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func newReporter(t *testing.T, w Writer) (*Reporter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	r, err := New(opts, w, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	return r, reg
}

func TestReporter(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	cases := map[string]struct {
		reports   []report
		fail      bool
		failEvent bool
		want      []string // status/reason/generation/event? of each write
	}{
		"a NACK sets the condition True with an Event naming the proxy and the error": {
			reports: []report{rep(true, "p1", t0, vsRef(2))},
			want:    []string{"True ProxyNACK 2 event"},
		},
		"a second NACK of the same generation within the interval writes nothing": {
			reports: []report{rep(true, "p1", t0, vsRef(2)), rep(true, "p2", t0.Add(time.Second), vsRef(2))},
			want:    []string{"True ProxyNACK 2 event"},
		},
		"a NACK of the same generation after the interval reports again": {
			reports: []report{rep(true, "p1", t0, vsRef(2)), rep(true, "p2", t0.Add(2*time.Minute), vsRef(2))},
			want:    []string{"True ProxyNACK 2 event", "True ProxyNACK 2 event"},
		},
		"an ACK of a newer generation sets the condition False without an Event": {
			reports: []report{rep(true, "p1", t0, vsRef(2)), rep(false, "p1", t0.Add(time.Second), vsRef(3))},
			want:    []string{"True ProxyNACK 2 event", "False ProxyAccepted 3 -"},
		},
		"an ACK of the rejected generation (by another proxy) clears nothing": {
			reports: []report{rep(true, "p1", t0, vsRef(2)), rep(false, "p2", t0.Add(time.Second), vsRef(2))},
			want:    []string{"True ProxyNACK 2 event"},
		},
		"an ACK of a config never rejected writes nothing": {
			reports: []report{rep(false, "p1", t0, vsRef(3))},
		},
		"a failed write is retried by the next NACK": {
			reports: []report{rep(true, "p1", t0, vsRef(2)), rep(true, "p1", t0.Add(time.Second), vsRef(2))},
			fail:    true,
			want:    []string{"True ProxyNACK 2 event"},
		},
		"a failed Event still counts as reported (the condition is written)": {
			reports:   []report{rep(true, "p1", t0, vsRef(2)), rep(true, "p1", t0.Add(time.Second), vsRef(2))},
			failEvent: true,
			want:      []string{"True ProxyNACK 2 event"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fw := &fakeWriter{fail: tc.fail, failEvent: tc.failEvent}
			r, _ := newReporter(t, fw)
			for _, rp := range tc.reports {
				r.handle(context.Background(), rp)
			}
			var got []string
			for _, w := range fw.all() {
				ev := "-"
				if w.event != "" {
					ev = "event"
					if !strings.Contains(w.event, "proxy "+rpProxy(tc.reports, w)) || !strings.Contains(w.event, "bad route") {
						t.Errorf("event %q does not name the proxy and Envoy's error", w.event)
					}
				}
				if w.ref.Key != vsKey {
					t.Errorf("write on %s, want %s", w.ref.Key, vsKey)
				}
				got = append(got, strings.Join([]string{w.c.Status, w.c.Reason, strconv.FormatInt(w.c.ObservedGeneration, 10), ev}, " "))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("writes %q, want %q", got, tc.want)
			}
			if want := len(r.rejected) > 0; (r.outstanding.Load() > 0) != want {
				t.Errorf("outstanding = %d with %d rejected configs", r.outstanding.Load(), len(r.rejected))
			}
		})
	}
}

// rpProxy is the proxy of the report that produced w (the last rejection
// written at w's time).
func rpProxy(reports []report, w write) string {
	for _, rp := range reports {
		if rp.time.Equal(w.c.Time) {
			return rp.proxyID
		}
	}
	return "?"
}

func TestReporterQueue(t *testing.T) {
	t.Run("verdicts are not queued while the reporter does not run", func(t *testing.T) {
		fw := &fakeWriter{}
		r, reg := newReporter(t, fw)
		r.enqueue(rep(true, "p1", time.Now(), vsRef(1)))
		if n := testutil.CollectAndCount(reg, "discovery_status_verdicts_total"); n != 0 {
			t.Errorf("%d verdict series before Start, want none", n)
		}
		if r.WantsAccepts() {
			t.Error("WantsAccepts before Start")
		}
	})
	t.Run("a full queue drops and counts", func(t *testing.T) {
		fw := &fakeWriter{}
		reg := prometheus.NewRegistry()
		opts := DefaultOptions()
		opts.QueueSize = 1
		r, err := New(opts, fw, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
		if err != nil {
			t.Fatal(err)
		}
		r.active.Store(true) // accepting, but nobody reads the queue
		for i := 0; i < 3; i++ {
			r.enqueue(rep(true, "p1", time.Now(), vsRef(1)))
		}
		if got := testutil.ToFloat64(r.m.verdicts.WithLabelValues("dropped")); got != 2 {
			t.Errorf("dropped = %v, want 2", got)
		}
	})
	t.Run("a running reporter writes and then wants ACKs", func(t *testing.T) {
		fw := &fakeWriter{}
		r, _ := newReporter(t, fw)
		run(t, r)
		r.enqueue(rep(true, "p1", time.Now(), vsRef(1)))
		waitFor(t, "the write", func() bool { return len(fw.all()) == 1 })
		waitFor(t, "WantsAccepts", r.WantsAccepts)
	})
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", maxMessage)
	got := truncate(long)
	if len(got) > maxMessage || !strings.HasSuffix(got, "...") {
		t.Errorf("truncate: %d bytes, suffix %q", len(got), got[len(got)-3:])
	}
	if truncate("short") != "short" {
		t.Error("a short message changed")
	}
}
