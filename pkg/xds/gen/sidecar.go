package gen

import (
	"strings"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// RootNamespace is where a Sidecar without workloadSelector applies to
// every namespace that has none of its own (Istio's default root
// namespace).
const RootNamespace = "istio-system"

// egressScope is the host filter of the Sidecar resource that applies to a
// namespace: the union of its egress listeners' hosts, each
// NAMESPACE/DNSNAME (NAMESPACE "." for the Sidecar's own, "*" for any, "~"
// for none; DNSNAME "*", "*.suffix" or a name).
type egressScope struct {
	ns    string // the Sidecar's namespace, for "."
	hosts [][2]string
	// registryOnly is outboundTrafficPolicy mode REGISTRY_ONLY.
	registryOnly bool
	cfg          *model.Config
}

// sidecarScope finds the namespace-wide Sidecar for proxies of ns: its own
// namespace's, else the root namespace's; nil when neither exists (every
// exported service is visible). Sidecars with a workloadSelector are not
// supported yet: they would make the class depend on labels.
func sidecarScope(w *model.World, ns string) *egressScope {
	for _, where := range []string{ns, RootNamespace} {
		for _, c := range w.Configs(model.KindSidecar) {
			sc, ok := c.Object.(*networkingv1.Sidecar)
			if !ok || c.Key.Namespace != where || sc.Spec.GetWorkloadSelector() != nil {
				continue
			}
			es := &egressScope{ns: where, registryOnly: registryOnly(&sc.Spec), cfg: c}
			for _, l := range sc.Spec.GetEgress() {
				for _, h := range l.GetHosts() {
					hns, name, ok := strings.Cut(h, "/")
					if !ok {
						hns, name = "*", h
					}
					es.hosts = append(es.hosts, [2]string{hns, name})
				}
			}
			return es
		}
	}
	return nil
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
