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

var errWatcherClosed = errors.New("config directory watcher closed")

// changes is what changed since the last read.
type changes struct {
	first time.Time       // of the first change not yet read; zero when none
	files map[string]bool // config files to read again
	full  bool            // anything else: read the whole directory
}

// watch reads the directory once it has been quiet for Debounce after a
// change, or at the latest ten Debounce periods after the first change.
// Between changes it reads again what a read left pending: files held
// after an empty read, and a directory that is gone.
func (s *Source) watch(ctx context.Context, sink config.Sink, w *fsnotify.Watcher) error {
	debounce, recheck := stoppedTimer(), stoppedTimer()
	defer debounce.Stop()
	defer recheck.Stop()
	s.arm(recheck)
	pending := changes{files: map[string]bool{}}
	schedule := func() {
		now := time.Now()
		if pending.first.IsZero() {
			pending.first = now
		}
		debounce.Reset(debounceWait(pending.first, now, s.opts.Debounce))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errWatcherClosed
			}
			if s.besideDir(ev) {
				continue
			}
			s.log.Debug("config directory changed", "path", ev.Name, "op", ev.Op.String())
			if rel, ok := s.fileEvent(ev); ok {
				if rel != "" { // "": an ignored name
					pending.files[rel] = true
				}
			} else {
				pending.full = true
			}
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return errWatcherClosed
			}
			// An overflow loses events: read everything again.
			s.log.Warn("watching the config directory", "error", err)
			pending.full = true
			schedule()
		case <-debounce.C:
			s.readChanges(ctx, sink, w, &pending)
			s.arm(recheck)
		case <-recheck.C:
			s.recheck(ctx, sink, w)
			s.arm(recheck)
		}
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// arm sets t to fire when a read leaves something to read again, or stops
// it.
func (s *Source) arm(t *time.Timer) {
	at := s.nextRecheck()
	if at.IsZero() {
		t.Stop()
		return
	}
	t.Reset(max(time.Until(at), 0))
}

// debounceWait is how long to wait after a change at now, the first change
// not yet read having come at first: quiet for debounce, but no later than
// ten debounce periods after first.
func debounceWait(first, now time.Time, debounce time.Duration) time.Duration {
	return max(min(debounce, first.Add(10*debounce).Sub(now)), 0)
}

// readChanges reads what c names, the whole directory if it must, and
// empties c.
func (s *Source) readChanges(ctx context.Context, sink config.Sink, w *fsnotify.Watcher, c *changes) {
	full := c.full
	c.first, c.full = time.Time{}, false
	if full {
		clear(c.files)
		s.readDir(ctx, sink, w)
		return
	}
	s.reloadFiles(ctx, sink, c.files)
	clear(c.files)
}

// recheck looks for a missing directory again, or reads again the files
// whose grace period is over.
func (s *Source) recheck(ctx context.Context, sink config.Sink, w *fsnotify.Watcher) {
	if s.missing {
		s.readDir(ctx, sink, w)
		return
	}
	s.reloadFiles(ctx, sink, s.dueFiles(time.Now()))
}

// besideDir reports whether ev is about another entry of the directory
// that holds Dir, which is watched only for Dir itself.
func (s *Source) besideDir(ev fsnotify.Event) bool {
	return s.parent != "" && filepath.Dir(ev.Name) == s.parent && !s.isDir(ev.Name)
}

// isDir reports whether name is Dir, as the parent's watch or Dir's own
// names it.
func (s *Source) isDir(name string) bool {
	name = filepath.Clean(name)
	return name == s.self || name == filepath.Clean(s.opts.Dir)
}

// fileEvent reports whether ev concerns one config file of a directory
// already watched, which reading that file again accounts for, and names
// it ("" for a name that is ignored: nothing to read). Dir itself, directories, symlinks, hidden names (ConfigMap's ..data
// swaps) and anything else need the whole directory read again.
func (s *Source) fileEvent(ev fsnotify.Event) (string, bool) {
	if s.isDir(ev.Name) {
		return "", false // removed, renamed, made again or repointed
	}
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
