package file

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	self     string          // Dir, absolute
	parent   string          // the directory holding Dir, watched for Dir itself; "" for /
	// root is Dir as the last full read found it: another directory there
	// since then means Dir was replaced.
	root          os.FileInfo
	replacedUntil time.Time // files a replaced Dir lacks are held until then
	missing       bool      // Dir is gone; see missing.go
	missingSince  time.Time
	parentWarned  bool

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
	s := &Source{
		opts:    opts,
		log:     log.With("source", "file", "dir", opts.Dir),
		metrics: m,
		files:   map[string]*fileState{},
		served:  map[model.Key]claim{},
	}
	s.self, s.parent = dirPaths(opts.Dir)
	return s, nil
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
// logged and the objects in force stay in force, also while the directory
// is gone (HasSynced stays true: the last objects read are served). A
// Source starts once.
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

// reload reads the directory, works out what changed and applies it. The
// error of a directory that is not there satisfies isMissing.
func (s *Source) reload(ctx context.Context, sink config.Sink, w *fsnotify.Watcher) error {
	s.watchParent(w)
	root, err := s.statDir()
	var found []string
	var dirErrs []*DocError
	if err == nil {
		found, dirErrs, err = s.walk(w)
	}
	if err != nil {
		if !s.missing || !isMissing(err) { // not every look while it is gone
			s.metrics.reloads.WithLabelValues("failed").Inc()
		}
		return fmt.Errorf("read config directory %s: %w", s.opts.Dir, err)
	}
	s.found(root)
	s.readFiles(found, dirErrs)
	s.dirErrs = dirErrs
	s.watching = map[string]bool{}
	for _, d := range w.WatchList() {
		if d != s.parent {
			s.watching[filepath.Clean(d)] = true
		}
	}
	return s.publish(ctx, sink, dirErrs)
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
	s.metrics.held.Set(float64(s.heldFiles()))
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
