package scenario

import (
	"fmt"
	"strings"
)

// IstioVersion is the version the suite's proxies announce.
const IstioVersion = "1.32.0"

// TLSModeLabel is the label injection puts on pods with a sidecar.
const TLSModeLabel = "security.istio.io/tlsMode"

// kept are the Kubernetes kinds both control planes are given, by group.
var kept = map[string]map[string]bool{
	"":                 {"Namespace": true, "Service": true, "Pod": true, "Node": true},
	"discovery.k8s.io": {"EndpointSlice": true},
}

// gatewayAPIKinds are the Gateway API kinds both sides are given, for the
// inputs of gatewayAPISources only: the suite's cases and discovery's
// goldens. Istio's own fixtures and samples keep dropping them until
// their verdicts are reviewed (many use kinds and features discovery
// does not translate yet).
var (
	gatewayAPIKinds   = map[string]bool{"GatewayClass": true, "Gateway": true, "HTTPRoute": true, "GRPCRoute": true, "TCPRoute": true, "TLSRoute": true, "ReferenceGrant": true}
	gatewayAPISources = map[string]bool{"conformance cases": true, "discovery goldens": true}
)

// workloads are the kinds a Pod is made from.
var workloads = map[string]bool{"Deployment": true, "StatefulSet": true, "DaemonSet": true, "ReplicaSet": true}

// Complete turns objects as written into an Input: what a cluster would
// hold once they are applied, and the proxies to generate for: nodes
// when given, else those the input's workloads and Gateways call for.
func Complete(name, source string, objs []*Object, nodes []*Node) *Input {
	c := &completer{in: &Input{Name: name, Source: source, Dropped: map[string]int{}}}
	for _, o := range latest(objs) {
		c.add(o)
	}
	c.namespaces()
	if nodes == nil {
		c.gatewayPods()
	}
	c.services()
	c.zones()
	c.podStatus()
	if nodes == nil {
		c.nodes()
	} else {
		c.in.Nodes = nodes
	}
	return c.in
}

// latest keeps the last of objects with the same key, as applying the
// files in order would.
func latest(objs []*Object) []*Object {
	last := map[string]int{}
	for i, o := range objs {
		ns := o.Namespace
		if ns == "" && o.Kind != "Namespace" {
			ns = "default"
		}
		last[o.APIVersion+"/"+o.Kind+"/"+ns+"/"+o.Name] = i
	}
	var out []*Object
	for i, o := range objs {
		ns := o.Namespace
		if ns == "" && o.Kind != "Namespace" {
			ns = "default"
		}
		if last[o.APIVersion+"/"+o.Kind+"/"+ns+"/"+o.Name] == i {
			out = append(out, o)
		}
	}
	return out
}

type completer struct {
	in     *Input
	pods   int
	svcIPs int
}

func (c *completer) add(o *Object) {
	if o.Kind != "Namespace" && o.Kind != "Node" && o.Namespace == "" {
		o.Namespace = "default"
		o.Doc["metadata"].(map[string]any)["namespace"] = "default"
	}
	switch {
	case o.Kind == "ConfigMap" && o.APIVersion == "v1" && o.Namespace == "istio-system" && o.Name == "istio":
		data, _ := o.Doc["data"].(map[string]any)
		c.in.Mesh, _ = data["mesh"].(string)
	case o.IsIstio():
		c.in.Objects = append(c.in.Objects, o)
	case o.Group() == GatewayAPIGroup && gatewayAPIKinds[o.Kind] && gatewayAPISources[c.in.Source]:
		c.in.Objects = append(c.in.Objects, o)
	case kept[o.Group()][o.Kind] && (o.Group() != "" || o.APIVersion == "v1"):
		if o.Kind == "Pod" {
			c.pods++
		}
		c.in.Objects = append(c.in.Objects, o)
	case workloads[o.Kind] && strings.HasPrefix(o.APIVersion, "apps/"):
		c.podFromWorkload(o)
	default:
		c.in.Dropped[o.APIVersion+"/"+o.Kind]++
	}
}

