package corpus

import (
	"fmt"
	"sort"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// Synthesize adds the workloads a config-only fixture talks about: a
// Service (with a Deployment per subset) for every in-cluster host a
// VirtualService or DestinationRule names that no Service defines, and a
// Deployment with a Service for every workload selector no workload
// matches. portProto names the ports of policy workloads ("http" or
// "tcp").
func Synthesize(objs []*scenario.Object, portProto string) []*scenario.Object {
	s := &synth{objs: objs, hosts: map[string]*hostNeed{}}
	for _, o := range objs {
		if o.Namespace == "" && o.Kind != "Namespace" {
			o.Namespace = "default"
			// Both control planes read the document: it must say so too.
			if md, ok := o.Doc["metadata"].(map[string]any); ok {
				md["namespace"] = "default"
			}
		}
	}
	for _, o := range objs {
		switch o.Kind {
		case "VirtualService":
			s.fromVirtualService(o)
		case "DestinationRule":
			s.fromDestinationRule(o)
		}
	}
	var out []*scenario.Object
	for _, h := range sortedKeys(s.hosts) {
		out = append(out, s.service(h)...)
	}
	out = append(out, s.policyWorkloads(portProto)...)
	return append(objs, out...)
}

type synth struct {
	objs  []*scenario.Object
	hosts map[string]*hostNeed
}

// hostNeed is what a synthesized Service must offer.
type hostNeed struct {
	name, ns string
	ports    map[int]string // number -> protocol prefix of the port name
	subsets  []map[string]string
}

func (s *synth) need(host, ns string) *hostNeed {
	fq := resolve(host, ns)
	name, rest, ok := strings.Cut(fq, ".")
	if !ok || !strings.HasSuffix(rest, ".svc.cluster.local") || strings.Contains(fq, "*") {
		return nil
	}
	svcNS := strings.TrimSuffix(rest, ".svc.cluster.local")
	if strings.Contains(svcNS, ".") || s.defined(name, svcNS) {
		return nil
	}
	h := s.hosts[fq]
	if h == nil {
		h = &hostNeed{name: name, ns: svcNS, ports: map[int]string{}}
		s.hosts[fq] = h
	}
	return h
}

func (s *synth) defined(name, ns string) bool {
	for _, o := range s.objs {
		if o.Kind == "Service" && o.Name == name && o.Namespace == ns {
			return true
		}
	}
	return false
}

func (s *synth) fromVirtualService(vs *scenario.Object) {
	spec := vs.Spec()
	for _, section := range []string{"http", "tcp", "tls"} {
		proto := map[string]string{"http": "http", "tcp": "tcp", "tls": "https"}[section]
		for _, ri := range list(spec[section]) {
			r := mapOf(ri)
			var matchPorts []int
			for _, mi := range list(r["match"]) {
				if p := toInt(mapOf(mi)["port"]); p != 0 {
					matchPorts = append(matchPorts, p)
				}
			}
			for _, h := range strs(spec["hosts"]) {
				if n := s.need(h, vs.Namespace); n != nil {
					for _, p := range matchPorts {
						n.ports[p] = proto
					}
				}
			}
			dests := append(list(r["route"]), r["mirror"])
			for _, di := range dests {
				d := mapOf(di)
				if dd := mapOf(d["destination"]); dd != nil {
					d = dd
				}
				h, _ := d["host"].(string)
				if h == "" {
					continue
				}
				if n := s.need(h, vs.Namespace); n != nil {
					if p := toInt(mapOf(d["port"])["number"]); p != 0 {
						n.ports[p] = proto
					}
				}
			}
		}
	}
}

func (s *synth) fromDestinationRule(dr *scenario.Object) {
	spec := dr.Spec()
	h, _ := spec["host"].(string)
	n := s.need(h, dr.Namespace)
	if n == nil {
		return
	}
	for _, si := range list(spec["subsets"]) {
		if l := strMap(mapOf(si)["labels"]); len(l) > 0 {
			n.subsets = append(n.subsets, l)
		}
	}
	for _, pi := range list(mapOf(spec["trafficPolicy"])["portLevelSettings"]) {
		if p := toInt(mapOf(mapOf(pi)["port"])["number"]); p != 0 {
			if _, ok := n.ports[p]; !ok {
				n.ports[p] = "http"
			}
		}
	}
}

// service builds a Service for a host and a Deployment per subset (one
// plain Deployment when there are none).
func (s *synth) service(fq string) []*scenario.Object {
	h := s.hosts[fq]
	if len(h.ports) == 0 {
		h.ports[80] = "http"
	}
	var ports []any
	for _, p := range sortedInts(h.ports) {
		ports = append(ports, map[string]any{"name": fmt.Sprintf("%s-%d", h.ports[p], p), "port": p, "targetPort": p})
	}
	out := []*scenario.Object{object("v1", "Service", h.ns, h.name, map[string]any{
		"selector": map[string]any{"app": h.name}, "ports": ports,
	})}
	subsets := h.subsets
	if len(subsets) == 0 {
		subsets = []map[string]string{{"version": "v1"}}
	}
	for i, l := range subsets {
		labels := map[string]any{"app": h.name}
		for k, v := range l {
			labels[k] = v
		}
		out = append(out, deployment(h.ns, fmt.Sprintf("%s-%d", h.name, i), labels))
	}
	return out
}

// policyWorkloads adds a workload for every selector of a policy or
// Sidecar that selects no workload of the input.
func (s *synth) policyWorkloads(portProto string) []*scenario.Object {
	var out []*scenario.Object
	seen := map[string]bool{}
	for _, o := range s.objs {
		var sel map[string]string
		switch o.Kind {
		case "AuthorizationPolicy", "PeerAuthentication", "RequestAuthentication":
			sel = strMap(mapOf(o.Spec()["selector"])["matchLabels"])
		case "Sidecar":
			sel = strMap(mapOf(o.Spec()["workloadSelector"])["labels"])
		}
		if len(sel) == 0 || s.selects(o.Namespace, sel) {
			continue
		}
		key := o.Namespace + "/" + labelString(sel)
		if seen[key] {
			continue
		}
		seen[key] = true
		name := sel["app"]
		if name == "" {
			name = "workload"
		}
		name = fmt.Sprintf("%s-%d", name, len(seen))
		labels := map[string]any{}
		for k, v := range sel {
			labels[k] = v
		}
		ports := map[int]string{80: portProto}
		for _, p := range policyPorts(s.objs, o.Namespace) {
			ports[p] = portProto
		}
		var sp []any
		for _, p := range sortedInts(ports) {
			sp = append(sp, map[string]any{"name": fmt.Sprintf("%s-%d", ports[p], p), "port": p, "targetPort": p})
		}
		out = append(out, deployment(o.Namespace, name, labels),
			object("v1", "Service", o.Namespace, name, map[string]any{"selector": labels, "ports": sp}))
	}
	return out
}

func (s *synth) selects(ns string, sel map[string]string) bool {
	for _, o := range s.objs {
		if o.Namespace != ns {
			continue
		}
		var labels map[string]string
		switch o.Kind {
		case "Pod":
			labels = o.Labels()
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
			labels = strMap(mapOf(mapOf(o.Spec()["template"])["metadata"])["labels"])
		default:
			continue
		}
		if scenario.SelectorMatches(sel, labels) {
			return true
		}
	}
	return false
}

// policyPorts are the ports AuthorizationPolicies of a namespace name.
func policyPorts(objs []*scenario.Object, ns string) []int {
	var out []int
	for _, o := range objs {
		if o.Kind != "AuthorizationPolicy" || o.Namespace != ns {
			continue
		}
		for _, ri := range list(o.Spec()["rules"]) {
			for _, ti := range list(mapOf(ri)["to"]) {
				for _, p := range strs(mapOf(mapOf(ti)["operation"])["ports"]) {
					if n := toInt(p); n > 0 {
						out = append(out, n)
					}
				}
			}
			for _, ci := range list(mapOf(ri)["when"]) {
				c := mapOf(ci)
				if c["key"] == "destination.port" {
					for _, p := range strs(c["values"]) {
						if n := toInt(p); n > 0 {
							out = append(out, n)
						}
					}
				}
			}
		}
	}
	return out
}

func deployment(ns, name string, labels map[string]any) *scenario.Object {
	return object("apps/v1", "Deployment", ns, name, map[string]any{
		"selector": map[string]any{"matchLabels": labels},
		"template": map[string]any{
			"metadata": map[string]any{"labels": labels},
			"spec":     map[string]any{"serviceAccountName": name, "containers": []any{map[string]any{"name": "app", "image": "app"}}},
		},
	})
}

func object(apiVersion, kind, ns, name string, spec map[string]any) *scenario.Object {
	return &scenario.Object{APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: name, Doc: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

// resolve expands a short host name as Istio does: a name without a dot
// is relative to the config's namespace; any other name is as written.
func resolve(h, ns string) string {
	if strings.Contains(h, ".") || h == "*" {
		return h
	}
	return h + "." + ns + ".svc.cluster.local"
}

func labelString(l map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(l) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedInts(m map[int]string) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func strMap(v any) map[string]string {
	out := map[string]string{}
	for k, x := range mapOf(v) {
		out[k] = fmt.Sprint(x)
	}
	return out
}

func strs(v any) []string {
	var out []string
	for _, x := range list(v) {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func toInt(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case int:
		return x
	case string:
		n := 0
		for _, r := range x {
			if r < '0' || r > '9' {
				return 0
			}
			n = n*10 + int(r-'0')
		}
		return n
	}
	return 0
}
