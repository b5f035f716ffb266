package file

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAnEmptyReadKeepsTheObjectsUntilTheFileIsWritten: a writer that
// truncates a file and then writes it (not atomically) is read in the
// middle; neither the empty file nor the part written so far deletes the
// objects of the file, and what the writer finishes is read.
func TestAnEmptyReadKeepsTheObjectsUntilTheFileIsWritten(t *testing.T) {
	tests := map[string]struct {
		empty func(t *testing.T, path string)
	}{
		"a file truncated to zero bytes": {empty: func(t *testing.T, path string) {
			t.Helper()
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
		"a file rewritten as blank lines and a comment": {empty: func(t *testing.T, path string) {
			t.Helper()
			writeFile(t, path, "\n  \n# services\n")
		}},
		"a file removed and created again empty at once, as some editors save": {empty: func(t *testing.T, path string) {
			t.Helper()
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, "")
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
			writeFile(t, a, service("reviews", 9080)+"---\n"+service("details", 9080))
			writeFile(t, b, service("ratings", 9080))
			// A debounce long enough that a removal and the creation
			// right after it are one read.
			h := start(t, dir, func(o *Options) { o.EmptyGrace, o.Debounce = time.Minute, 200*time.Millisecond })
			dels := h.recordDeletions()

			h.waitReload(t, func() { tc.empty(t, a) })
			if w := h.world(); port(w, "reviews") != 9080 || port(w, "details") != 9080 {
				t.Fatalf("the empty a.yaml deleted its objects: %v", w.Services())
			}
			if files := h.status(t)["files"].([]any); files[0].(map[string]any)["held"] != true {
				t.Errorf("a.yaml is not shown held: %v", files)
			}
			if got := h.gauge(t, "discovery_config_file_held"); got != 1 {
				t.Errorf("held gauge = %v, want 1", got)
			}

			// The writer goes on: a part that does not parse yet, then the rest.
			f, err := os.OpenFile(a, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			content := service("reviews", 1234) + "---\n" + service("details", 9080)
			h.waitReload(t, func() {
				if _, err := f.WriteString(content[:40]); err != nil {
					t.Fatal(err)
				}
			})
			if w := h.world(); port(w, "reviews") != 9080 || port(w, "details") != 9080 {
				t.Fatalf("the half-written a.yaml deleted objects: %v", w.Services())
			}
			if _, err := f.WriteString(content[40:]); err != nil {
				t.Fatal(err)
			}
			h.waitFor(t, "the written a.yaml", func() bool { return port(h.world(), "reviews") == 1234 })
			if got := dels.list(); len(got) != 0 {
				t.Errorf("deleted along the way: %v", got)
			}
			if got := h.gauge(t, "discovery_config_file_held"); got != 0 {
				t.Errorf("held gauge = %v, want 0", got)
			}
		})
	}
}

// TestWhatStaysEmptyLosesItsObjectsAfterTheGrace: the grace period
// delays a deletion, it does not cancel it.
func TestWhatStaysEmptyLosesItsObjectsAfterTheGrace(t *testing.T) {
	tests := map[string]struct {
		empty func(t *testing.T, dir string) // of a.yaml's objects
	}{
		"a file truncated": {empty: func(t *testing.T, dir string) {
			t.Helper()
			if err := os.Truncate(filepath.Join(dir, "a.yaml"), 0); err != nil {
				t.Fatal(err)
			}
		}},
		"a directory replaced by one without the file": {empty: func(t *testing.T, dir string) {
			t.Helper()
			writeFile(t, filepath.Join(dir+".new", "b.yaml"), service("ratings", 9080))
			rename(t, dir, dir+".old")
			rename(t, dir+".new", dir)
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "config")
			writeFile(t, filepath.Join(dir, "a.yaml"), service("reviews", 9080))
			writeFile(t, filepath.Join(dir, "b.yaml"), service("ratings", 9080))
			h := start(t, dir, func(o *Options) { o.EmptyGrace = 100 * time.Millisecond })

			tc.empty(t, dir)
			h.waitFor(t, "reviews deleted", func() bool { return h.world().Service("default", "reviews") == nil })
			if port(h.world(), "ratings") != 9080 {
				t.Errorf("ratings lost")
			}
			for _, f := range h.status(t)["files"].([]any) {
				if f.(map[string]any)["held"] != nil {
					t.Errorf("still shown held: %v", f)
				}
			}
			// Written again later, it is read as usual.
			writeFile(t, filepath.Join(dir, "a.yaml"), service("reviews", 1234))
			h.waitFor(t, "reviews back", func() bool { return port(h.world(), "reviews") == 1234 })
		})
	}
}

// TestRemovingAFileIsNotHeld: a removal is what the user meant, and is
// applied at once whatever the grace period.
func TestRemovingAFileIsNotHeld(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, service("reviews", 9080))
	writeFile(t, b, service("ratings", 9080))
	h := start(t, dir, func(o *Options) { o.EmptyGrace = time.Minute })

	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "reviews deleted", func() bool { return h.world().Service("default", "reviews") == nil })
	if port(h.world(), "ratings") != 9080 {
		t.Errorf("ratings lost")
	}
}