// podFromWorkload adds the one Pod a workload runs, as injection leaves
// it: its template's labels plus the sidecar's tlsMode label (unless the
// template opts out of injection), running and ready.
func (c *completer) podFromWorkload(o *Object) {
	spec := o.Spec()
	tmpl, _ := spec["template"].(map[string]any)
	tmd, _ := tmpl["metadata"].(map[string]any)
	labels := stringMap(tmd["labels"])
	if labels == nil {
		labels = map[string]string{}
	}
	annotations := stringMap(tmd["annotations"])
	podSpec, _ := tmpl["spec"].(map[string]any)
	if podSpec == nil {
		podSpec = map[string]any{}
	}
	injected := annotations["sidecar.istio.io/inject"] != "false" && labels["sidecar.istio.io/inject"] != "false"
	if injected {
		labels[TLSModeLabel] = "istio"
	}
	sa, _ := podSpec["serviceAccountName"].(string)
	if sa == "" {
		sa = "default"
	}
	c.addPod(o.Namespace, o.Name+"-0", labels, sa, podSpec)
}

// addPod adds a running, ready Pod with the next free address.
func (c *completer) addPod(ns, name string, labels map[string]string, sa string, podSpec map[string]any) *Object {
	ip := fmt.Sprintf("10.240.%d.%d", c.pods/200, c.pods%200+10)
	c.pods++
	spec := map[string]any{}
	for k, v := range podSpec {
		spec[k] = v
	}
	spec["serviceAccountName"] = sa
	if _, ok := spec["containers"]; !ok {
		spec["containers"] = []any{map[string]any{"name": "app", "image": "app"}}
	}
	doc := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": anyMap(labels)},
		"spec":     spec,
		"status": map[string]any{
			"phase": "Running", "podIP": ip, "podIPs": []any{map[string]any{"ip": ip}},
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}},
		},
	}
	p := &Object{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name, Doc: doc}
	c.in.Objects = append(c.in.Objects, p)
	return p
}

// namespaces adds a Namespace for every namespace an object is in, and
// istio-system.
func (c *completer) namespaces() {
	have := map[string]bool{}
	for _, o := range c.in.Objects {
		if o.Kind == "Namespace" {
			have[o.Name] = true
		}
	}
	want := map[string]bool{"istio-system": true}
	for _, o := range c.in.Objects {
		if o.Kind != "Namespace" && o.Kind != "Node" {
			want[o.Namespace] = true
		}
	}
	for _, ns := range sortedKeys(want) {
		if have[ns] {
			continue
		}
		c.in.Objects = append(c.in.Objects, &Object{APIVersion: "v1", Kind: "Namespace", Name: ns, Doc: map[string]any{
			"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": ns, "labels": map[string]any{"kubernetes.io/metadata.name": ns}},
		}})
	}
}

// gatewayPorts is istioctl's default install's Service port -> container
// port for the ingress and egress gateways; helmPorts is Istio's gateway
// chart's (the same port), used for gateways of other selectors.
var (
	gatewayPorts = [][3]any{{"status-port", 15021, 15021}, {"http2", 80, 8080}, {"https", 443, 8443}}
	helmPorts    = [][3]any{{"status-port", 15021, 15021}, {"http2", 80, 80}, {"https", 443, 443}}
)

