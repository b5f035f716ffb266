package file

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// TestReadingOnlyTheChangedFilesMissesNothing: edits, creations and
// removals of single files are applied by reading those files again (not
// the directory); a directory named like a config file that is removed,
// and a new file in a new directory, still take the whole directory into
// account; a temporary hidden file written and renamed into place is no
// error.
func TestReadingOnlyTheChangedFilesMissesNothing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), service("reviews", 9080))
	writeFile(t, filepath.Join(dir, "odd.yaml/inner.yaml"), service("inner", 7000))
	h := start(t, dir)
	h.waitFor(t, "initial load", func() bool { return port(h.world(), "inner") == 7000 })

	writeFile(t, filepath.Join(dir, "b.yaml"), service("ratings", 9080))
	h.waitFor(t, "a new file", func() bool { return port(h.world(), "ratings") == 9080 })
	writeFile(t, filepath.Join(dir, "a.yaml"), service("reviews", 1234))
	h.waitFor(t, "an edit", func() bool { return port(h.world(), "reviews") == 1234 })
	writeByRename(t, filepath.Join(dir, "b.yaml"), service("ratings", 4321))
	h.waitFor(t, "a write by rename", func() bool { return port(h.world(), "ratings") == 4321 })
	// The hidden temporary file's events are ignored, not read as a
	// file named "" (the directory itself: "is a directory").
	if errs := h.src.Errors(); len(errs) != 0 {
		t.Errorf("errors after a write by rename: %v", errs)
	}
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "a removal", func() bool { return port(h.world(), "ratings") == 0 })

	if err := os.RemoveAll(filepath.Join(dir, "odd.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the files of a removed directory named like a file", func() bool { return port(h.world(), "inner") == 0 })
	writeFile(t, filepath.Join(dir, "new/c.yaml"), service("details", 9080))
	h.waitFor(t, "a file in a new directory", func() bool { return port(h.world(), "details") == 9080 })
	writeFile(t, filepath.Join(dir, "new/c.yaml"), service("details", 9090))
	h.waitFor(t, "an edit in the new directory", func() bool { return port(h.world(), "details") == 9090 })
	if port(h.world(), "reviews") != 1234 {
		t.Errorf("reviews lost along the way")
	}
}

// BenchmarkReloadOneEditedFile is BenchmarkReloadOneEdit when the watcher
// named the edited file: only it is read again.
func BenchmarkReloadOneEditedFile(b *testing.B) {
	src, w, dir := benchSource(b, 1000)
	store := model.NewStore(model.StoreOptions{})
	if err := src.reload(b.Context(), store, w); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	version := 1
	changed := map[string]bool{"svc-0500.yaml": true}
	for b.Loop() {
		version++
		if err := os.WriteFile(filepath.Join(dir, "svc-0500.yaml"), []byte(serviceFile(500, version)), 0o644); err != nil {
			b.Fatal(err)
		}
		before := store.World().Version
		src.reloadFiles(b.Context(), store, changed)
		if store.World().Version != before+1 {
			b.Fatal("edit not applied")
		}
	}
}
