package gen

import (
	"sort"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Which DestinationRule applies to a host for a proxy, as Istio decides
// (PushContext.destinationRule, SidecarScope.DestinationRule), looking in
// three namespaces in turn:
//
//	1. the proxy's: a rule whose workloadSelector selects the proxy's
//	   labels, else one without workloadSelector that the namespace
//	   exports to itself (no exportTo, "*", "." or its name). For a proxy
//	   of the root namespace only the root's private rules (exportTo "."
//	   or its name) count here, Istio's rootNamespaceLocal
//	2. the host's service's: a rule it exports to the proxy's namespace
//	   (no exportTo, "*" or the namespace's name; not one it keeps to
//	   itself)
//	3. the root namespace's: likewise
//
// A rule with a workloadSelector applies in its own namespace only,
// whatever its exportTo (Istio makes it private), to the outbound
// traffic of the workloads it selects, gateways included; it comes
// before the namespace's rules without selector. Within each kind the
// oldest comes first (creation time, then name, then namespace: Istio's
// sortConfigBySelectorAndCreationTime).
//
// Chosen differently from istiod:
//   - Several rules of one host where one is picked: Istio merges them
//     (the subsets of all, the first traffic policy; selecting rules only
//     with equal selectors, and a namespace-wide rule into the selecting
//     ones when their exportTo allow it, mergeDestinationRule). Here the
//     oldest applies whole and the others are reported (warnRules).
//   - A namespace whose rules for the host all select other workloads is
//     passed over. Istio stops there and leaves those workloads without
//     any rule, their service's namespace's included (istio/istio#52691,
//     #57719, closed unfixed): a rule written for some workloads would
//     take policy, mTLS settings for example, away from the others.
//   - Hosts match exactly, as before: a rule for a wildcard host
//     ("*.example.com") applies to no service.

// ruleIndex holds the DestinationRules of one World, indexed once per
// World (worldIndex).
type ruleIndex struct {
	// byNS maps a namespace and a host to its rules there, those with a
	// workloadSelector first, each kind oldest first.
	byNS map[string]map[string][]ruleEntry
	// selecting lists, per namespace, the rules with a workloadSelector,
	// oldest first.
	selecting map[string][]ruleEntry
	// hosts are the hosts rules name, each once.
	hosts []string
	// root is the mesh's root namespace.
	root string
}

type ruleEntry struct {
	cfg *model.Config
	// selects is set for a rule with a workloadSelector, selector its
	// matchLabels (empty selects every workload of the namespace).
	selects  bool
	selector map[string]string
	exportTo []string
}

// privateOnly reports whether Istio keeps r to its own namespace.
func (r ruleEntry) privateOnly() bool {
	return r.selects || (len(r.exportTo) == 1 && (r.exportTo[0] == "." || r.exportTo[0] == r.cfg.Key.Namespace))
}

// exportedOut reports whether r is exported from its namespace to ns
// (Istio's exportedByNamespace and its exportTo check).
func (r ruleEntry) exportedOut(ns string) bool {
	if r.privateOnly() {
		return false
	}
	return len(r.exportTo) == 0 || containsString(r.exportTo, "*") || containsString(r.exportTo, ns)
}

func newRuleIndex(w *view) *ruleIndex {
	ri := &ruleIndex{byNS: map[string]map[string][]ruleEntry{}, selecting: map[string][]ruleEntry{}, root: rootNamespace(w)}
	seen := map[string]bool{}
	for _, c := range w.Configs(model.KindDestinationRule) {
		dr, ok := c.Object.(*networkingv1.DestinationRule)
		if !ok {
			continue
		}
		e := ruleEntry{cfg: c, exportTo: drExportTo(w, &dr.Spec)}
		if ws := dr.Spec.GetWorkloadSelector(); ws != nil {
			e.selects, e.selector = true, ws.GetMatchLabels()
			ri.selecting[c.Key.Namespace] = append(ri.selecting[c.Key.Namespace], e)
		}
		host := ResolveHost(dr.Spec.GetHost(), c.Key.Namespace, w.DomainSuffix)
		hosts := ri.byNS[c.Key.Namespace]
		if hosts == nil {
			hosts = map[string][]ruleEntry{}
			ri.byNS[c.Key.Namespace] = hosts
		}
		hosts[host] = append(hosts[host], e)
		if !seen[host] {
			seen[host] = true
			ri.hosts = append(ri.hosts, host)
		}
	}
	for _, hosts := range ri.byNS {
		for _, rs := range hosts {
			sortRules(rs)
		}
	}
	for _, rs := range ri.selecting {
		sortRules(rs)
	}
	return ri
}

// sortRules orders rules as Istio does: with a workloadSelector first,
// then oldest first, then by name and namespace.
func sortRules(rs []ruleEntry) {
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.selects != b.selects {
			return a.selects
		}
		ta := a.cfg.Object.(*networkingv1.DestinationRule).CreationTimestamp
		tb := b.cfg.Object.(*networkingv1.DestinationRule).CreationTimestamp
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		if a.cfg.Key.Name != b.cfg.Key.Name {
			return a.cfg.Key.Name < b.cfg.Key.Name
		}
		return a.cfg.Key.Namespace < b.cfg.Key.Namespace
	})
}

