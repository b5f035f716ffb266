package gen

import (
	"slices"

	"github.com/meshplane/discovery/pkg/model"
)

// Reads of a class's scope. A Scope is rebuilt by every generation of
// its class from World reads the class records (the services it sees,
// their VirtualServices and DestinationRules, its Sidecar); a unit
// reads selections the scope made ("the VirtualServices of this host").
// Such a read is recorded with its answer, and a unit reused by the next
// generation asks each again of the new scope: it stands only if every
// answer is the same. World reads are judged by what changed
// (changes.touches); scope reads by their answers, which the scope
// computes anyway.

type scopeQuestion uint8

const (
	// qVirtualServices: the VirtualServices naming host (Scope.vs).
	qVirtualServices scopeQuestion = iota + 1
	// qL4VirtualServices: l4VirtualServices(host).
	qL4VirtualServices
	// qGatewayVirtualServices: gatewayVirtualServices(host), host being
	// the gateway's name.
	qGatewayVirtualServices
	// qDestinationRule: the DestinationRule of host (Scope.dr).
	qDestinationRule
	// qAliases: the ExternalName services naming host (Scope.aliases).
	qAliases
	// qDelegation: the delegates merged into the root VirtualService cfg
	// (Scope.delegations); ok says whether the scope had resolved it.
	qDelegation
	// qPortServices: the services with port (servicesByPort).
	qPortServices
	// qRegistryOnly: RegistryOnly, in ok.
	qRegistryOnly
	// qProxyNamespace: whether the proxies' namespace is host, in ok
	// (Scope.inNamespace). A class's namespace never changes, so within
	// a class it always holds; it tells the units a sibling class may
	// take from another (class_sibling.go).
	qProxyNamespace
)

// scopeRead is one question asked of the scope and its answer.
type scopeRead struct {
	q    scopeQuestion
	ok   bool
	port int32
	host string
	cfg  *model.Config
	cfgs []*model.Config
	svcs []*model.Service
}

// same reports whether a and b ask the same question.
func (a *scopeRead) same(b *scopeRead) bool {
	return a.q == b.q && a.host == b.host && a.port == b.port && a.cfg == b.cfg
}

// scope records a read of the class's scope, unless the same question
// was asked lately.
func (r *Reads) scope(sr scopeRead) {
	if !r.recording() {
		return
	}
	for i := len(r.scoped) - 1; i >= 0 && i >= len(r.scoped)-4; i-- {
		if r.scoped[i].same(&sr) {
			return
		}
	}
	r.scoped = append(r.scoped, sr)
}

// scopeHolds reports whether sc answers each of o's own scope reads as
// o's scope did.
func (o *Reads) scopeHolds(sc *Scope) bool {
	for i := range o.scoped {
		if !sc.answers(&o.scoped[i]) {
			return false
		}
	}
	return true
}

// answers reports whether sc gives sr's answer to sr's question. It
// reads sc unrecorded: the scope's own reads are the class's.
func (sc *Scope) answers(sr *scopeRead) bool {
	switch sr.q {
	case qVirtualServices:
		return slices.Equal(sc.vs[sr.host], sr.cfgs)
	case qL4VirtualServices:
		return slices.Equal(sc.l4VirtualServicesOf(sr.host), sr.cfgs)
	case qGatewayVirtualServices:
		return slices.Equal(sc.gatewayVirtualServicesOf(sr.host), sr.cfgs)
	case qDestinationRule:
		return sc.dr[sr.host] == sr.cfg
	case qAliases:
		return slices.Equal(sc.aliases[sr.host], sr.svcs)
	case qDelegation:
		d := sc.delegations[sr.cfg]
		if d == nil {
			return !sr.ok
		}
		return sr.ok && slices.Equal(d.delegates, sr.cfgs)
	case qPortServices:
		return slices.Equal(sc.portServices()[sr.port], sr.svcs)
	case qRegistryOnly:
		return sc.registryOnlyIn(sc.w.unrecorded()) == sr.ok
	case qProxyNamespace:
		return (sc.Proxy.Namespace == sr.host) == sr.ok
	}
	return false
}

// inNamespace reports whether the class's proxies are in namespace ns,
// recording the question: what is built from the answer (a service's
// short host name, a match's sourceNamespace) stands for a class of
// another namespace only where that class answers the same.
func (sc *Scope) inNamespace(ns string) bool {
	yes := sc.Proxy.Namespace == ns
	sc.w.r.scope(scopeRead{q: qProxyNamespace, host: ns, ok: yes})
	return yes
}
