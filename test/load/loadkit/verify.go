package loadkit

import (
	"fmt"
	"sort"
	"strings"
)

// Verification is the result of checking what every proxy holds against
// the World.
type Verification struct {
	// Checked counts the well-behaved proxies checked; Correct those that
	// hold exactly the World's configuration.
	Checked int `json:"checked"`
	Correct int `json:"correct"`
	// Wrong lists the proxies that do not, with the first problem of each
	// (at most 20).
	Wrong []string `json:"wrong,omitempty"`
	// WrongCount counts them all.
	WrongCount int `json:"wrongCount"`
}

// OK reports whether every proxy checked is correct.
func (v Verification) OK() bool { return v.Checked > 0 && v.Correct == v.Checked }

func (v Verification) String() string {
	s := fmt.Sprintf("%d of %d proxies hold the world's configuration", v.Correct, v.Checked)
	if len(v.Wrong) > 0 {
		s += "; first wrong: " + strings.Join(v.Wrong[:min(3, len(v.Wrong))], "; ")
	}
	return s
}

// wanted is what every proxy must hold, from the World.
type wanted struct {
	clusters map[uint32]uint64 // outbound cluster (= its EDS name) -> endpoint fingerprint
	routes   map[uint32]uint64 // route configuration of an HTTP port -> edit fingerprint (0: any)
	// suffixes are ".<namespace>.svc.<domain>" of the World's namespaces:
	// names of other namespaces (the API server's own kubernetes Service)
	// are not the World's to check.
	suffixes []string
}

// ours reports whether a host (of a cluster or route name) is in one of
// the World's namespaces.
func (w wanted) ours(host string) bool {
	for _, s := range w.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

func (w *World) wanted(n *Names) wanted {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := wanted{clusters: map[uint32]uint64{}, routes: map[uint32]uint64{}}
	for i := 0; i < w.opts.Namespaces; i++ {
		out.suffixes = append(out.suffixes, "."+w.namespace(i)+".svc."+w.opts.DomainSuffix)
	}
	for i, s := range w.services {
		if s == nil {
			continue
		}
		host := s.host(w.opts.DomainSuffix)
		fp := addressHash(s.Endpoints)
		for _, p := range servicePorts[:w.opts.Ports] {
			out.clusters[n.id(clusterName(p.port, host))] = fp
			if !p.http {
				continue
			}
			var edit uint64
			if i < w.opts.VirtualServices {
				edit = uint64(w.vsEdits[i]) + 1
			}
			out.routes[n.id(routeName(p.port, host))] = edit
		}
	}
	return out
}

// Verify checks that every well-behaved proxy holds the World's
// configuration: exactly the outbound clusters of the World's services,
// each with the endpoints of its service, a route configuration for each
// HTTP port, named by a listener, with the current VirtualService edit,
// and no listener naming a route of a service that is gone. The fleet
// must record what proxies hold (FleetOptions.Verify).
func (f *Fleet) Verify(w *World) Verification {
	var v Verification
	if !f.opts.Verify {
		v.Wrong = []string{"the fleet does not record what proxies hold (FleetOptions.Verify)"}
		return v
	}
	want := w.wanted(f.names)
	for _, p := range f.proxies {
		if !p.behavior.normal() {
			continue
		}
		v.Checked++
		problem := p.verify(want)
		if problem == "" {
			v.Correct++
			continue
		}
		v.WrongCount++
		if len(v.Wrong) < 20 {
			v.Wrong = append(v.Wrong, fmt.Sprintf("proxy %d: %s", p.idx, problem))
		}
	}
	return v
}

// verify returns the first difference between what p holds and want.
func (p *proxy) verify(want wanted) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sess
	if s == nil {
		return "never connected"
	}
	if !s.gotCDS || !s.gotLDS {
		return "holds no clusters or listeners"
	}
	n := p.f.names
	for id, fp := range want.clusters {
		eds, ok := s.clusters[id]
		if !ok {
			return "no cluster " + n.str(id)
		}
		if st := s.eds.m[eds]; !st.got {
			return "no endpoints for " + n.str(id)
		}
		if got := s.fp[eds]; got != fp {
			return "stale endpoints for " + n.str(id)
		}
	}
	var extra []string
	for id := range s.clusters {
		name := n.str(id)
		if _, ok := want.clusters[id]; !ok && strings.HasPrefix(name, "outbound|") && want.ours(name) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return "cluster of a service that is gone: " + extra[0]
	}
	named := map[uint32]bool{}
	for _, refs := range s.listeners {
		for _, r := range refs {
			named[r] = true
		}
	}
	for id, edit := range want.routes {
		if !named[id] {
			return "no listener names route " + n.str(id)
		}
		if st := s.rds.m[id]; !st.got {
			return "no route configuration " + n.str(id)
		}
		if edit != 0 && s.fp[id] != edit {
			return fmt.Sprintf("route %s holds VirtualService edit %d, want %d", n.str(id), int64(s.fp[id])-1, edit-1)
		}
	}
	for id := range named {
		name := n.str(id)
		host, _, _ := strings.Cut(name, ":")
		if _, ok := want.routes[id]; !ok && want.ours(host) {
			return "listener names the route of a service that is gone: " + name
		}
	}
	return ""
}
