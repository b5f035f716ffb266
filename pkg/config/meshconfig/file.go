package meshconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshplane/discovery/pkg/config"
)

// fileDebounce gathers the events of one write or rename.
const fileDebounce = 20 * time.Millisecond

// FileSource reads the --mesh-config file into its Watcher, and again
// whenever it changes. It watches the file's directory, so that a file
// replaced by a rename (editors, kubelet's ConfigMap volumes, which swap a
// symlink) is read again too.
type FileSource struct {
	w      *Watcher
	path   string
	synced atomic.Bool
	last   *string
}

var _ config.Source = (*FileSource)(nil)

// NewFileSource returns the source of w's --mesh-config file.
func NewFileSource(w *Watcher) (*FileSource, error) {
	if w.opts.File == "" {
		return nil, errors.New("mesh config file source: no --mesh-config")
	}
	return &FileSource{w: w, path: w.opts.File}, nil
}

// Name is "mesh-config:" and the file.
func (s *FileSource) Name() string { return "mesh-config:" + s.path }

// HasSynced reports whether the file has been read once (or found
// missing).
func (s *FileSource) HasSynced() bool { return s.synced.Load() }

// Start reads the file, then watches it until ctx ends. The MeshConfig goes
// to the Watcher, which hands it to the Sink it wraps; sink is not used.
func (s *FileSource) Start(ctx context.Context, _ config.Sink) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch --mesh-config: %w", err)
	}
	defer func() { _ = fw.Close() }()
	dir := filepath.Dir(s.path)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("watch --mesh-config directory %s: %w", dir, err)
	}
	s.read()
	s.synced.Store(true)
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// Any change in the directory may be the file's: a
			// ConfigMap volume swaps the ..data symlink.
			t.Reset(fileDebounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			s.w.log.Warn("watching --mesh-config", "error", err)
			t.Reset(fileDebounce)
		case <-t.C:
			s.read()
		}
	}
}

// read hands the file's content to the Watcher when it changed.
func (s *FileSource) read() {
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if s.last == nil && s.synced.Load() {
			return
		}
		s.w.log.Warn("--mesh-config file not found", "file", s.path)
		s.last = nil
		_ = s.w.SetFile("", false)
		return
	case err != nil:
		s.w.log.Error("reading --mesh-config; the MeshConfig in force stays", "file", s.path, "error", err)
		return
	}
	text := string(b)
	if s.last != nil && *s.last == text {
		return
	}
	s.last = &text
	if err := s.w.SetFile(text, true); err != nil {
		s.w.log.Error("applying the --mesh-config MeshConfig", "error", err)
	}
}
