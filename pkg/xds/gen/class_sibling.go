package gen

import (
	"strings"
	"sync"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/meshplane/discovery/pkg/model"
)

// Sibling classes: the sidecar classes of different namespaces that
// differ in nothing else (their keys are equal but for the namespace).
//
// Without a Sidecar, each namespace's class sees the same services, the
// same VirtualServices and DestinationRules, and builds nearly the same
// resources: at M1 fifty classes built the same 2,000 routes and the same
// port listeners, fifty times over, when their proxies connected (a
// third of the server's time connecting 1,000 proxies). What a class
// builds differs from its sibling's only through the namespace: the
// short host name of a service of the proxies' own namespace, a match's
// sourceNamespace, and what the class selected of the World by it (its
// scope: visibility, VirtualServices, DestinationRules, Sidecar; its
// telemetry). A unit records each of these as a question with its
// answer (reads_scope.go, Scope.inNamespace); so a unit of one class
// stands in a sibling's generation when the sibling answers every
// question alike, and the World reads stand between the two Worlds
// (Reads.stands, the rule a class applies to its own previous units).
// Then a class builds the units of its own namespace's services, and of
// the donor's, and takes the rest.
//
// What a class takes is a service's unit, or the part of it that stands
// (its routes; its clusters and endpoints, which partCache shares
// between classes already, but each class recorded their reads anew),
// and the port listeners when the two classes' outbound telemetry is
// the same. A port listener's reads include the telemetry's
// (Scope.outTel), which are of the donor's namespace: the taken unit
// reads the class's own too, so that a change of its namespace's
// Telemetry rebuilds it.
//
// Where istiod generates every proxy's configuration (and caches per
// proxy, not per namespace), this is the same result built once per
// family.

// siblings holds, per family, the class generated last (weakly: a
// class no proxy is served any longer is no donor), and the first
// generation of a family while it runs. The zero value is empty.
type siblings struct {
	mu sync.Mutex
	m  weakMap[string, ClassConfig]
	// first holds, per family without a donor yet, a channel closed
	// when the generation that will be its first donor ends: the
	// server prepares 16 proxies at once, and when 1,000 connect the
	// first classes of 50 namespaces would otherwise all be built from
	// nothing side by side, on two cores, for no gain.
	first map[string]chan struct{}
}

// familyOf is the family of the class key of p: the key with p's
// namespace left out, for a sidecar served by Envoy or proxyless gRPC;
// "" when the class takes nothing from siblings. Only the tracing parts
// of a key (|trace=, and |tags= when shared: the service tags are then
// placeholders) may follow p.Class(): every other part names
// configuration that selects workloads by their labels, which a class
// of another namespace does not see the same way, and a part not known
// here keeps the class to itself.
func familyOf(key string, p *model.Proxy, shared bool) string {
	if p.Type != model.ProxySidecar {
		return ""
	}
	cls := p.Class()
	if !strings.HasPrefix(key, cls) {
		return ""
	}
	rest := key[len(cls):]
	if shared {
		rest, _ = VariantOf(rest)
	}
	if rest != "" && !strings.HasPrefix(rest, "|trace=") && !strings.HasPrefix(rest, variantSep) {
		return ""
	}
	for _, part := range []string{"|sidecar=", "|src=", "|dr=", "|tel=", "|lb=", "|ef=", "|wasm="} {
		if strings.Contains(rest, part) {
			return ""
		}
	}
	q := *p
	q.Namespace = ""
	return q.Class() + rest
}

// take returns what a class of family in namespace ns may take from a
// sibling in cur: the donor and the changes since its World; nil if
// there is none or the changes are not known. done is to be called
// when the class's generation ends. A class that finds no donor waits
// for the family's first generation, if one runs, or is that one.
func (s *siblings) take(family, ns string, shared bool, cur *model.World) (sib *sibling, done func()) {
	done = func() {}
	if family == "" {
		return nil, done
	}
	s.mu.Lock()
	d := s.m.get(family)
	if d == nil {
		if wait, ok := s.first[family]; ok {
			s.mu.Unlock()
			<-wait
			s.mu.Lock()
			d = s.m.get(family)
		} else {
			if s.first == nil {
				s.first = map[string]chan struct{}{}
			}
			ch := make(chan struct{})
			s.first[family] = ch
			done = func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				delete(s.first, family)
				close(ch)
			}
		}
	}
	s.mu.Unlock()
	if d == nil || d.scope == nil || d.scope.Proxy.Namespace == ns || d.shared != shared || d.at == nil {
		return nil, done
	}
	cs := changesSince(d.at, cur)
	if cs.unknown || cs.mesh {
		return nil, done
	}
	return &sibling{cc: d, cs: cs}, done
}

// generated makes cc the donor of its family.
func (s *siblings) generated(family string, cc *ClassConfig) {
	if family == "" || cc == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m.m == nil {
		s.m = newWeakMap[string, ClassConfig](16)
	}
	s.m.put(family, cc)
}

// sibling is what a class takes from its donor while it is generated.
type sibling struct {
	cc *ClassConfig
	cs *changes
	// next walks cc.units along the class's services (both in key order).
	next int
}

// unit returns the donor's unit of svc, and whether its routes part and
// its clusters part stand in sc's generation; nil if the donor has no
// unit of svc. Services come in key order. Clusters whose endpoints
// UpdateEndpoints changed since the donor's World (epsAt, stale) are
// not taken.
func (s *sibling) unit(sc *Scope, svc *model.Service, routes, clusters bool) (u *unit, routesStand, clustersStand bool) {
	if s == nil || !(routes || clusters) {
		return nil, false, false
	}
	key, units := svc.Key(), s.cc.units
	for s.next < len(units) && lessNN(units[s.next].svc.Key(), key) {
		s.next++
	}
	if s.next == len(units) || units[s.next].svc != svc {
		return nil, false, false
	}
	u = units[s.next]
	routesStand = routes && u.reads != nil && u.reads.stands(sc, s.cs)
	clustersStand = clusters && !u.stale && !u.epsTaken && u.clusterReads != nil && u.clusterReads.stands(sc, s.cs)
	return u, routesStand, clustersStand
}

// port returns the donor's listeners of port for cc if they stand in
// sc's generation, reading sc's telemetry too; else nil.
func (s *sibling) port(sc *Scope, cc *ClassConfig, port int32, lb *builder) *portUnit {
	if s == nil {
		return nil
	}
	pu := s.cc.ports[port]
	if pu == nil || pu.presplit != cc.presplit || s.cc.outTelKey != cc.outTelKey ||
		!pu.reads.stands(sc, s.cs) || (pu.split != nil && !splitStands(lb, pu)) {
		return nil
	}
	own := *pu
	own.reads = newReads()
	own.reads.add(pu.reads)
	if sc.tel != nil {
		own.reads.add(sc.tel.reads)
	}
	own.reads.seal()
	return &own
}

// telemetryKey identifies a class's outbound telemetry by what it puts in
// listeners: a connection manager's, a TCP chain's and a listener's
// telemetry, marshaled. Two classes with the same key build the same
// outbound listeners from the same reads.
func telemetryKey(t *listenerTelemetry) string {
	if t == nil {
		return ""
	}
	l := t.listener(&listenerv3.Listener{FilterChains: []*listenerv3.FilterChain{
		{Filters: t.httpChainFilters(rdsManager(t, "", ""))},
		{Filters: t.stack(t.tcpProxy("", ""))},
	}})
	b, err := marshalOpts.Marshal(l)
	if err != nil {
		panic(err) // generated Envoy types always marshal
	}
	return string(b)
}
