package file

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

const missingGauge = "discovery_config_file_dir_missing"

// TestAMissingDirectoryKeepsItsObjectsAndSaysSo: while the directory is
// gone its objects stay in force; the log (once), a gauge and the status
// say so, and a copy renamed away is no longer the directory.
func TestAMissingDirectoryKeepsItsObjectsAndSaysSo(t *testing.T) {
	base := t.TempDir()
	dir, old := filepath.Join(base, "config"), filepath.Join(base, "config.old")
	writeFile(t, filepath.Join(dir, "a.yaml"), service("reviews", 9080))
	writeFile(t, filepath.Join(dir, "sub/b.yaml"), service("ratings", 9080))
	h := start(t, dir)
	dels := h.recordDeletions()

	if err := os.Rename(dir, old); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the directory reported missing", func() bool { return h.gauge(t, missingGauge) == 1 })
	if st := h.status(t); st["missing"] != true || st["missing_since"] == nil {
		t.Errorf("status = %v, want it missing", st)
	}
	if w := h.world(); port(w, "reviews") != 9080 || port(w, "ratings") != 9080 {
		t.Errorf("objects lost while the directory is gone: %v", w.Services())
	}
	// The copy renamed away is not watched any more: a change to it would
	// be seen before the file then put in the directory's place.
	writeFile(t, filepath.Join(old, "sub/b.yaml"), service("ratings", 7777))
	writeFile(t, dir, "not a directory")
	h.waitFor(t, "the file in the directory's place seen", func() bool { return len(h.changesSeen(dir)) > 0 })
	if got := h.changesSeen(filepath.Join(dir, "sub/b.yaml")); len(got) > 0 {
		t.Errorf("a change to the copy renamed away was seen: %v", got)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}

	writeFile(t, filepath.Join(base, "new/a.yaml"), service("reviews", 1234))
	writeFile(t, filepath.Join(base, "new/sub/b.yaml"), service("ratings", 9080))
	if err := os.Rename(filepath.Join(base, "new"), dir); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the directory back", func() bool {
		return port(h.world(), "reviews") == 1234 && h.gauge(t, missingGauge) == 0
	})
	if st := h.status(t); st["missing"] != nil || st["missing_since"] != nil {
		t.Errorf("status = %v, want it not missing", st)
	}
	if got := port(h.world(), "ratings"); got != 9080 {
		t.Errorf("ratings port %d: the copy renamed away was read", got)
	}
	if got := dels.list(); len(got) != 0 {
		t.Errorf("deleted along the way: %v", got)
	}
	gone, back := h.logs.records("config directory is gone"), h.logs.records("config directory is back")
	if len(gone) != 1 || gone[0]["level"] != "WARN" || len(back) != 1 || back[0]["level"] != "INFO" {
		t.Errorf("logged gone %v, back %v; want one WARN and one INFO", gone, back)
	}
	writeFile(t, filepath.Join(dir, "sub/b.yaml"), service("ratings", 4321))
	h.waitFor(t, "an edit in the new directory", func() bool { return port(h.world(), "ratings") == 4321 })
}

// changesSeen returns the watcher's events for path that the Source logged.
func (h *harness) changesSeen(path string) []map[string]any {
	var out []map[string]any
	for _, r := range h.logs.records("config directory changed") {
		if r["path"] == path {
			out = append(out, r)
		}
	}
	return out
}

