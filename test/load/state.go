package main

import (
	"time"

	"google.golang.org/protobuf/proto"
)

// nameState is one subscribed EDS or RDS name: how many clusters or
// listeners refer to it, and whether the proxy holds it.
type nameState struct {
	refs int32
	got  bool
}

// subSet is what a proxy asks for of one type (EDS or RDS) and what it
// holds; missing counts names asked for and not held.
type subSet struct {
	m          map[uint32]nameState
	missing    int
	sub, unsub []uint32 // changes not yet announced to the server
}

func newSubSet() *subSet { return &subSet{m: map[uint32]nameState{}} }

func (s *subSet) ref(id uint32) {
	st := s.m[id]
	if st.refs == 0 {
		s.sub = append(s.sub, id)
		if !st.got {
			s.missing++
		}
	}
	st.refs++
	s.m[id] = st
}

func (s *subSet) unref(id uint32) {
	st, ok := s.m[id]
	if !ok || st.refs == 0 {
		return
	}
	st.refs--
	if st.refs > 0 {
		s.m[id] = st
		return
	}
	s.unsub = append(s.unsub, id)
	if !st.got {
		s.missing--
	}
	delete(s.m, id)
}

func (s *subSet) received(id uint32) {
	st, ok := s.m[id]
	if !ok || st.got {
		return
	}
	st.got = true
	s.missing--
	s.m[id] = st
}

func (s *subSet) removed(id uint32) {
	st, ok := s.m[id]
	if !ok || !st.got {
		return
	}
	st.got = false
	s.missing++
	s.m[id] = st
}

// pending returns the names to subscribe and unsubscribe since the last
// call, reconciled with the current set.
func (s *subSet) pending() (sub, unsub []uint32) {
	for _, id := range s.sub {
		if s.m[id].refs > 0 {
			sub = append(sub, id)
		}
	}
	for _, id := range s.unsub {
		if s.m[id].refs == 0 {
			unsub = append(unsub, id)
		}
	}
	s.sub, s.unsub = s.sub[:0], s.unsub[:0]
	return sub, unsub
}

// all lists every name asked for (state of the world requests).
func (s *subSet) all(n *names) []string {
	out := make([]string, 0, len(s.m))
	for id := range s.m {
		out = append(out, n.str(id))
	}
	return out
}

// session is a proxy's state on one stream: what it holds and asks for.
type session struct {
	start     time.Time
	clusters  map[uint32]uint32   // cluster -> its EDS name (0: not EDS)
	listeners map[uint32][]uint32 // listener -> the route names it uses
	eds, rds  *subSet
	gotCDS    bool
	gotLDS    bool
	complete  bool
	// State of the world: the last accepted version and nonce by type.
	version, nonce map[string]string
}

func newSession() *session {
	return &session{start: time.Now(), clusters: map[uint32]uint32{}, listeners: map[uint32][]uint32{},
		eds: newSubSet(), rds: newSubSet(), version: map[string]string{}, nonce: map[string]string{}}
}

func (s *session) isComplete() bool {
	return s.gotCDS && s.gotLDS && s.eds.missing == 0 && s.rds.missing == 0
}

// update is what one decoded resource changes in a session, applied only
// once the whole response is accepted.
type update struct {
	name uint32
	refs []uint32 // a cluster's EDS name, or a listener's route names
}

// hit is an expectation of a change met by a response.
type hit struct {
	c   *change
	bit uint64
}

// check finds the expectations of the active changes that one decoded
// resource meets.
func check(active []*change, proxy int, typeURL string, name uint32, m proto.Message, hits []hit) []hit {
	for _, c := range active {
		if !c.concerns(proxy) || c.progress[proxy]&doneBit != 0 {
			continue
		}
		for i, e := range c.expects {
			if e.removed || e.typeURL != typeURL || e.name != name {
				continue
			}
			if e.match == nil || e.match(m) {
				hits = append(hits, hit{c, 1 << i})
			}
		}
	}
	return hits
}

// checkRemovals finds the removal expectations a session now meets: the
// proxy holds a complete set of clusters or listeners without the name.
func (s *session) checkRemovals(active []*change, proxy int, typeURL string, hits []hit) []hit {
	for _, c := range active {
		if !c.concerns(proxy) || c.progress[proxy]&doneBit != 0 {
			continue
		}
		for i, e := range c.expects {
			if !e.removed || e.typeURL != typeURL {
				continue
			}
			var present bool
			switch typeURL {
			case typeCDS:
				_, present = s.clusters[e.name]
			case typeLDS:
				_, present = s.listeners[e.name]
			}
			if !present {
				hits = append(hits, hit{c, 1 << i})
			}
		}
	}
	return hits
}
