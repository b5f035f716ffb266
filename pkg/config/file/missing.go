package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshplane/discovery/pkg/config"
)

// missingRecheck is how often a missing directory is looked for again
// besides the events of its parent's watch, which cannot say it is back
// if the parent was replaced too.
const missingRecheck = time.Second

// errNotDir is Dir naming something that is not a directory.
var errNotDir = errors.New("not a directory")

// isMissing reports whether err says that Dir is not there: removed,
// renamed away, a dangling symlink, or something else in its place.
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDir) || errors.Is(err, syscall.ENOTDIR)
}

// dirPaths returns Dir as an absolute path and the directory that holds it
// ("" if Dir is the root).
func dirPaths(dir string) (self, parent string) {
	self, err := filepath.Abs(dir)
	if err != nil {
		self = filepath.Clean(dir)
	}
	if parent = filepath.Dir(self); parent == self {
		parent = ""
	}
	return self, parent
}

// statDir returns what Dir is now (following a symlink).
func (s *Source) statDir() (os.FileInfo, error) {
	fi, err := os.Stat(s.opts.Dir)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s: %w", s.opts.Dir, errNotDir)
	}
	return fi, err
}

// watchParent watches the directory that holds Dir, which sees Dir itself
// removed, renamed, made again or, a symlink, pointed elsewhere: Dir's own
// watch follows the directory it was set on, not the name.
func (s *Source) watchParent(w *fsnotify.Watcher) {
	if s.parent == "" {
		return
	}
	err := w.Add(s.parent)
	switch {
	case err == nil:
		s.parentWarned = false
	case !s.parentWarned:
		s.parentWarned = true
		s.log.Warn("cannot watch the directory that holds the config directory: a replaced directory is seen only when it changes, a missing one every second",
			"parent", s.parent, "error", err)
	}
}

// readDir reads the whole directory and applies it; a directory that is
// gone keeps its objects in force.
func (s *Source) readDir(ctx context.Context, sink config.Sink, w *fsnotify.Watcher) {
	err := s.reload(ctx, sink, w)
	switch {
	case err == nil:
	case isMissing(err):
		s.gone(w, err)
	default:
		s.log.Error("config directory not read; the objects in force stay in force", "error", err)
	}
}

// gone records that Dir is missing: the objects last read stay in force,
// and every watch but the parent's is dropped, since those left would
// follow the old directory wherever it was renamed to. It says so once.
func (s *Source) gone(w *fsnotify.Watcher, err error) {
	for _, p := range w.WatchList() {
		if p != s.parent {
			_ = w.Remove(p) // most are gone with their directories already
		}
	}
	clear(s.watching)
	if s.missing {
		return
	}
	s.missing, s.missingSince = true, time.Now()
	s.metrics.dirMissing.Set(1)
	s.mu.Lock()
	s.status.Missing, s.status.MissingSince = true, s.missingSince
	s.mu.Unlock()
	s.log.Warn("config directory is gone", "error", err,
		"kept", "the objects last read from it stay in force until it is back", "objects", len(s.served))
}

// found records Dir as a full read is about to read it. Back after it was
// missing, or another directory than the last read found, it was replaced:
// the files it lacks are held for the grace period (grace.go).
func (s *Source) found(root os.FileInfo) {
	if s.missing || (s.root != nil && !os.SameFile(s.root, root)) {
		s.replacedUntil = time.Now().Add(s.opts.EmptyGrace)
	}
	s.root = root
	if !s.missing {
		return
	}
	s.log.Info("config directory is back", "missing_for", time.Since(s.missingSince).Round(time.Millisecond))
	s.missing, s.missingSince = false, time.Time{}
	s.metrics.dirMissing.Set(0)
}