// gatewayPods adds, for every Gateway selector no Pod matches, a gateway
// Pod in istio-system with those labels and a Service in front of it as
// Istio's default install has (80 -> 8080, 443 -> 8443).
func (c *completer) gatewayPods() {
	c.gatewayAPIPods()
	seen := map[string]bool{}
	for _, gw := range c.in.Of("Gateway") {
		if gw.Group() != "networking.istio.io" {
			continue
		}
		sel := stringMap(gw.Spec()["selector"])
		if len(sel) == 0 {
			continue
		}
		key := labelString(sel)
		if seen[key] || c.podMatching(sel) != nil {
			seen[key] = true
			continue
		}
		seen[key] = true
		name := "gateway-" + strings.ReplaceAll(strings.Join(mapValues(sel), "-"), ".", "-")
		portMap := helmPorts
		if sel["istio"] == "ingressgateway" || sel["istio"] == "egressgateway" {
			name, portMap = "istio-"+sel["istio"], gatewayPorts
		}
		for c.has("Service", "istio-system", name) || c.entryHost(name+".istio-system.svc.cluster.local") {
			name += "-x"
		}
		labels := map[string]string{"app": name, "sidecar.istio.io/inject": "false"}
		for k, v := range sel {
			labels[k] = v
		}
		c.addPod("istio-system", name+"-0", labels, name+"-service-account",
			map[string]any{"containers": []any{map[string]any{"name": "istio-proxy", "image": "proxyv2"}}})
		var ports []any
		for _, p := range portMap {
			ports = append(ports, map[string]any{"name": p[0], "port": p[1], "targetPort": p[2], "protocol": "TCP"})
		}
		c.in.Objects = append(c.in.Objects, &Object{APIVersion: "v1", Kind: "Service", Namespace: "istio-system", Name: name, Doc: map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": "istio-system", "labels": anyMap(sel)},
			"spec":     map[string]any{"selector": anyMap(sel), "ports": ports},
		}})
	}
}

func (c *completer) has(kind, ns, name string) bool {
	for _, o := range c.in.Objects {
		if o.Kind == kind && o.Namespace == ns && o.Name == name {
			return true
		}
	}
	return false
}

// entryHost reports whether a ServiceEntry of the input declares host.
func (c *completer) entryHost(host string) bool {
	for _, o := range c.in.Objects {
		if o.Kind != "ServiceEntry" {
			continue
		}
		hosts, _ := o.Spec()["hosts"].([]any)
		for _, h := range hosts {
			if h == host {
				return true
			}
		}
	}
	return false
}

func (c *completer) podMatching(sel map[string]string) *Object {
	for _, o := range c.in.Objects {
		if o.Kind == "Pod" && SelectorMatches(sel, o.Labels()) {
			return o
		}
	}
	return nil
}

// services gives every Service without an address one, and every Service
// with a selector and no EndpointSlice the slice the endpoint slice
// controller would write.
func (c *completer) services() {
	sliced := map[string]bool{}
	for _, o := range c.in.Of("EndpointSlice") {
		sliced[o.Namespace+"/"+o.Labels()["kubernetes.io/service-name"]] = true
	}
	for _, svc := range c.in.Of("Service") {
		spec := svc.Spec()
		if spec == nil {
			spec = map[string]any{}
			svc.Doc["spec"] = spec
		}
		defaultTargetPorts(spec)
		if t, _ := spec["type"].(string); t == "ExternalName" {
			continue
		}
		if ip, _ := spec["clusterIP"].(string); ip == "" {
			ip = fmt.Sprintf("10.100.%d.%d", c.svcIPs/200, c.svcIPs%200+10)
			c.svcIPs++
			spec["clusterIP"] = ip
			spec["clusterIPs"] = []any{ip}
		}
		sel := stringMap(spec["selector"])
		if len(sel) == 0 || sliced[svc.Namespace+"/"+svc.Name] {
			continue
		}
		if es := c.slice(svc, sel); es != nil {
			c.in.Objects = append(c.in.Objects, es)
		}
	}
}

// defaultTargetPorts gives every port of a Service spec without a
// targetPort its port number, as the API server's defaulting does: both
// control planes read Services as a cluster holds them, and istiod's fake
// client, which does no defaulting, would otherwise see targetPort 0 and
// give the pods behind the Service no inbound ports for it.
func defaultTargetPorts(spec map[string]any) {
	ports, _ := spec["ports"].([]any)
	for _, sp := range ports {
		if p, ok := sp.(map[string]any); ok && p["targetPort"] == nil && p["port"] != nil {
			p["targetPort"] = p["port"]
		}
	}
}

