package gen

import (
	"strings"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// egressScope is the host filter of the Sidecar resource that applies to a
// proxy: its egress listeners' hosts, each NAMESPACE/DNSNAME (NAMESPACE
// "." for the proxy's own, "*" for any; DNSNAME "*", "*.suffix" or a
// name), a "~" before the namespace excluding the hosts instead ("~" alone
// for any namespace: ~/* excludes everything), as Istio's
// IstioEgressListenerWrapper reads them. What one listener imports and
// does not exclude is visible; the listeners' imports add up.
type egressScope struct {
	ns        string // the proxy's namespace, for "."
	listeners [][]egressHost
	// registryOnly is outboundTrafficPolicy mode REGISTRY_ONLY.
	registryOnly bool
	cfg          *model.Config
	// shadowed are the other Sidecars with a workloadSelector that select
	// the proxy too; Istio leaves that case undefined, here the oldest
	// wins and the rest are reported.
	shadowed []*model.Config
}

// egressHost is one host of an egress listener, its namespace resolved
// ("." to the proxy's).
type egressHost struct {
	ns, name string
	excluded bool
}

// sidecarScope finds the Sidecar that applies to p (see choose in
// class_key.go for the rule) and turns its egress listeners into a host
// filter; nil when none applies (every exported service is visible) and
// for gateways, to which Sidecars never apply.
func sidecarScope(w *view, p *model.Proxy) *egressScope {
	c, shadowed := w.sidecarFor(p)
	if c == nil {
		return nil
	}
	sc := c.Object.(*networkingv1.Sidecar)
	// "." names the namespace of the proxy, not of the Sidecar: a root
	// namespace default with ./* limits every namespace to itself.
	es := &egressScope{ns: p.Namespace, registryOnly: registryOnly(&sc.Spec, w.Mesh().RegistryOnly()), cfg: c, shadowed: shadowed}
	for _, l := range sc.Spec.GetEgress() {
		var hosts []egressHost
		for _, h := range l.GetHosts() {
			hns, name, ok := strings.Cut(h, "/")
			if !ok {
				hns, name = "*", h
			}
			eh := egressHost{ns: hns, name: name}
			if rest, ok := strings.CutPrefix(hns, "~"); ok {
				eh.excluded, eh.ns = true, rest
				if rest == "" {
					eh.ns = "*"
				}
			}
			if eh.ns == "." {
				eh.ns = p.Namespace
			}
			hosts = append(hosts, eh)
		}
		es.listeners = append(es.listeners, hosts)
	}
	if len(sc.Spec.GetEgress()) == 0 {
		// A Sidecar without egress listeners imports everything
		// exported to the namespace, as Istio's default listener */* does.
		es.listeners = [][]egressHost{{{ns: "*", name: "*"}}}
	}
	return es
}

// covers reports whether h's namespace is ns or any.
func (h egressHost) covers(ns string) bool { return h.ns == "*" || h.ns == ns }

// excludes reports whether an excluded host of hosts covers host of
// namespace ns (Istio's hostClassification.Excluded: host is the excluded
// name or under its wildcard).
func excludes(hosts []egressHost, ns, host string) bool {
	for _, h := range hosts {
		if h.excluded && h.covers(ns) && subsetOf(host, h.name) {
			return true
		}
	}
	return false
}

// subsetOf is Istio's host.Name.SubsetOf: a is b, or falls under b's
// wildcard ("*", "*.suffix"); a wildcard is a subset only of a wildcard
// that covers it.
func subsetOf(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && bw:
		return len(a) >= len(b) && strings.HasSuffix(a[1:], b[1:])
	case aw:
		return false
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}

// allows reports whether svc passes the Sidecar's egress hosts.
func (e *egressScope) allows(svc *model.Service) bool {
	if e == nil {
		return true
	}
	for _, hosts := range e.listeners {
		if excludes(hosts, svc.Namespace, svc.Hostname) {
			continue
		}
		for _, h := range hosts {
			if h.excluded || !h.covers(svc.Namespace) {
				continue
			}
			if h.name == "*" || h.name == svc.Hostname || (strings.HasPrefix(h.name, "*.") && strings.HasSuffix(svc.Hostname, h.name[1:])) {
				return true
			}
		}
	}
	return false
}

// importsVirtualService reports whether the Sidecar's egress hosts import
// the VirtualService c with hosts, resolved as written in c's namespace
// (Istio's SelectVirtualServices): one of its hosts matches a host listed
// for c's namespace ("." being the proxy's) or for "*", and no excluded
// host of the listener covers it. The namespace is the VirtualService's
// own, not the namespace of the service it routes: a Sidecar that imports
// ./* takes no other namespace's VirtualService, even for its own
// services. Without Sidecar every VirtualService is imported.
func (e *egressScope) importsVirtualService(c *model.Config, hosts []string, domainSuffix string) bool {
	if e == nil {
		return true
	}
	for _, eg := range e.listeners {
		for _, h := range hosts {
			host := ResolveHost(h, c.Key.Namespace, domainSuffix)
			if excludes(eg, c.Key.Namespace, host) {
				continue
			}
			for _, eh := range eg {
				if !eh.excluded && eh.covers(c.Key.Namespace) && hostsMatch(host, eh.name) {
					return true
				}
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
