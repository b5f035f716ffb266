package scenario

import (
	"fmt"
	"sort"
	"strings"
)

// MaxSidecars bounds the sidecars generated for per input.
const MaxSidecars = 3

// nodes picks the proxies of the input: gateways for the pods Gateways
// select, sidecars for the pods policies select and the first pod of each
// namespace, and a proxyless gRPC client where a service serves gRPC.
// An input without any pod gets a client pod of its own.
func (c *completer) nodes() {
	gwPods := map[*Object]bool{}
	for _, gw := range c.in.Of("Gateway") {
		sel := stringMap(gw.Spec()["selector"])
		if gw.Group() == GatewayAPIGroup {
			sel = GatewayAPISelector(gw)
		}
		if len(sel) == 0 {
			continue
		}
		for _, o := range c.in.Objects {
			if o.Kind == "Pod" && SelectorMatches(sel, o.Labels()) && !gwPods[o] && (gw.Group() != GatewayAPIGroup || o.Namespace == gw.Namespace) {
				gwPods[o] = true
				c.in.Nodes = append(c.in.Nodes, nodeFor(Gateway, o))
			}
		}
	}
	var chosen []*Object
	pick := func(o *Object) {
		if len(chosen) >= MaxSidecars || gwPods[o] || !injected(o) {
			return
		}
		for _, x := range chosen {
			if x == o {
				return
			}
		}
		chosen = append(chosen, o)
	}
	for _, o := range c.in.IstioObjects() {
		sel := workloadSelector(o)
		if sel == nil {
			continue
		}
		for _, p := range c.in.Of("Pod") {
			if p.Namespace == o.Namespace && SelectorMatches(sel, p.Labels()) {
				pick(p)
				break
			}
		}
	}
	seenNS := map[string]bool{}
	for _, p := range c.in.Of("Pod") {
		if !seenNS[p.Namespace] && injected(p) && !gwPods[p] {
			seenNS[p.Namespace] = true
			pick(p)
		}
	}
	if len(chosen) == 0 {
		chosen = append(chosen, c.addPod("default", "conformance-client-0",
			map[string]string{"app": "conformance-client", TLSModeLabel: "istio"}, "conformance-client", nil))
	}
	for _, p := range chosen {
		c.in.Nodes = append(c.in.Nodes, nodeFor(Sidecar, p))
	}
	if ns := c.grpcNamespace(); ns != "" {
		// An input may bring its client (app: grpc-client, not injected),
		// to place it on a Node.
		var p *Object
		for _, o := range c.in.Of("Pod") {
			if o.Namespace == ns && o.Labels()["app"] == "grpc-client" && !injected(o) {
				p = o
				break
			}
		}
		if p == nil {
			p = c.addPod(ns, "grpc-client-0", map[string]string{"app": "grpc-client"}, "grpc-client", nil)
		}
		c.in.Nodes = append(c.in.Nodes, nodeFor(GRPC, p))
	}
}

// workloadSelector is the labels an Istio object selects workloads by
// (nil when it selects none in particular).
func workloadSelector(o *Object) map[string]string {
	spec := o.Spec()
	switch o.Kind {
	case "AuthorizationPolicy", "PeerAuthentication", "RequestAuthentication":
		sel, _ := spec["selector"].(map[string]any)
		return stringMap(sel["matchLabels"])
	case "Sidecar", "DestinationRule":
		sel, _ := spec["workloadSelector"].(map[string]any)
		return stringMap(sel["labels"])
	}
	return nil
}

func injected(p *Object) bool {
	return p.Labels()[TLSModeLabel] == "istio"
}

// grpcNamespace is the namespace of the first Service with a gRPC port
// ("" when none has one).
func (c *completer) grpcNamespace() string {
	for _, svc := range c.in.Of("Service") {
		ports, _ := svc.Spec()["ports"].([]any)
		for _, pi := range ports {
			p, _ := pi.(map[string]any)
			name, _ := p["name"].(string)
			ap, _ := p["appProtocol"].(string)
			if name == "grpc" || strings.HasPrefix(name, "grpc-") || ap == "grpc" {
				return svc.Namespace
			}
		}
	}
	return ""
}

