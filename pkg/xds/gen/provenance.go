package gen

import (
	"sort"
	"strings"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/meshplane/discovery/pkg/model"
)

// ConfigRef names one Istio config a generated resource was built from, at
// the generation it had then.
type ConfigRef struct {
	Key             model.Key
	Generation      int64
	ResourceVersion string
}

// Sources returns the Istio configs the resource typeURL/name of c was built
// from: VirtualServices for routes, DestinationRules and ServiceEntries for
// clusters and endpoints, Gateways (and their VirtualServices) for a
// gateway's listeners and routes, the Sidecar for outbound listeners and
// routes, AuthorizationPolicies and PeerAuthentications for virtualInbound,
// and the EnvoyFilters whose patches may have changed the resource.
// Resources built from Kubernetes objects alone have none.
//
// Provenance is not stored per resource: it follows from the resource's name
// and the class's Scope, the immutable input the resource was built from,
// so building configuration costs nothing more and a lookup (made only for
// a rejected or acknowledged resource) reads the same objects the generator
// read.
func (c *ProxyConfig) Sources(typeURL, name string) []ConfigRef {
	if c == nil || c.Class == nil || c.Class.scope == nil {
		return nil
	}
	return c.Class.scope.sources(typeURL, name)
}

// sources is Sources for a resource of sc's class. Provenance shapes no
// resource: it reads unrecorded.
func (sc *Scope) sources(typeURL, name string) []ConfigRef {
	sc = sc.recording(nil)
	var cfgs []*model.Config
	switch typeURL {
	case ClusterType, EndpointType:
		cfgs = sc.clusterSources(name)
	case RouteType:
		cfgs = sc.routeSources(name)
	case ListenerType:
		cfgs = sc.listenerSources(name)
	}
	cfgs = append(cfgs, sc.envoyFilterSources(typeURL, name)...) // envoyfilter.go
	return refs(cfgs)
}

func (sc *Scope) clusterSources(name string) []*model.Config {
	parts := strings.SplitN(name, "|", 4)
	if len(parts) != 4 || parts[0] != "outbound" {
		return nil
	}
	host := parts[3]
	var out []*model.Config
	if dr := sc.dr[host]; dr != nil {
		out = append(out, dr)
	}
	return append(out, sc.serviceEntry(host)...)
}

// serviceEntry returns the ServiceEntry that declares host, if any.
func (sc *Scope) serviceEntry(host string) []*model.Config {
	svc := sc.w.ServiceByHost(host)
	if svc == nil || svc.Entry == nil {
		return nil
	}
	for _, c := range sc.w.Configs(model.KindServiceEntry) {
		if c.Key.Namespace == svc.Namespace && c.Key.Name == svc.Entry.Name {
			return []*model.Config{c}
		}
	}
	return nil
}

func (sc *Scope) routeSources(name string) []*model.Config {
	if sc.Proxy.Type == model.ProxyRouter {
		return sc.withDelegates(sc.gatewaySources(true))
	}
	var out []*model.Config
	if host, _, ok := cutLast(name, ":"); ok {
		out = append(out, sc.VirtualServices(host, "mesh")...)
	} else {
		// A port's route for hosts without an address: every such host's
		// VirtualServices may contribute.
		for _, svc := range sc.Services {
			if len(svc.Addresses) == 0 {
				out = append(out, sc.VirtualServices(svc.Hostname, "mesh")...)
			}
		}
	}
	return append(sc.withDelegates(out), sc.sidecarConfig()...)
}

func (sc *Scope) listenerSources(name string) []*model.Config {
	switch {
	case sc.Proxy.Type == model.ProxyRouter:
		return sc.gatewaySources(false)
	case name == VirtualInbound:
		return inboundSources(sc.w, sc.Proxy)
	}
	return sc.sidecarConfig()
}

func (sc *Scope) sidecarConfig() []*model.Config {
	if sc.sidecar == nil || sc.sidecar.cfg == nil {
		return nil
	}
	return []*model.Config{sc.sidecar.cfg}
}

// gatewaySources are the Gateways that select the router and, with routes,
// the VirtualServices bound to them.
func (sc *Scope) gatewaySources(withVS bool) []*model.Config {
	var out []*model.Config
	var names []string
	for _, c := range sc.w.Configs(model.KindGateway) {
		gw, ok := c.Object.(*networkingv1.Gateway)
		if !ok || len(gw.Spec.GetSelector()) == 0 || !matchLabels(gw.Spec.GetSelector(), sc.Proxy.Labels()) {
			continue
		}
		out = append(out, c)
		names = append(names, c.Key.Namespace+"/"+c.Key.Name)
	}
	if !withVS {
		return out
	}
	seen := map[model.Key]bool{}
	for _, vss := range sc.vs {
		for _, v := range vss {
			for _, gw := range names {
				if !seen[v.Key] && appliesTo(v, gw) {
					seen[v.Key] = true
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// inboundSources are the AuthorizationPolicies and PeerAuthentications that
// may shape p's virtualInbound listener: those of p's namespace and the root
// namespace whose selector matches p (or that have none).
func inboundSources(w *view, p *model.Proxy) []*model.Config {
	var out []*model.Config
	root := rootNamespace(w)
	for _, c := range w.Configs(model.KindAuthorizationPolicy) {
		ap, ok := c.Object.(*securityv1.AuthorizationPolicy)
		if ok && (c.Key.Namespace == p.Namespace || c.Key.Namespace == root) &&
			labelsMatch(ap.Spec.GetSelector().GetMatchLabels(), p.Labels()) {
			out = append(out, c)
		}
	}
	for _, c := range w.Configs(model.KindPeerAuthentication) {
		pa, ok := c.Object.(*securityv1.PeerAuthentication)
		if ok && (c.Key.Namespace == p.Namespace || c.Key.Namespace == root) &&
			labelsMatch(pa.Spec.GetSelector().GetMatchLabels(), p.Labels()) {
			out = append(out, c)
		}
	}
	return out
}

// refs turns configs into ConfigRefs, without duplicates, sorted by key.
func refs(cfgs []*model.Config) []ConfigRef {
	if len(cfgs) == 0 {
		return nil
	}
	seen := make(map[model.Key]bool, len(cfgs))
	out := make([]ConfigRef, 0, len(cfgs))
	for _, c := range cfgs {
		if seen[c.Key] {
			continue
		}
		seen[c.Key] = true
		r := ConfigRef{Key: c.Key}
		if m, err := meta.Accessor(c.Object); err == nil {
			r.Generation, r.ResourceVersion = m.GetGeneration(), m.GetResourceVersion()
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
