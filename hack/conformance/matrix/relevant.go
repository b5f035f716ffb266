package matrix

import (
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// rootNamespace is Istio's root configuration namespace.
const rootNamespace = "istio-system"

// vsFor returns the VirtualServices for a host on a gateway ("mesh" for
// sidecars).
func vsFor(in *scenario.Input, host, gateway, proxyNS string) []*scenario.Object {
	var out []*scenario.Object
	for _, vs := range in.Of("VirtualService") {
		gws := strList(vs.Spec()["gateways"])
		if len(gws) == 0 {
			gws = []string{"mesh"}
		}
		if !containsGateway(gws, gateway, vs.Namespace) {
			continue
		}
		for _, h := range strList(vs.Spec()["hosts"]) {
			if hostMatches(resolve(h, vs.Namespace), host) {
				out = append(out, vs)
				break
			}
		}
	}
	return out
}

// destinationObjects are the configs a request to host s:p depends on:
// its VirtualServices, the DestinationRules and PeerAuthentications of
// every host they (or the host itself) send to, and the ServiceEntry
// behind a host.
func (b *builder) destinationObjects(host, gateway string) []*scenario.Object {
	set := map[*scenario.Object]bool{}
	var out []*scenario.Object
	add := func(o *scenario.Object) {
		if o != nil && !set[o] {
			set[o] = true
			out = append(out, o)
		}
	}
	dests := map[string]bool{host: true}
	for _, vs := range vsFor(b.in, host, gateway, b.node.Namespace) {
		add(vs)
		for _, kind := range []string{"http", "tcp", "tls"} {
			for _, ri := range asList(vs.Spec()[kind]) {
				r, _ := ri.(map[string]any)
				for _, di := range append(asList(r["route"]), r["mirror"]) {
					d, _ := di.(map[string]any)
					if dd, ok := d["destination"].(map[string]any); ok {
						d = dd
					}
					if h, _ := d["host"].(string); h != "" {
						dests[resolve(h, vs.Namespace)] = true
					}
				}
			}
		}
	}
	for h := range dests {
		for _, dr := range b.in.Of("DestinationRule") {
			if hostMatches(resolve(str(dr.Spec()["host"]), dr.Namespace), h) {
				add(dr)
			}
		}
		for _, t := range b.svcs {
			if t.Host != h {
				continue
			}
			add(t.Entry)
			for _, pa := range b.policiesFor("PeerAuthentication", t) {
				add(pa)
			}
		}
	}
	return out
}

// policiesFor returns the policies of a kind that apply to some
// workload behind a host: selected by labels in its namespace, or
// namespace-wide, or mesh-wide from the root namespace.
func (b *builder) policiesFor(kind string, s *service) []*scenario.Object {
	var out []*scenario.Object
	for _, pol := range b.in.Of(kind) {
		sel := selectorOf(pol)
		switch {
		case pol.Namespace == rootNamespace && len(sel) == 0:
			out = append(out, pol)
		case pol.Namespace != s.Namespace:
		case len(sel) == 0:
			out = append(out, pol)
		default:
			for _, ip := range s.Endpoints {
				if l := b.podLabels(ip); l != nil && scenario.SelectorMatches(sel, l) {
					out = append(out, pol)
					break
				}
			}
		}
	}
	return out
}

// nodePolicies returns the policies of a kind that apply to the node's
// own workload.
func (b *builder) nodePolicies(kind string) []*scenario.Object {
	var out []*scenario.Object
	for _, pol := range b.in.Of(kind) {
		sel := selectorOf(pol)
		switch {
		case pol.Namespace == rootNamespace && len(sel) == 0:
			out = append(out, pol)
		case pol.Namespace != b.node.Namespace:
		case len(sel) == 0 || scenario.SelectorMatches(sel, b.node.Labels):
			out = append(out, pol)
		}
	}
	return out
}

// sidecarsFor returns the Sidecar that scopes the node: its workload's,
// else its namespace's, else the root namespace's.
func (b *builder) sidecarsFor() []*scenario.Object {
	var ns, root []*scenario.Object
	for _, sc := range b.in.Of("Sidecar") {
		sel := strMap(mapOf(sc.Spec()["workloadSelector"])["labels"])
		switch {
		case sc.Namespace == b.node.Namespace && len(sel) > 0 && scenario.SelectorMatches(sel, b.node.Labels):
			return []*scenario.Object{sc}
		case sc.Namespace == b.node.Namespace && len(sel) == 0:
			ns = append(ns, sc)
		case sc.Namespace == rootNamespace && len(sel) == 0:
			root = append(root, sc)
		}
	}
	if len(ns) > 0 {
		return ns
	}
	return root
}

func selectorOf(o *scenario.Object) map[string]string {
	return strMap(mapOf(o.Spec()["selector"])["matchLabels"])
}

func (b *builder) podLabels(ip string) map[string]string {
	for _, p := range b.in.Of("Pod") {
		st := mapOf(p.Doc["status"])
		if str(st["podIP"]) == ip {
			return p.Labels()
		}
	}
	return nil
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