// TestAReplacedDirectoryIsReadAndWatchedAgain: however the directory is
// replaced, its new content is read, nothing is deleted on the way, and
// the new directory is watched.
func TestAReplacedDirectoryIsReadAndWatchedAgain(t *testing.T) {
	tests := map[string]struct {
		symlink bool // the directory is base/config -> v1
		// replace replaces base/config by a directory that fill fills.
		replace func(t *testing.T, h *harness, base string, fill func(dir string))
	}{
		"removed, then made again": {replace: func(t *testing.T, h *harness, base string, fill func(string)) {
			t.Helper()
			removeAll(t, filepath.Join(base, "config"))
			h.waitFor(t, "missing", func() bool { return h.gauge(t, missingGauge) == 1 })
			fill(filepath.Join(base, "config"))
		}},
		"renamed away and another renamed in": {replace: func(t *testing.T, h *harness, base string, fill func(string)) {
			t.Helper()
			fill(filepath.Join(base, "new"))
			rename(t, filepath.Join(base, "config"), filepath.Join(base, "old"))
			rename(t, filepath.Join(base, "new"), filepath.Join(base, "config"))
		}},
		"made again empty, then filled": {replace: func(t *testing.T, h *harness, base string, fill func(string)) {
			t.Helper()
			dir := filepath.Join(base, "config")
			removeAll(t, dir)
			h.waitFor(t, "missing", func() bool { return h.gauge(t, missingGauge) == 1 })
			h.waitReload(t, func() {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			})
			if port(h.world(), "reviews") != 9080 || port(h.world(), "ratings") != 9080 {
				t.Fatalf("the empty new directory deleted objects: %v", h.world().Services())
			}
			fill(dir)
		}},
		"removed with the directory holding it, then both made again": {replace: func(t *testing.T, h *harness, base string, fill func(string)) {
			t.Helper()
			removeAll(t, base)
			h.waitFor(t, "missing", func() bool { return h.gauge(t, missingGauge) == 1 })
			fill(filepath.Join(base, "config")) // seen by looking again, not by an event
		}},
		"a symlink pointed elsewhere": {symlink: true, replace: func(t *testing.T, h *harness, base string, fill func(string)) {
			t.Helper()
			fill(filepath.Join(base, "v2"))
			symlink(t, "v2", filepath.Join(base, "config.tmp"))
			rename(t, filepath.Join(base, "config.tmp"), filepath.Join(base, "config"))
		}},
		"a symlink pointed elsewhere, the old target then removed": {symlink: true, replace: func(t *testing.T, h *harness, base string, fill func(string)) {
			t.Helper()
			fill(filepath.Join(base, "v2"))
			symlink(t, "v2", filepath.Join(base, "config.tmp"))
			rename(t, filepath.Join(base, "config.tmp"), filepath.Join(base, "config"))
			removeAll(t, filepath.Join(base, "v1"))
		}},
		"a symlink removed, then made again": {symlink: true, replace: func(t *testing.T, h *harness, base string, fill func(string)) {
			t.Helper()
			if err := os.Remove(filepath.Join(base, "config")); err != nil {
				t.Fatal(err)
			}
			h.waitFor(t, "missing", func() bool { return h.gauge(t, missingGauge) == 1 })
			fill(filepath.Join(base, "v2"))
			symlink(t, "v2", filepath.Join(base, "config"))
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "base")
			dir, content := filepath.Join(base, "config"), dir1(base, tc.symlink)
			writeFile(t, filepath.Join(content, "a.yaml"), service("reviews", 9080))
			writeFile(t, filepath.Join(content, "sub/b.yaml"), service("ratings", 9080))
			if tc.symlink {
				symlink(t, "v1", dir)
			}
			h := start(t, dir, func(o *Options) { o.EmptyGrace = time.Minute })
			dels := h.recordDeletions()

			tc.replace(t, h, base, func(d string) {
				writeFile(t, filepath.Join(d, "a.yaml"), service("reviews", 1234))
				writeFile(t, filepath.Join(d, "sub/b.yaml"), service("ratings", 9080))
			})
			h.waitFor(t, "the new directory read", func() bool {
				return port(h.world(), "reviews") == 1234 && h.gauge(t, missingGauge) == 0
			})
			if got := dels.list(); len(got) != 0 {
				t.Errorf("deleted along the way: %v", got)
			}
			writeFile(t, filepath.Join(dir, "sub/b.yaml"), service("ratings", 4321))
			h.waitFor(t, "an edit in the new directory", func() bool { return port(h.world(), "ratings") == 4321 })
		})
	}
}

// dir1 is where the first version of the directory is written.
func dir1(base string, symlink bool) string {
	if symlink {
		return filepath.Join(base, "v1")
	}
	return filepath.Join(base, "config")
}

func removeAll(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
