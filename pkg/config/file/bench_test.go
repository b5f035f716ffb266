package file

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fsnotify/fsnotify"

	"github.com/meshplane/discovery/pkg/model"
)

// serviceFile is one service's file: Service, EndpointSlice with ten
// endpoints, DestinationRule and VirtualService.
func serviceFile(i, version int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s---\n", service(fmt.Sprintf("svc-%d", i), 80))
	fmt.Fprintf(&b, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-%d-abc, labels: {kubernetes.io/service-name: svc-%[1]d}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
`, i)
	for e := range 10 {
		fmt.Fprintf(&b, "- {addresses: [127.0.%d.%d], conditions: {ready: true}}\n", i%250, e+1)
	}
	fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-%d}\n"+
		"spec: {host: svc-%[1]d, subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]}\n", i)
	fmt.Fprintf(&b, "---\n%s", virtualService(fmt.Sprintf("svc-%d", i), fmt.Sprintf("v%d", version)))
	return b.String()
}

func BenchmarkParse(b *testing.B) {
	data := []byte(serviceFile(1, 1))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, errs := Parse("f.yaml", data); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}

// benchSource makes a directory of n service files and a Source over it.
func benchSource(b *testing.B, n int) (*Source, *fsnotify.Watcher, string) {
	b.Helper()
	dir := b.TempDir()
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("svc-%04d.yaml", i)), []byte(serviceFile(i, 1)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	opts := DefaultOptions()
	opts.Dir = dir
	src, err := New(opts, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		b.Fatal(err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Close() })
	return src, w, dir
}

// BenchmarkInitialLoad reads a directory of 1,000 services (4,000 objects,
// 10,000 endpoints) into a Store.
func BenchmarkInitialLoad(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		src, w, _ := benchSource(b, 1000)
		store := model.NewStore(model.StoreOptions{})
		b.StartTimer()
		if err := src.reload(b.Context(), store, w); err != nil {
			b.Fatal(err)
		}
		if store.World().ServiceCount() != 1000 {
			b.Fatal("not loaded")
		}
	}
}

// BenchmarkReloadOneEdit is the reload after one file of 1,000 changed:
// every file is read and hashed again, one is parsed, one event applied.
func BenchmarkReloadOneEdit(b *testing.B) {
	src, w, dir := benchSource(b, 1000)
	store := model.NewStore(model.StoreOptions{})
	if err := src.reload(b.Context(), store, w); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	version := 1
	for b.Loop() {
		version++
		if err := os.WriteFile(filepath.Join(dir, "svc-0500.yaml"), []byte(serviceFile(500, version)), 0o644); err != nil {
			b.Fatal(err)
		}
		before := store.World().Version
		if err := src.reload(b.Context(), store, w); err != nil {
			b.Fatal(err)
		}
		if store.World().Version != before+1 {
			b.Fatal("edit not applied")
		}
	}
}
