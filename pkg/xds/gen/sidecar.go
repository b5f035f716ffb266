package gen

import (
	"strings"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// egressScope is the host filter of the Sidecar resource that applies to a
// proxy: the union of its egress listeners' hosts, each NAMESPACE/DNSNAME
// (NAMESPACE "." for the proxy's own, "*" for any, "~" for none; DNSNAME
// "*", "*.suffix" or a name).
type egressScope struct {
	ns    string // the proxy's namespace, for "."
	hosts [][2]string
	// registryOnly is outboundTrafficPolicy mode REGISTRY_ONLY.
	registryOnly bool
	cfg          *model.Config
	// shadowed are the other Sidecars with a workloadSelector that select
	// the proxy too; Istio leaves that case undefined, here the oldest
	// wins and the rest are reported.
	shadowed []*model.Config
}

// sidecarScope finds the Sidecar that applies to p (see choose in
// classkey.go for the rule) and turns its egress listeners into a host
// filter; nil when none applies (every exported service is visible) and
// for gateways, to which Sidecars never apply.
func sidecarScope(w *model.World, p *model.Proxy) *egressScope {
	c, shadowed := indexFor(w).choose(p)
	if c == nil {
		return nil
	}
	sc := c.Object.(*networkingv1.Sidecar)
	// "." names the namespace of the proxy, not of the Sidecar: a root
	// namespace default with ./* limits every namespace to itself.
	es := &egressScope{ns: p.Namespace, registryOnly: registryOnly(&sc.Spec, w.Mesh().RegistryOnly()), cfg: c, shadowed: shadowed}
	for _, l := range sc.Spec.GetEgress() {
		for _, h := range l.GetHosts() {
			hns, name, ok := strings.Cut(h, "/")
			if !ok {
				hns, name = "*", h
			}
			es.hosts = append(es.hosts, [2]string{hns, name})
		}
	}
	if len(sc.Spec.GetEgress()) == 0 {
		// A Sidecar without egress listeners imports everything
		// exported to the namespace, as Istio's default listener */* does.
		es.hosts = [][2]string{{"*", "*"}}
	}
	return es
}

// allows reports whether svc passes the Sidecar's egress hosts.
func (e *egressScope) allows(svc *model.Service) bool {
	if e == nil {
		return true
	}
	for _, h := range e.hosts {
		ns, name := h[0], h[1]
		if ns == "." {
			ns = e.ns
		}
		if ns == "~" || (ns != "*" && ns != svc.Namespace) {
			continue
		}
		if name == "*" || name == svc.Hostname || (strings.HasPrefix(name, "*.") && strings.HasSuffix(svc.Hostname, name[1:])) {
			return true
		}
	}
	return false
}

// importsVirtualService reports whether the Sidecar's egress hosts import
// the VirtualService c with hosts, resolved as written in c's namespace
// (Istio's SelectVirtualServices): one of its hosts matches a host listed
// for c's namespace ("." being the proxy's) or for "*". The namespace is
// the VirtualService's own, not the namespace of the service it routes: a
// Sidecar that imports ./* takes no other namespace's VirtualService, even
// for its own services. Without Sidecar every VirtualService is imported.
func (e *egressScope) importsVirtualService(c *model.Config, hosts []string, domainSuffix string) bool {
	if e == nil {
		return true
	}
	for _, h := range hosts {
		host := ResolveHost(h, c.Key.Namespace, domainSuffix)
		for _, eh := range e.hosts {
			ns := eh[0]
			if ns == "." {
				ns = e.ns
			}
			if ns == "~" || (ns != "*" && ns != c.Key.Namespace) {
				continue
			}
			if hostsMatch(host, eh[1]) {
				return true
			}
		}
	}
	return false
}

// hostsMatch is Istio's host.Name.Matches: equal names, or a wildcard
// ("*", "*.suffix") on either side that covers the other (two wildcards
// match when one covers the other). Istio matches VirtualService hosts
// against egress hosts both ways; services only one way (allows).
func hostsMatch(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && bw:
		if len(a) < len(b) {
			return strings.HasSuffix(b[1:], a[1:])
		}
		return strings.HasSuffix(a[1:], b[1:])
	case aw:
		return strings.HasSuffix(b, a[1:])
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}
