package file

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshplane/discovery/pkg/model"
)

// fileState is what the Source knows of one file.
type fileState struct {
	sum    [sha256.Size]byte // of the content last read; zero when unreadable
	errs   []*DocError       // of the content last read
	good   []Object          // the objects in force for this file
	loaded bool              // some version of the file has been parsed
	stale  bool              // good comes from an earlier version
	// heldUntil is set while good comes from an earlier version because
	// the file read empty or is missing from a directory just replaced;
	// see grace.go.
	heldUntil time.Time
}

// claim is an object in force and the file it comes from (the slash path
// relative to Dir, a key of Source.files). obj points into that file's
// fileState.good, which is never written once made.
type claim struct {
	obj *Object
	rel string
}

// Status is what the last read of the directory found.
type Status struct {
	Dir string `json:"dir"`
	// Missing says the directory is gone (removed, renamed away, a
	// dangling symlink): the objects last read from it stay in force, and
	// Files and Errors are those of the last read.
	Missing      bool         `json:"missing,omitempty"`
	MissingSince time.Time    `json:"missing_since,omitzero"`
	Files        []FileStatus `json:"files"`
	Errors       []*DocError  `json:"errors"`
}

// FileStatus is one file of the directory.
type FileStatus struct {
	Path string `json:"path"`
	// Objects is the number of objects in force from the file (counting
	// those ignored as duplicates).
	Objects int `json:"objects"`
	// Stale says the objects in force come from an earlier version of the
	// file, because the current one has failing documents.
	Stale bool `json:"stale,omitempty"`
	// Held says the objects in force come from an earlier version of the
	// file, because it read empty or is missing from a directory that was
	// just replaced, which may be the middle of a rewrite. It is read
	// again at HeldUntil, and what it holds then is applied.
	Held      bool      `json:"held,omitempty"`
	HeldUntil time.Time `json:"held_until,omitzero"`
	Errors    int       `json:"errors,omitempty"`
}

func isConfigFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

func (s *Source) abs(rel string) string { return filepath.Join(s.opts.Dir, filepath.FromSlash(rel)) }

func (s *Source) rel(abs string) string {
	r, err := filepath.Rel(s.opts.Dir, abs)
	if err != nil {
		return abs
	}
	return filepath.ToSlash(r)
}

// walk lists the config files under Dir (sorted slash paths relative to
// it) and makes w watch every directory, each before it is listed so that
// nothing created meanwhile is missed, and no other but Dir's parent.
// Subdirectories that cannot be read are returned as errors; only an
// unreadable Dir fails the walk.
func (s *Source) walk(w *fsnotify.Watcher) ([]string, []*DocError, error) {
	root := s.opts.Dir
	if fi, err := os.Lstat(root); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		root += string(filepath.Separator) // walk where the symlink points
	}
	var files []string
	var dirErrs []*DocError
	dirs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			dirErrs = append(dirErrs, &DocError{File: path, Doc: -1, Item: -1, Err: err})
			return nil // WalkDir skips what it cannot read
		}
		if path != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			dirs[path] = true
			if err := w.Add(path); err != nil {
				dirErrs = append(dirErrs, &DocError{File: path, Doc: -1, Item: -1, Err: err})
			}
			return nil
		}
		if isConfigFile(d.Name()) && isRegular(path, d) {
			files = append(files, s.rel(path))
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range w.WatchList() {
		if !dirs[p] && p != s.parent {
			_ = w.Remove(p) // gone with its directory, most likely
		}
	}
	slices.Sort(files)
	return files, dirErrs, nil
}

