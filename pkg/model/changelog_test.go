package model

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestChangesSinceNamesWhatDiffers(t *testing.T) {
	s := NewStore(StoreOptions{})
	w0 := s.World()
	mustApply(t, s, Event{Key: Key{Kind: KindService, Namespace: "ns", Name: "a"}, Op: OpUpsert, Object: svc("ns", "a", corev1.ServicePort{Name: "http", Port: 80})})
	w1 := s.World()
	mustApply(t, s, Event{Key: Key{Kind: KindService, Namespace: "ns", Name: "b"}, Op: OpUpsert, Object: svc("ns", "b", corev1.ServicePort{Name: "http", Port: 80})})
	mustApply(t, s, Event{Key: Key{Kind: KindService, Namespace: "ns", Name: "a"}, Op: OpUpsert, Object: svc("ns", "a", corev1.ServicePort{Name: "http", Port: 81})})
	w3 := s.World()
	a, b := Key{Kind: KindService, Namespace: "ns", Name: "a"}, Key{Kind: KindService, Namespace: "ns", Name: "b"}
	for name, tc := range map[string]struct {
		old, cur *World
		want     []Key
		known    bool
	}{
		"names each changed key once, in order": {w0, w3, []Key{a, b}, true},
		"names only the changes after old":      {w1, w3, []Key{b, a}, true},
		"nothing between a World and itself":    {w3, w3, nil, true},
		"does not answer backwards":             {w3, w1, nil, false},
		"does not answer for another Store":     {NewStore(StoreOptions{}).World(), w3, nil, false},
		"does not answer without an old World":  {nil, w3, nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			got, known := tc.cur.ChangesSince(tc.old)
			if known != tc.known || !slices.Equal(got, tc.want) {
				t.Errorf("ChangesSince = %v, %v; want %v, %v", got, known, tc.want, tc.known)
			}
		})
	}
}

func TestChangeLogForgetsTheOldestBeyondItsBound(t *testing.T) {
	var l changeLog
	one := []Change{{Key: Key{Kind: KindService, Namespace: "ns", Name: "a"}}}
	for v := uint64(1); v <= changeLogKeys+10; v++ {
		l.add(v, one)
	}
	if _, ok := l.between(0, changeLogKeys+10); ok {
		t.Error("the log answered for versions it dropped")
	}
	if got, ok := l.between(20, changeLogKeys+10); !ok || len(got) != 1 {
		t.Errorf("between(20, newest) = %v, %v; want the one key, true", got, ok)
	}
	if l.keys > changeLogKeys {
		t.Errorf("the log holds %d keys, over its bound %d", l.keys, changeLogKeys)
	}
	// A status-only change is not a change to generation.
	l.add(changeLogKeys+11, []Change{{Key: Key{Kind: KindVirtualService, Name: "x"}, StatusOnly: true}})
	if got, ok := l.between(changeLogKeys+10, changeLogKeys+11); !ok || len(got) != 0 {
		t.Errorf("a status-only change was logged: %v, %v", got, ok)
	}
}

// TestChangedSinceAsksByVersion: ChangedSince answers for one key what
// ChangesSince answers for all, from the older World's version alone.
func TestChangedSinceAsksByVersion(t *testing.T) {
	s := NewStore(StoreOptions{})
	a, b := Key{Kind: KindService, Namespace: "ns", Name: "a"}, Key{Kind: KindService, Namespace: "ns", Name: "b"}
	mustApply(t, s, Event{Key: a, Op: OpUpsert, Object: svc("ns", "a", corev1.ServicePort{Name: "http", Port: 80})})
	v1 := s.World().Version
	mustApply(t, s, Event{Key: b, Op: OpUpsert, Object: svc("ns", "b", corev1.ServicePort{Name: "http", Port: 80})})
	v2 := s.World().Version
	mustApply(t, s, Event{Key: b, Op: OpUpsert, Object: svc("ns", "b", corev1.ServicePort{Name: "http", Port: 81})})
	w3 := s.World()
	for name, tc := range map[string]struct {
		k              Key
		v              uint64
		changed, known bool
	}{
		"a key changed after v":          {b, v1, true, true},
		"a key changed again after v":    {b, v2, true, true},
		"a key changed only up to v":     {a, v1, false, true},
		"nothing since the World itself": {b, w3.Version, false, true},
		"not for a newer version":        {a, w3.Version + 1, false, false},
	} {
		t.Run(name, func(t *testing.T) {
			changed, known := w3.ChangedSince(tc.k, tc.v)
			if changed != tc.changed || known != tc.known {
				t.Errorf("ChangedSince(%v, %d) = %v, %v; want %v, %v", tc.k, tc.v, changed, known, tc.changed, tc.known)
			}
		})
	}
	var l changeLog
	one := []Change{{Key: a}}
	for v := uint64(1); v <= changeLogKeys+10; v++ {
		l.add(v, one)
	}
	if _, known := l.changed(a, 0, changeLogKeys+10); known {
		t.Error("the log answered for versions it dropped")
	}
}