func nodeFor(kind NodeKind, pod *Object) *Node {
	spec, _ := pod.Doc["spec"].(map[string]any)
	st, _ := pod.Doc["status"].(map[string]any)
	sa, _ := spec["serviceAccountName"].(string)
	if sa == "" {
		sa = "default"
	}
	ip, _ := st["podIP"].(string)
	labels := pod.Labels()
	typ := "sidecar"
	if kind == Gateway {
		typ = "router"
	}
	workload := pod.Name
	if i := strings.LastIndex(workload, "-"); i > 0 {
		workload = workload[:i]
	}
	meta := map[string]any{
		"NAMESPACE": pod.Namespace, "LABELS": anyMap(labels), "ISTIO_VERSION": IstioVersion,
		"CLUSTER_ID": "Kubernetes", "SERVICE_ACCOUNT": sa, "INSTANCE_IPS": ip,
		"WORKLOAD_NAME": workload, "NAME": pod.Name, "MESH_ID": "cluster.local",
	}
	if kind == GRPC {
		meta["GENERATOR"] = "grpc"
	} else {
		meta["INTERCEPTION_MODE"] = "REDIRECT"
	}
	if node, _ := spec["nodeName"].(string); node != "" {
		meta["NODE_NAME"] = node
	}
	// pilot-agent's locality: the pod's locality label, written back into
	// the labels it sends in the "/" form.
	var loc Locality
	if v := localityLabel(labels); v != "" {
		loc = ParseLocality(v)
		ml := meta["LABELS"].(map[string]any)
		ml["istio-locality"] = strings.TrimSuffix(strings.TrimSuffix(loc.String(), "/"), "/")
	}
	return &Node{
		Kind: kind, ID: typ + "~" + ip + "~" + pod.Name + "." + pod.Namespace + "~" + pod.Namespace + ".svc.cluster.local",
		Meta: meta, Namespace: pod.Namespace, Pod: pod.Name, IP: ip, Labels: labels, ServiceAccount: sa, Locality: loc,
	}
}

// localityLabel is a pod's locality label, as Istio reads it.
func localityLabel(labels map[string]string) string {
	if v, ok := labels["topology.istio.io/locality"]; ok {
		return v
	}
	return labels["istio-locality"]
}

// NodeFromID describes a proxy by its xDS node ID and metadata, as a
// golden case's node.yaml gives them; metadata the ID implies (namespace,
// Istio version, cluster) is filled in when missing.
func NodeFromID(id string, meta map[string]any) (*Node, error) {
	parts := strings.Split(id, "~")
	if len(parts) != 4 {
		return nil, fmt.Errorf("node ID %q: want TYPE~IP~POD.NAMESPACE~DOMAIN", id)
	}
	pod, ns, ok := strings.Cut(parts[2], ".")
	if !ok {
		return nil, fmt.Errorf("node ID %q: %q is not POD.NAMESPACE", id, parts[2])
	}
	m := map[string]any{"NAMESPACE": ns, "ISTIO_VERSION": IstioVersion, "CLUSTER_ID": "Kubernetes"}
	for k, v := range meta {
		m[k] = v
	}
	n := &Node{Kind: Sidecar, ID: id, Meta: m, Namespace: ns, Pod: pod, IP: parts[1], Labels: stringMap(m["LABELS"])}
	if sa, _ := m["SERVICE_ACCOUNT"].(string); sa != "" {
		n.ServiceAccount = sa
	} else {
		n.ServiceAccount = "default"
	}
	switch {
	case parts[0] == "router":
		n.Kind = Gateway
	case m["GENERATOR"] == "grpc":
		n.Kind = GRPC
	}
	return n, nil
}

// SortedNodes returns the nodes in report order.
func (in *Input) SortedNodes() []*Node {
	out := append([]*Node(nil), in.Nodes...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}
