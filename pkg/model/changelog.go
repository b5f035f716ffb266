package model

import (
	"slices"
	"sync"
)

// changeLog remembers which keys each recent World changed, so that a
// reader holding something built from an older World can ask what
// changed since (World.ChangesSince) instead of comparing Worlds. Every
// World a Store publishes shares its Store's log. It holds the newest
// worlds' changes up to a bound: asked about older ones, it says it does
// not know.
type changeLog struct {
	mu sync.Mutex
	// first is the version of the World whose changes entries[0] holds;
	// entries[i] are the keys World first+i changed (since first+i-1).
	first   uint64
	entries [][]Key
	keys    int
}

// changeLogKeys bounds the keys the log holds: about 2 MB. At 20 changes
// a second that is over an hour; a class that has not been regenerated
// for longer is regenerated from scratch once.
const changeLogKeys = 1 << 16

// add records the keys World version changed. Versions arrive in order,
// one at a time (the Store's lock).
func (l *changeLog) add(version uint64, changes []Change) {
	keys := make([]Key, 0, len(changes))
	for _, c := range changes {
		// A status-only change alters nothing generation reads
		// (Change.StatusOnly).
		if !c.StatusOnly {
			keys = append(keys, c.Key)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) == 0 || l.first+uint64(len(l.entries)) != version {
		l.first, l.entries, l.keys = version, nil, 0
	}
	l.entries = append(l.entries, keys)
	l.keys += len(keys)
	drop := 0
	for l.keys > changeLogKeys && drop < len(l.entries)-1 {
		l.keys -= len(l.entries[drop])
		drop++
	}
	if drop > 0 {
		l.entries = append([][]Key(nil), l.entries[drop:]...)
		l.first += uint64(drop)
	}
}

// between returns the keys changed by the Worlds after from up to and
// including to, each once, and whether the log still holds them all.
func (l *changeLog) between(from, to uint64) ([]Key, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from+1 < l.first || to >= l.first+uint64(len(l.entries)) {
		return nil, false
	}
	span := l.entries[from+1-l.first : to+1-l.first]
	n := 0
	for _, keys := range span {
		n += len(keys)
	}
	out := make([]Key, 0, n)
	var seen map[Key]bool
	if n > 16 {
		seen = make(map[Key]bool, n)
	}
	for _, keys := range span {
		for _, k := range keys {
			switch {
			case seen != nil:
				if seen[k] {
					continue
				}
				seen[k] = true
			case slices.Contains(out, k):
				continue
			}
			out = append(out, k)
		}
	}
	return out, true
}

// ChangesSince returns the keys of the objects that differ between old
// and w (each once; status-only changes left out) and true, or false
// when that is not known: old and w come from different Stores, old is
// newer than w, or old is older than the log remembers. Changes is
// exact: a key it does not name holds the same object in both Worlds.
func (w *World) ChangesSince(old *World) ([]Key, bool) {
	switch {
	case old == nil || w.log == nil || old.log != w.log || old.Version > w.Version:
		return nil, false
	case old.Version == w.Version:
		return nil, old == w
	}
	return w.log.between(old.Version, w.Version)
}

// ChangedSince reports whether the object of k differs between w and the
// World of version v of w's Store, known by its version alone (a reader
// need not keep an older World, and the copies of the Store's maps it
// holds, only to ask this); known is false when w's log cannot tell: v
// is newer than w, or older than the log remembers.
func (w *World) ChangedSince(k Key, v uint64) (changed, known bool) {
	switch {
	case w.log == nil || v > w.Version:
		return false, false
	case v == w.Version:
		return false, true
	}
	return w.log.changed(k, v, w.Version)
}

// changed reports whether a World after from, up to and including to,
// changed k, and whether the log still holds them all.
func (l *changeLog) changed(k Key, from, to uint64) (changed, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from+1 < l.first || to >= l.first+uint64(len(l.entries)) {
		return false, false
	}
	for _, keys := range l.entries[from+1-l.first : to+1-l.first] {
		if slices.Contains(keys, k) {
			return true, true
		}
	}
	return false, true
}