// selected names, for ClassKey, the rules of p's namespace whose
// workloadSelector selects p, oldest first; "" for none.
func (ri *ruleIndex) selected(p *model.Proxy) string {
	rs := ri.selecting[p.Namespace]
	if len(rs) == 0 {
		return ""
	}
	labels := p.Labels()
	out := ""
	for _, r := range rs {
		if labelsMatch(r.selector, labels) {
			if out == "" {
				out = r.cfg.Key.Name // nothing to allocate for one rule
			} else {
				out += "," + r.cfg.Key.Name
			}
		}
	}
	return out
}

// forScope picks the rule of every host some rule names for the class of
// sc, and the rules each pick shadows (nil when none does).
func (ri *ruleIndex) forScope(sc *Scope) (map[string]*model.Config, map[string][]*model.Config) {
	out := make(map[string]*model.Config, len(ri.hosts))
	var shadowed map[string][]*model.Config
	ns, labels := sc.Proxy.Namespace, sc.Proxy.Labels()
	var byHost map[string]string // visible hosts' namespaces, built on first need
	for _, host := range ri.hosts {
		svcNS := ""
		if svc := sc.w.ServiceByHost(host); svc != nil {
			svcNS = svc.Namespace
			if !sc.visible[svc.Key()] {
				// Another namespace's service of that name may be the one
				// the class sees (ServiceEntries share hosts).
				if byHost == nil {
					byHost = visibleHosts(sc)
				}
				if v, ok := byHost[host]; ok {
					svcNS = v
				}
			}
		}
		c, sh := ri.pick(host, ns, svcNS, labels)
		if c == nil {
			continue
		}
		out[host] = c
		if len(sh) > 0 {
			if shadowed == nil {
				shadowed = map[string][]*model.Config{}
			}
			shadowed[host] = sh
		}
	}
	return out, shadowed
}

func visibleHosts(sc *Scope) map[string]string {
	m := make(map[string]string, len(sc.Services))
	for _, s := range sc.Services {
		if _, ok := m[s.Hostname]; !ok {
			m[s.Hostname] = s.Namespace
		}
	}
	return m
}

// pick is the rule of host for a proxy of namespace ns with labels, the
// host's service being in svcNS ("" if none), and the rules of the same
// rank it shadows.
func (ri *ruleIndex) pick(host, ns, svcNS string, labels map[string]string) (*model.Config, []*model.Config) {
	if c, sh := ri.local(host, ns, labels); c != nil {
		return c, sh
	}
	for _, from := range []string{svcNS, ri.root} {
		if from == "" {
			continue
		}
		var c *model.Config
		var sh []*model.Config
		for _, r := range ri.byNS[from][host] {
			if !r.exportedOut(ns) {
				continue
			}
			if c == nil {
				c = r.cfg
			} else {
				sh = append(sh, r.cfg)
			}
		}
		if c != nil {
			return c, sh
		}
	}
	return nil, nil
}

// local is the rule of host in the proxy's own namespace ns: the oldest
// that selects labels, else the oldest without selector that applies in
// ns (only the root's private ones in the root namespace).
func (ri *ruleIndex) local(host, ns string, labels map[string]string) (*model.Config, []*model.Config) {
	rs := ri.byNS[ns][host]
	var c *model.Config
	var sh []*model.Config
	pass := func(ok func(ruleEntry) bool) {
		for _, r := range rs {
			if !ok(r) {
				continue
			}
			if c == nil {
				c = r.cfg
			} else {
				sh = append(sh, r.cfg)
			}
		}
	}
	pass(func(r ruleEntry) bool { return r.selects && labelsMatch(r.selector, labels) })
	if c != nil {
		return c, sh
	}
	pass(func(r ruleEntry) bool {
		if r.selects {
			return false
		}
		if ns == ri.root {
			return r.privateOnly()
		}
		return exportedTo(r.exportTo, ns, ns)
	})
	return c, sh
}

// DestinationRuleExportedTo reports whether the DestinationRule dr of
// namespace ownNS may apply to proxies of namespace toNS: with a
// workloadSelector only in its own namespace (Istio makes such a rule
// private, whatever its exportTo), otherwise as its exportTo says.
func destinationRuleExportedTo(w *view, dr *networking.DestinationRule, ownNS, toNS string) bool {
	if dr.GetWorkloadSelector() != nil {
		return ownNS == toNS
	}
	return exportedTo(drExportTo(w, dr), ownNS, toNS)
}

// warnRules reports, once per set of versions, the DestinationRules of
// host that the class's rule shadows: Istio merges them, here the oldest
// applies.
func (g *Generator) warnRules(sc *Scope, host string) {
	sh := sc.drShadowed[host]
	used := sc.dr[host]
	if len(sh) == 0 || used == nil {
		return
	}
	names := make([]string, 0, len(sh))
	what := "shadows:" + host
	for _, c := range sh {
		names = append(names, c.Key.Namespace+"/"+c.Key.Name)
		what += "|" + c.Key.String() + "@" + c.Object.(*networkingv1.DestinationRule).ResourceVersion
	}
	g.warnOnce(used, used.Object.(*networkingv1.DestinationRule).ResourceVersion, what,
		"several DestinationRules apply to one host for the same workloads; the oldest is used whole (Istio merges the subsets of those it can)",
		"host", host, "ignored", names)
}
