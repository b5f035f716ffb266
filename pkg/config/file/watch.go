package file

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshplane/discovery/pkg/config"
)

// watch reloads the directory once it has been quiet for Debounce after a
// change, or at the latest ten Debounce periods after the first change.
func (s *Source) watch(ctx context.Context, sink config.Sink, w *fsnotify.Watcher) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var first time.Time // of the first change not yet read; zero when none
	// What changed since the last read: config files only (read those
	// again), or anything else (read the whole directory).
	changed, full := map[string]bool{}, false
	schedule := func() {
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		timer.Reset(debounceWait(first, now, s.opts.Debounce))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("config directory watcher closed")
			}
			s.log.Debug("config directory changed", "path", ev.Name, "op", ev.Op.String())
			if rel, ok := s.fileEvent(ev); ok {
				changed[rel] = true
			} else {
				full = true
			}
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("config directory watcher closed")
			}
			// An overflow loses events: read everything again.
			s.log.Warn("watching the config directory", "error", err)
			full = true
			schedule()
		case <-timer.C:
			first = time.Time{}
			if !full {
				s.reloadFiles(ctx, sink, changed)
				clear(changed)
				continue
			}
			full = false
			clear(changed)
			if err := s.reload(ctx, sink, w); err != nil {
				s.log.Error("config directory not read; the objects in force stay in force", "error", err)
			}
		}
	}
}

// debounceWait is how long to wait after a change at now, the first change
// not yet read having come at first: quiet for debounce, but no later than
// ten debounce periods after first.
func debounceWait(first, now time.Time, debounce time.Duration) time.Duration {
	return max(min(debounce, first.Add(10*debounce).Sub(now)), 0)
}

// fileEvent reports whether ev concerns one config file of a directory
// already watched, which reading that file again accounts for, and names
// it. Directories, symlinks, hidden names (ConfigMap's ..data swaps) and
// anything else need the whole directory read again.
func (s *Source) fileEvent(ev fsnotify.Event) (string, bool) {
	name := filepath.Base(ev.Name)
	if strings.HasPrefix(name, ".") {
		// A hidden file is not served; its rename into place arrives as
		// a Create of the visible name. A ..data swap is a directory.
		if fi, err := os.Lstat(ev.Name); (err == nil && !fi.Mode().IsRegular()) || strings.HasPrefix(name, "..") {
			return "", false
		}
		return "", true // ignored, like the walk ignores it
	}
	if !isConfigFile(name) || !s.watching[filepath.Clean(filepath.Dir(ev.Name))] {
		return "", false
	}
	rel := s.rel(ev.Name)
	fi, err := os.Lstat(ev.Name)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return "", false // a directory or symlink now
	case err != nil && s.files[rel] == nil:
		return "", false // gone, and not a file we read: maybe a directory
	}
	return rel, true
}
