package file

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/meshplane/discovery/pkg/model"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a log destination that tests read while the source writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the JSON log records with the given message.
func (b *syncBuffer) records(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(b.buf.Bytes(), []byte("\n")) {
		var r map[string]any
		if json.Unmarshal(line, &r) == nil && r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// harness runs a Source over a directory into a real Store.
type harness struct {
	dir   string
	src   *Source
	store *model.Store
	reg   *prometheus.Registry
	logs  *syncBuffer
}

// start runs a Source on dir until the test ends and waits for its first
// read. Each edit changes the options first.
func start(t *testing.T, dir string, edits ...func(*Options)) *harness {
	t.Helper()
	h := &harness{dir: dir, store: model.NewStore(model.StoreOptions{}), reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	opts := DefaultOptions()
	opts.Dir = dir
	opts.Debounce = 20 * time.Millisecond
	for _, edit := range edits {
		edit(&opts)
	}
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src, err := New(opts, log, h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx, h.store) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	h.waitFor(t, "the first read", src.HasSynced)
	return h
}

// waitFor polls cond until it holds, failing the test after 10 s.
func (h *harness) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; errors: %v", what, h.src.Errors())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reloads is how many times the directory was read.
func (h *harness) reloads() float64 {
	return testutil.ToFloat64(h.src.metrics.reloads.WithLabelValues("ok")) +
		testutil.ToFloat64(h.src.metrics.reloads.WithLabelValues("errors"))
}

// waitReload waits until the directory has been read after change ran.
func (h *harness) waitReload(t *testing.T, change func()) {
	t.Helper()
	before := h.reloads()
	change()
	h.waitFor(t, "a reload", func() bool { return h.reloads() > before })
}

func (h *harness) world() *model.World { return h.store.World() }

// gauge is the value of the gauge named name on the harness's registry, or
// -1 if there is none.
func (h *harness) gauge(t *testing.T, name string) float64 {
	t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// status is the Source's status as /debug/config_dirz shows it.
func (h *harness) status(t *testing.T) map[string]any {
	t.Helper()
	data, err := json.Marshal(h.src.Status())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// deletions records the keys the Store deletes from now on.
type deletions struct {
	mu   sync.Mutex
	keys []model.Key
}

func (h *harness) recordDeletions() *deletions {
	d := &deletions{}
	h.store.Subscribe(func(u *model.Update) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, c := range u.Changes {
			if c.Op == model.OpDelete {
				d.keys = append(d.keys, c.Key)
			}
		}
	})
	return d
}

func (d *deletions) list() []model.Key {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]model.Key(nil), d.keys...)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeByRename writes path the way many editors and tools do: a temporary
// file next to it, renamed over it.
func writeByRename(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
