package file

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshplane/discovery/pkg/config"
	"github.com/meshplane/discovery/pkg/model"
)

var _ config.Source = (*Source)(nil)

// Source serves the objects of a config directory; see the package doc.
type Source struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	synced  atomic.Bool
	started atomic.Bool

	// Owned by the goroutine running Start.
	files    map[string]*fileState // by slash path relative to Dir
	served   map[model.Key]claim
	dirErrs  []*DocError     // of the last full read
	watching map[string]bool // directories watched at the last full read

	mu     sync.Mutex // guards status
	status Status
}

// New returns a Source for opts.Dir. Its metrics are registered on reg
// (nil: not registered).
func New(opts Options, log *slog.Logger, reg prometheus.Registerer) (*Source, error) {
	if !opts.Enabled() {
		return nil, errors.New("config directory source: no directory given")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("config directory source metrics: %w", err)
	}
	return &Source{
		opts:    opts,
		log:     log.With("source", "file", "dir", opts.Dir),
		metrics: m,
		files:   map[string]*fileState{},
		served:  map[model.Key]claim{},
	}, nil
}

// Name is "file:" and the directory.
func (s *Source) Name() string { return "file:" + s.opts.Dir }

// HasSynced reports whether the directory has been read once, even if some
// of its documents failed.
func (s *Source) HasSynced() bool { return s.synced.Load() }

// Errors returns the documents that are not loaded, ordered by file,
// document and item.
func (s *Source) Errors() []*DocError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*DocError(nil), s.status.Errors...)
}

// Status returns what the last read of the directory found.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Files = slices.Clone(st.Files)
	st.Errors = slices.Clone(st.Errors)
	return st
}

// Start reads the directory, hands its objects to sink, then watches it and
// hands over every change until ctx ends. It returns an error if the
// directory cannot be read or watched at the start; later failures are
// logged and the objects in force stay in force. A Source starts once.
func (s *Source) Start(ctx context.Context, sink config.Sink) error {
	if sink == nil {
		return errors.New("config directory source: no sink")
	}
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("config directory source: already started")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config directory %s: %w", s.opts.Dir, err)
	}
	defer func() {
		if err := w.Close(); err != nil {
			s.log.Warn("closing the directory watcher", "error", err)
		}
	}()
	if err := s.reload(ctx, sink, w); err != nil {
		return err
	}
	s.synced.Store(true)
	return s.watch(ctx, sink, w)
}

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

// reload reads the directory, works out what changed and applies it.
func (s *Source) reload(ctx context.Context, sink config.Sink, w *fsnotify.Watcher) error {
	found, dirErrs, err := s.walk(w)
	if err != nil {
		s.metrics.reloads.WithLabelValues("failed").Inc()
		return fmt.Errorf("read config directory %s: %w", s.opts.Dir, err)
	}
	s.readFiles(found, dirErrs)
	s.dirErrs = dirErrs
	s.watching = map[string]bool{}
	for _, d := range w.WatchList() {
		s.watching[filepath.Clean(d)] = true
	}
	return s.publish(ctx, sink, dirErrs)
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

// reloadFiles reads the files named again (a name that is gone is
// removed) and applies what changed.
func (s *Source) reloadFiles(ctx context.Context, sink config.Sink, rels map[string]bool) {
	if len(rels) == 0 {
		return // only ignored names changed
	}
	for rel := range rels {
		if st := s.readFile(rel); st != nil {
			s.files[rel] = st
		} else {
			delete(s.files, rel)
		}
	}
	if err := s.publish(ctx, sink, s.dirErrs); err != nil {
		s.log.Error("config directory not read; the objects in force stay in force", "error", err)
	}
}

// publish works out the objects in force from s.files, hands the changes
// to sink and updates the status and metrics.
func (s *Source) publish(ctx context.Context, sink config.Sink, dirErrs []*DocError) error {
	desired, dups := s.resolve()
	events := diff(s.served, desired)
	s.served = desired
	before := len(s.Errors())
	errs := s.publishStatus(dirErrs, dups)
	if len(events) > 0 {
		if _, err := sink.Apply(events...); err != nil {
			s.log.Error("applying config directory objects", "error", err)
		}
	}
	result := "ok"
	if len(errs) > 0 {
		result = "errors"
	}
	s.metrics.reloads.WithLabelValues(result).Inc()
	s.metrics.objects.Set(float64(len(desired)))
	s.metrics.errors.Set(float64(len(errs)))
	level := slog.LevelDebug // a reload that changed nothing, as after a chmod
	if len(events) > 0 || len(errs) != before {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "config directory read", "files", len(s.files),
		"objects", len(desired), "changes", len(events), "errors", len(errs))
	return nil
}

// publishStatus records the status for Errors and /debug, and logs the
// errors that are new since the last read.
func (s *Source) publishStatus(dirErrs, dups []*DocError) []*DocError {
	st := s.buildStatus(dirErrs, dups)
	s.mu.Lock()
	prev := s.status.Errors
	s.status = st
	s.mu.Unlock()

	seen := make(map[string]bool, len(prev))
	for _, e := range prev {
		seen[e.Error()] = true
	}
	for _, e := range st.Errors {
		if seen[e.Error()] {
			continue
		}
		fs := s.files[s.rel(e.File)]
		s.log.Error("config document not loaded",
			"file", e.File, "doc", e.Doc, "item", e.Item, "line", e.Line, "error", e.Err.Error(),
			"kept_previous", fs != nil && fs.stale)
	}
	return st.Errors
}