// isRegular reports whether path is a regular file or a symlink to one:
// reading a FIFO would block, and symlinked directories are not followed.
func isRegular(path string, d fs.DirEntry) bool {
	if d.Type().IsRegular() {
		return true
	}
	if d.Type()&fs.ModeSymlink == 0 {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// readFiles brings s.files up to date with the files found. Files under a
// directory that could not be read are kept as they were; those missing
// from a directory just replaced are held (grace.go).
func (s *Source) readFiles(found []string, dirErrs []*DocError) {
	next := make(map[string]*fileState, len(found))
	for _, rel := range found {
		if st := s.readFile(rel); st != nil {
			next[rel] = st
		}
	}
	now, held := time.Now(), 0
	for rel, st := range s.files {
		if _, ok := next[rel]; ok {
			continue
		}
		if s.underFailedDir(rel, dirErrs) {
			next[rel] = st
		} else if h := s.holdAbsent(st, now); h != nil {
			next[rel], held = h, held+1
		}
	}
	if held > 0 {
		s.log.Info("config directory replaced; the objects of the files it lacks stay in force for the grace period",
			"files", held, "until", s.replacedUntil)
	}
	s.files = next
}

// underFailedDir reports whether the file rel is under one of the
// directories that could not be read.
func (s *Source) underFailedDir(rel string, dirErrs []*DocError) bool {
	for _, de := range dirErrs {
		if strings.HasPrefix(rel, s.rel(de.File)+"/") {
			return true
		}
	}
	return false
}

// readFile reads and parses one file, or returns its previous state if its
// content did not change. It returns nil if the file is gone.
func (s *Source) readFile(rel string) *fileState {
	prev := s.files[rel]
	data, err := os.ReadFile(s.abs(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since the walk (or a dangling symlink)
	}
	if err != nil {
		st := &fileState{errs: []*DocError{{File: s.abs(rel), Doc: -1, Item: -1, Err: err}}}
		if prev != nil {
			st.good, st.loaded, st.stale = prev.good, prev.loaded, prev.loaded
		}
		return st
	}
	sum, now := sha256.Sum256(data), time.Now()
	if prev != nil && prev.sum == sum && (prev.heldUntil.IsZero() || prev.held(now)) {
		return prev
	}
	objs, errs := Parse(s.abs(rel), data)
	for _, o := range objs {
		if len(o.Warnings) > 0 {
			// Istio accepts these with a warning (kubectl would show it):
			// said once per content of the file.
			s.log.Warn("config document loaded with warnings", "file", s.abs(rel), "doc", o.Doc, "item", o.Item,
				"line", o.Line, "key", o.Key.String(), "warnings", o.Warnings)
		}
	}
	st := &fileState{sum: sum, errs: errs, good: objs, loaded: true}
	switch {
	case len(objs) == 0 && len(errs) == 0:
		s.holdEmpty(rel, st, prev, now)
	case len(errs) > 0 && prev != nil && prev.loaded:
		st.good, st.stale = prev.good, true
	}
	return st
}

// resolve lists the objects in force, the first definition of each key
// winning, and reports the others as duplicates. It runs on every reload,
// also of one file among thousands: it allocates one map, sized once.
func (s *Source) resolve() (map[model.Key]claim, []*DocError) {
	n := 0
	for _, st := range s.files {
		n += len(st.good)
	}
	desired := make(map[model.Key]claim, n)
	var dups []*DocError
	for _, rel := range slices.Sorted(maps.Keys(s.files)) {
		good := s.files[rel].good
		for i := range good {
			o := &good[i]
			first, ok := desired[o.Key]
			if !ok {
				desired[o.Key] = claim{obj: o, rel: rel}
				continue
			}
			dups = append(dups, &DocError{File: s.abs(rel), Doc: o.Doc, Item: o.Item, Line: o.Line, Err: &DuplicateError{
				Key: o.Key, FirstFile: s.abs(first.rel), FirstLine: first.obj.Line, FirstDoc: first.obj.Doc,
			}})
		}
	}
	return desired, dups
}

// diff returns the events that turn served into desired: deletes, then
// upserts, each in kind, namespace, name order.
func diff(served, desired map[model.Key]claim) []model.Event {
	var dels, ups []model.Event
	for k := range served {
		if _, ok := desired[k]; !ok {
			dels = append(dels, model.Event{Op: model.OpDelete, Key: k})
		}
	}
	for k, c := range desired {
		if cur, ok := served[k]; !ok || cur.obj.Hash != c.obj.Hash {
			ups = append(ups, model.Event{Op: model.OpUpsert, Key: k, Object: c.obj.Object})
		}
	}
	slices.SortFunc(dels, compareEvents)
	slices.SortFunc(ups, compareEvents)
	return append(dels, ups...)
}

// kindOrder applies Namespaces and Nodes first and Pods before the EndpointSlices
// that point at them; the Store copes with any order, this one is just
// deterministic and natural.
var kindOrder = func() map[model.Kind]int {
	m := map[model.Kind]int{}
	for i, k := range append([]model.Kind{model.KindNamespace, model.KindNode, model.KindService, model.KindPod, model.KindEndpointSlice}, model.CRDKinds...) {
		m[k] = i
	}
	return m
}()

func compareEvents(a, b model.Event) int {
	if c := kindOrder[a.Key.Kind] - kindOrder[b.Key.Kind]; c != 0 {
		return c
	}
	if c := strings.Compare(a.Key.Namespace, b.Key.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Key.Name, b.Key.Name)
}

func (s *Source) buildStatus(dirErrs, dups []*DocError) Status {
	rels := slices.Sorted(maps.Keys(s.files))
	st := Status{
		Dir: s.opts.Dir, Missing: s.missing, MissingSince: s.missingSince,
		Files: make([]FileStatus, 0, len(rels)), Errors: append([]*DocError{}, dirErrs...),
	}
	perFile := map[string]int{} // by absolute path, for the files with errors
	for _, rel := range rels {
		for _, e := range s.files[rel].errs {
			st.Errors = append(st.Errors, e)
			perFile[e.File]++
		}
	}
	for _, d := range dups {
		perFile[d.File]++
	}
	st.Errors = append(st.Errors, dups...)
	slices.SortFunc(st.Errors, compareDocErrors)
	for _, rel := range rels {
		fs, path := s.files[rel], s.abs(rel)
		st.Files = append(st.Files, FileStatus{
			Path: path, Objects: len(fs.good), Stale: fs.stale, Errors: perFile[path],
			Held: !fs.heldUntil.IsZero(), HeldUntil: fs.heldUntil,
		})
	}
	return st
}