func (c *completer) slice(svc *Object, sel map[string]string) *Object {
	svcPorts, _ := svc.Spec()["ports"].([]any)
	var pods []*Object
	for _, o := range c.in.Objects {
		if o.Kind == "Pod" && o.Namespace == svc.Namespace && SelectorMatches(sel, o.Labels()) {
			pods = append(pods, o)
		}
	}
	var ports, endpoints []any
	for _, sp := range svcPorts {
		p, _ := sp.(map[string]any)
		target := resolveTarget(p, pods)
		if target == 0 {
			continue
		}
		ep := map[string]any{"port": target, "protocol": "TCP"}
		if n, _ := p["name"].(string); n != "" || len(svcPorts) == 1 {
			ep["name"] = n
		}
		if ap, ok := p["appProtocol"]; ok {
			ep["appProtocol"] = ap
		}
		ports = append(ports, ep)
	}
	for _, pod := range pods {
		st, _ := pod.Doc["status"].(map[string]any)
		ip, _ := st["podIP"].(string)
		if ip == "" {
			continue
		}
		endpoints = append(endpoints, map[string]any{
			"addresses":  []any{ip},
			"conditions": map[string]any{"ready": true, "serving": true, "terminating": false},
			"targetRef":  map[string]any{"kind": "Pod", "name": pod.Name, "namespace": pod.Namespace},
		})
	}
	name := svc.Name + "-conformance"
	return &Object{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice", Namespace: svc.Namespace, Name: name, Doc: map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{"name": name, "namespace": svc.Namespace,
			"labels": map[string]any{"kubernetes.io/service-name": svc.Name, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
		"addressType": "IPv4", "ports": ports, "endpoints": endpoints,
	}}
}

// resolveTarget is a Service port's target port number: the number
// itself, the port when unset, or a named container port of the pods.
// zones gives the pods behind EndpointSlice endpoints with a zone the
// Node the slice controller read that zone from: istiod reads a pod's
// locality from its Node, discovery from the slice.
func (c *completer) zones() {
	nodes := map[string]bool{}
	for _, o := range c.in.Of("Node") {
		nodes[o.Name] = true
	}
	for _, es := range c.in.Of("EndpointSlice") {
		eps, _ := es.Doc["endpoints"].([]any)
		for _, e := range eps {
			em, _ := e.(map[string]any)
			zone, _ := em["zone"].(string)
			ref, _ := em["targetRef"].(map[string]any)
			if zone == "" || ref == nil {
				continue
			}
			node := "node-" + zone
			if nodes[node] == false {
				nodes[node] = true
				c.in.Objects = append(c.in.Objects, &Object{APIVersion: "v1", Kind: "Node", Name: node, Doc: map[string]any{
					"apiVersion": "v1", "kind": "Node",
					"metadata": map[string]any{"name": node, "labels": map[string]any{
						"topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": node}},
				}})
			}
			if _, ok := em["nodeName"]; !ok {
				em["nodeName"] = node
			}
			for _, p := range c.in.Of("Pod") {
				spec, _ := p.Doc["spec"].(map[string]any)
				if p.Name == ref["name"] && p.Namespace == es.Namespace && spec != nil && spec["nodeName"] == nil {
					spec["nodeName"] = node
				}
			}
		}
	}
}

