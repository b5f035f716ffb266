package loadkit

import (
	"time"
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
func (s *subSet) all(n *Names) []string {
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
	// edsAnswered and rdsAnswered: this stream got a response of the type.
	edsAnswered, rdsAnswered bool
	complete                 bool
	answered                 bool // this stream got a response
	// State of the world: the last accepted version and nonce by type.
	version, nonce map[string]string

	// resumed: the session began with what the previous stream held; its
	// first request of each type presents it (edsAsked, rdsAsked: sent).
	resumed            bool
	edsAsked, rdsAsked bool
	// vers holds, per type, each held resource's version (interned), to
	// present on the next stream; nil unless the fleet resumes.
	vers [4]map[uint32]uint32
	// fp holds what Verify checks of each endpoint and route resource
	// held (fingerprint); nil unless the fleet verifies.
	fp map[uint32]uint64
}

func newSession(resume, verify bool) *session {
	s := &session{
		start: time.Now(), clusters: map[uint32]uint32{}, listeners: map[uint32][]uint32{},
		eds: newSubSet(), rds: newSubSet(), version: map[string]string{}, nonce: map[string]string{},
	}
	if resume {
		for i := range s.vers {
			s.vers[i] = map[uint32]uint32{}
		}
	}
	if verify {
		s.fp = map[uint32]uint64{}
	}
	return s
}

// resume is the session of a new stream that starts with what s holds.
// s is not used again, so its maps move to the new session.
func (s *session) resume() *session {
	n := &session{
		start: time.Now(), clusters: s.clusters, listeners: s.listeners, eds: s.eds, rds: s.rds,
		version: map[string]string{}, nonce: map[string]string{}, resumed: true, vers: s.vers, fp: s.fp,
	}
	n.eds.sub, n.eds.unsub = n.eds.sub[:0], n.eds.unsub[:0]
	n.rds.sub, n.rds.unsub = n.rds.sub[:0], n.rds.unsub[:0]
	return n
}

func (s *session) isComplete() bool {
	return s.gotCDS && s.gotLDS && s.eds.missing == 0 && s.rds.missing == 0 &&
		(len(s.eds.m) == 0 || s.edsAnswered) && (len(s.rds.m) == 0 || s.rdsAnswered)
}

// held is what the session holds of a type, name -> version, for a
// resumed stream's first request of that type.
func (s *session) held(typeURL string, n, versions *Names) map[string]string {
	vs := s.vers[typeIndex[typeURL]]
	if vs == nil {
		return nil
	}
	out := map[string]string{}
	add := func(id uint32) {
		if v, ok := vs[id]; ok {
			out[n.str(id)] = versions.str(v)
		}
	}
	switch typeURL {
	case typeCDS:
		for id := range s.clusters {
			add(id)
		}
	case typeLDS:
		for id := range s.listeners {
			add(id)
		}
	case typeEDS, typeRDS:
		set := s.eds
		if typeURL == typeRDS {
			set = s.rds
		}
		for id, st := range set.m {
			if st.got {
				add(id)
			}
		}
	}
	return out
}

// update is what one decoded resource changes in a session, applied only
// once the whole response is accepted.
type update struct {
	name    uint32
	refs    []uint32 // a cluster's EDS name, or a listener's route names
	version uint32   // interned version (Resume)
	fp      uint64   // fingerprint (Verify)
}

// hit is an Expectation of a change met by a response.
type hit struct {
	c   *Change
	bit uint64
}

// check finds the expectations of the active changes that one decoded
// resource meets.
func check(active []*Change, proxy int, typeURL string, name uint32, d *digest, hits []hit) []hit {
	for _, c := range active {
		if !c.concerns(proxy) || c.progress[proxy]&doneBit != 0 {
			continue
		}
		for i, e := range c.expects {
			if e.removed || e.typeURL != typeURL || e.name != name {
				continue
			}
			if e.match == nil || e.match(d) {
				hits = append(hits, hit{c, 1 << i})
			}
		}
	}
	return hits
}

// checkRemovals finds the removal expectations a session now meets: the
// proxy holds a complete set of clusters or listeners without the name.
func (s *session) checkRemovals(active []*Change, proxy int, typeURL string, hits []hit) []hit {
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

// apply records accepted resources in the session. full says the response
// holds every resource of a wildcard type (state of the world).
func (s *session) apply(typeURL string, ups []update, full bool) {
	switch typeURL {
	case typeCDS:
		if full {
			s.setClusters(ups)
		} else {
			for _, u := range ups {
				// The new EDS name is referenced before the old one is
				// dropped: an updated cluster keeps the endpoints it has.
				if len(u.refs) > 0 {
					s.eds.ref(u.refs[0])
				}
				s.removeCluster(u.name)
				s.clusters[u.name] = firstOr0(u.refs)
			}
		}
		s.gotCDS = true
	case typeLDS:
		if full {
			s.setListeners(ups)
		} else {
			for _, u := range ups {
				for _, r := range u.refs {
					s.rds.ref(r)
				}
				s.removeListener(u.name)
				s.listeners[u.name] = u.refs
			}
		}
		s.gotLDS = true
	case typeEDS:
		for _, u := range ups {
			s.eds.received(u.name)
		}
		s.edsAnswered = true
	case typeRDS:
		for _, u := range ups {
			s.rds.received(u.name)
		}
		s.rdsAnswered = true
	}
	s.record(typeURL, ups)
}

// record keeps the versions (Resume) and fingerprints (Verify) of
// accepted resources.
func (s *session) record(typeURL string, ups []update) {
	if vs := s.vers[typeIndex[typeURL]]; vs != nil {
		for _, u := range ups {
			vs[u.name] = u.version
		}
	}
	if s.fp != nil && (typeURL == typeEDS || typeURL == typeRDS) {
		for _, u := range ups {
			s.fp[u.name] = u.fp
		}
	}
}

// remove applies a delta response's removed resources.
func (s *session) remove(typeURL string, ids []uint32) {
	for _, id := range ids {
		switch typeURL {
		case typeCDS:
			s.removeCluster(id)
		case typeLDS:
			s.removeListener(id)
		case typeEDS:
			s.eds.removed(id)
		case typeRDS:
			s.rds.removed(id)
		}
		if vs := s.vers[typeIndex[typeURL]]; vs != nil {
			delete(vs, id)
		}
	}
}

func firstOr0(ids []uint32) uint32 {
	if len(ids) == 0 {
		return 0
	}
	return ids[0]
}

func (s *session) removeCluster(id uint32) {
	if eds, ok := s.clusters[id]; ok {
		delete(s.clusters, id)
		if eds != 0 {
			s.eds.unref(eds)
		}
	}
}

func (s *session) removeListener(id uint32) {
	if refs, ok := s.listeners[id]; ok {
		delete(s.listeners, id)
		for _, r := range refs {
			s.rds.unref(r)
		}
	}
}

func (s *session) setClusters(ups []update) {
	old := s.clusters
	s.clusters = make(map[uint32]uint32, len(ups))
	for _, u := range ups {
		s.clusters[u.name] = firstOr0(u.refs)
		if len(u.refs) > 0 {
			s.eds.ref(u.refs[0])
		}
	}
	for _, eds := range old {
		if eds != 0 {
			s.eds.unref(eds)
		}
	}
}

func (s *session) setListeners(ups []update) {
	old := s.listeners
	s.listeners = make(map[uint32][]uint32, len(ups))
	for _, u := range ups {
		s.listeners[u.name] = u.refs
		for _, r := range u.refs {
			s.rds.ref(r)
		}
	}
	for _, refs := range old {
		for _, r := range refs {
			s.rds.unref(r)
		}
	}
}
