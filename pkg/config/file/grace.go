package file

import (
	"time"
)

// A read of a file that finds no documents, where the file had objects,
// is more likely the middle of a rewrite (truncated, not written yet)
// than a file emptied on purpose; so is a directory just replaced that
// lacks some of the files the old one had (a copy under way). The objects
// stay in force ("held") for Options.EmptyGrace; the file is read again
// when it changes or when the grace period ends, and whatever is there
// then is applied. Removing a file is not held: that is what the user
// meant.

// held reports whether st's objects are held and the grace period is not
// over at now.
func (st *fileState) held(now time.Time) bool {
	return !st.heldUntil.IsZero() && now.Before(st.heldUntil)
}

// holdEmpty makes st, a read of rel with no documents, keep prev's
// objects until the grace period that the first such read started ends.
func (s *Source) holdEmpty(rel string, st, prev *fileState, now time.Time) {
	if prev == nil || len(prev.good) == 0 || s.opts.EmptyGrace <= 0 {
		return
	}
	until := prev.heldUntil
	if until.IsZero() {
		until = now.Add(s.opts.EmptyGrace)
		s.log.Info("config file read empty; its objects stay in force while it is being written",
			"file", s.abs(rel), "objects", len(prev.good), "grace", s.opts.EmptyGrace)
	}
	if !now.Before(until) {
		s.log.Info("config file still empty after the grace period; its objects are deleted",
			"file", s.abs(rel), "objects", len(prev.good))
		return
	}
	st.good, st.loaded, st.heldUntil = prev.good, prev.loaded, until
}

// holdAbsent returns a state that keeps the objects of st, a file that is
// no longer in the directory, if the directory was replaced less than the
// grace period ago; otherwise nil.
func (s *Source) holdAbsent(st *fileState, now time.Time) *fileState {
	if len(st.good) == 0 || !now.Before(s.replacedUntil) {
		return nil
	}
	return &fileState{good: st.good, loaded: st.loaded, heldUntil: s.replacedUntil}
}

// dueFiles names the held files whose grace period is over at now.
func (s *Source) dueFiles(now time.Time) map[string]bool {
	due := map[string]bool{}
	for rel, st := range s.files {
		if !st.heldUntil.IsZero() && !st.held(now) {
			due[rel] = true
		}
	}
	return due
}

// nextRecheck is when something must be read again without an event: a
// missing directory, or the first held file whose grace period ends. Zero
// when nothing is pending.
func (s *Source) nextRecheck() time.Time {
	if s.missing {
		return time.Now().Add(missingRecheck)
	}
	var next time.Time
	for _, st := range s.files {
		if !st.heldUntil.IsZero() && (next.IsZero() || st.heldUntil.Before(next)) {
			next = st.heldUntil
		}
	}
	return next
}

// heldFiles counts the files whose objects are held.
func (s *Source) heldFiles() int {
	n := 0
	for _, st := range s.files {
		if !st.heldUntil.IsZero() {
			n++
		}
	}
	return n
}