// podStatus completes the status of a Pod given with an address but no
// phase or readiness as the kubelet reports it: Running, Ready as its
// EndpointSlice endpoint says (true when no slice names it). istiod's
// view of a Pod without them depends on the order its informers see
// things.
func (c *completer) podStatus() {
	ready := map[string]bool{}
	for _, es := range c.in.Of("EndpointSlice") {
		eps, _ := es.Doc["endpoints"].([]any)
		for _, e := range eps {
			em, _ := e.(map[string]any)
			ref, _ := em["targetRef"].(map[string]any)
			cond, _ := em["conditions"].(map[string]any)
			if ref == nil {
				continue
			}
			r, ok := cond["ready"].(bool)
			ready[es.Namespace+"/"+fmt.Sprint(ref["name"])] = !ok || r
		}
	}
	for _, p := range c.in.Of("Pod") {
		st, _ := p.Doc["status"].(map[string]any)
		if st == nil || st["podIP"] == nil {
			continue
		}
		if st["phase"] == nil {
			st["phase"] = "Running"
		}
		if st["conditions"] == nil {
			r, ok := ready[p.Namespace+"/"+p.Name]
			status := "True"
			if ok && !r {
				status = "False"
			}
			st["conditions"] = []any{map[string]any{"type": "Ready", "status": status}}
		}
	}
}

func resolveTarget(p map[string]any, pods []*Object) int {
	port := toInt(p["port"])
	switch t := p["targetPort"].(type) {
	case nil:
		return port
	case string:
		if n := toInt(t); n > 0 {
			return n
		}
		for _, pod := range pods {
			spec, _ := pod.Doc["spec"].(map[string]any)
			cs, _ := spec["containers"].([]any)
			for _, ci := range cs {
				cm, _ := ci.(map[string]any)
				cps, _ := cm["ports"].([]any)
				for _, cp := range cps {
					m, _ := cp.(map[string]any)
					if m["name"] == t {
						return toInt(m["containerPort"])
					}
				}
			}
		}
		return 0
	default:
		return toInt(t)
	}
}

func toInt(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case int:
		return x
	case int64:
		return int(x)
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

func labelString(l map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(l) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

func mapValues(l map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(l) {
		out = append(out, l[k])
	}
	return out
}

// gatewayAPIPods adds, for every Gateway API Gateway without pods, what
// Istio's automated deployment creates: a Pod labelled
// gateway.networking.k8s.io/gateway-name=<name> in the Gateway's namespace
// and the Service <name>-<class> in front of it, one port per listener.
func (c *completer) gatewayAPIPods() {
	for _, gw := range c.in.Of("Gateway") {
		if gw.Group() != GatewayAPIGroup {
			continue
		}
		sel := GatewayAPISelector(gw)
		if c.podMatching(sel) != nil {
			continue
		}
		class, _ := gw.Spec()["gatewayClassName"].(string)
		name := gw.Name + "-" + class
		labels := map[string]string{"sidecar.istio.io/inject": "false", "istio.io/gateway-name": gw.Name}
		for k, v := range sel {
			labels[k] = v
		}
		c.addPod(gw.Namespace, name+"-0", labels, name,
			map[string]any{"containers": []any{map[string]any{"name": "istio-proxy", "image": "proxyv2"}}})
		var ports []any
		seen := map[any]bool{}
		listeners, _ := gw.Spec()["listeners"].([]any)
		for _, li := range listeners {
			l, _ := li.(map[string]any)
			if seen[l["port"]] {
				continue
			}
			seen[l["port"]] = true
			ports = append(ports, map[string]any{"name": fmt.Sprint(l["name"]), "port": l["port"], "targetPort": l["port"], "protocol": "TCP"})
		}
		c.in.Objects = append(c.in.Objects, &Object{APIVersion: "v1", Kind: "Service", Namespace: gw.Namespace, Name: name, Doc: map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": gw.Namespace, "labels": anyMap(sel)},
			"spec":     map[string]any{"selector": anyMap(sel), "ports": ports},
		}})
	}
}

// GatewayAPIGroup is the Kubernetes Gateway API's group.
const GatewayAPIGroup = "gateway.networking.k8s.io"

// GatewayAPISelector is the labels of a Gateway API Gateway's pods, as
// Istio's automated deployment sets them.
func GatewayAPISelector(gw *Object) map[string]string {
	return map[string]string{"gateway.networking.k8s.io/gateway-name": gw.Name}
}
