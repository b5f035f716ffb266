package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// ProxyType is the kind of proxy named by the first field of an xDS node ID.
type ProxyType string

// Proxy types Istio's proxies announce.
const (
	// ProxySidecar is a sidecar Envoy or a proxyless gRPC application.
	ProxySidecar ProxyType = "sidecar"
	// ProxyRouter is a gateway Envoy.
	ProxyRouter ProxyType = "router"
)

// GeneratorGRPC is the GENERATOR metadata value of proxyless gRPC clients
// (Istio's grpc-agent and grpc-simple bootstrap templates set it).
const GeneratorGRPC = "grpc"

// NodeIDForm is the expected shape of an xDS node ID, shown in errors.
const NodeIDForm = "TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN with TYPE sidecar or router " +
	"(for example sidecar~10.1.2.3~reviews-v1-7d9f.default~default.svc.cluster.local)"

// Istio's node metadata keys that discovery reads.
const (
	MetaNamespace        = "NAMESPACE"
	MetaLabels           = "LABELS"
	MetaInstanceIPs      = "INSTANCE_IPS"
	MetaServiceAccount   = "SERVICE_ACCOUNT"
	MetaIstioVersion     = "ISTIO_VERSION"
	MetaClusterID        = "CLUSTER_ID"
	MetaGenerator        = "GENERATOR"
	MetaWorkloadName     = "WORKLOAD_NAME"
	MetaName             = "NAME"
	MetaMeshID           = "MESH_ID"
	MetaInterceptionMode = "INTERCEPTION_MODE"
	MetaProxyConfig      = "PROXY_CONFIG"
	MetaNodeName         = "NODE_NAME"
	MetaNetwork          = "NETWORK"
	// MetaAutoRegisterGroup names the WorkloadGroup a VM's proxy asks to
	// be registered in (pilot-agent's ISTIO_META_AUTO_REGISTER_GROUP).
	MetaAutoRegisterGroup = "AUTO_REGISTER_GROUP"
	// MetaWorkloadEntry names an existing WorkloadEntry of the proxy's
	// namespace that stands for it (a VM registered by hand): its health
	// reports then go to that entry.
	MetaWorkloadEntry = "WORKLOAD_ENTRY"
)

// ErrInvalidNode is wrapped by every error ParseProxy returns.
var ErrInvalidNode = errors.New("invalid xDS node")

// NodeError says what is wrong with a node ID or its metadata.
type NodeError struct {
	// Field is "id" or the metadata key at fault.
	Field string
	// Reason says what is wrong, including the expected form.
	Reason string
}

func (e *NodeError) Error() string {
	if e.Field == "id" {
		return "invalid node ID: " + e.Reason
	}
	return fmt.Sprintf("invalid node metadata %s: %s", e.Field, e.Reason)
}

// Unwrap lets errors.Is(err, ErrInvalidNode) match.
func (e *NodeError) Unwrap() error { return ErrInvalidNode }

// ProxyMetadata is the part of Istio's node metadata discovery uses.
type ProxyMetadata struct {
	Namespace        string            `json:"namespace,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	InstanceIPs      []string          `json:"instanceIPs,omitempty"`
	ServiceAccount   string            `json:"serviceAccount,omitempty"`
	IstioVersion     string            `json:"istioVersion,omitempty"`
	ClusterID        string            `json:"clusterID,omitempty"`
	Generator        string            `json:"generator,omitempty"`
	WorkloadName     string            `json:"workloadName,omitempty"`
	Name             string            `json:"name,omitempty"`
	MeshID           string            `json:"meshID,omitempty"`
	InterceptionMode string            `json:"interceptionMode,omitempty"`
	// NodeName is the Kubernetes Node the workload runs on, Network its
	// network (topology labels Istio adds to the proxy's labels).
	NodeName string `json:"nodeName,omitempty"`
	Network  string `json:"network,omitempty"`
	// AutoRegisterGroup is AUTO_REGISTER_GROUP: the WorkloadGroup whose
	// WorkloadEntry this proxy asks the control plane to create.
	AutoRegisterGroup string `json:"autoRegisterGroup,omitempty"`
	// WorkloadEntry is WORKLOAD_ENTRY: the existing entry that stands for
	// this proxy, when it is not auto-registered.
	WorkloadEntry string `json:"workloadEntry,omitempty"`
	// ReadinessProbe is set when PROXY_CONFIG carries a readinessProbe:
	// the agent probes the workload and reports its health over xDS
	// (istiod then marks the auto-registered WorkloadEntry health-checked).
	ReadinessProbe bool `json:"readinessProbe,omitempty"`
	// ProxyConfig is set when the node sends PROXY_CONFIG (pilot-agent
	// does: its ProxyConfig, the mesh's defaultConfig with the pod's
	// proxy.istio.io/config on top); istiod then reads the proxy's
	// configuration from it instead of the mesh's defaultConfig.
	ProxyConfig bool `json:"proxyConfig,omitempty"`
	// Tracing is PROXY_CONFIG's tracing as compact JSON ("" for none):
	// what generation reads of it (the HTTP connection managers' tracing).
	Tracing string `json:"tracing,omitempty"`
	// Raw holds every string-valued metadata entry as sent: EnvoyFilter
	// proxy matches compare them (istiod's Metadata.Raw). Not shown in
	// debug output.
	Raw map[string]string `json:"-"`
}

// Proxy is a connected proxy as its xDS node describes it.
type Proxy struct {
	// ID is the full node ID as sent.
	ID   string    `json:"id"`
	Type ProxyType `json:"type"`
	// IPs are the proxy's addresses: INSTANCE_IPS if given, else the ID's IP.
	IPs []string `json:"ips"`
	// PodName and Namespace come from the ID's POD.NAMESPACE field and the
	// NAMESPACE metadata.
	PodName   string `json:"podName"`
	Namespace string `json:"namespace"`
	// DNSDomain is the ID's last field (NAMESPACE.svc.DOMAIN).
	DNSDomain string `json:"dnsDomain"`
	// ServiceCluster is the xDS node's cluster field (pilot-agent sends
	// APP.NAMESPACE): the service name of the spans a datadog or
	// opentelemetry tracer reports, as istiod names them.
	ServiceCluster string        `json:"serviceCluster,omitempty"`
	Metadata       ProxyMetadata `json:"metadata"`
	// NodeLocality is the xDS node's locality (pilot-agent's, from the
	// workload's locality label or the platform): the proxy's locality
	// when the mesh knows none from its labels or its Node (gen's
	// proxyTopology).
	NodeLocality Locality `json:"nodeLocality,omitzero"`
}

// IsGRPC reports whether the proxy is a proxyless gRPC application.
func (p *Proxy) IsGRPC() bool { return p.Metadata.Generator == GeneratorGRPC }

// Labels are the workload's labels from the LABELS metadata.
func (p *Proxy) Labels() map[string]string { return p.Metadata.Labels }

// Class names what a proxy's outbound configuration depends on besides the
// World: proxies of one class get the same clusters, endpoints, routes and
// outbound listeners, so that configuration is generated once per class.
func (p *Proxy) Class() string {
	gen := p.Metadata.Generator
	if gen == "" {
		gen = "envoy"
	}
	cls := string(p.Type) + "/" + gen + "/" + p.Namespace + "/" + majorMinor(p.Metadata.IstioVersion)
	if p.Type == ProxyRouter {
		// Gateways are selected by their labels.
		cls += "/" + labelString(p.Metadata.Labels)
	}
	return cls
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + l[k])
	}
	return b.String()
}

// ParseProxy reads a proxy's identity from its xDS node ID and metadata (the
// node's metadata Struct as a map, as structpb.Struct.AsMap returns it). An
// error wraps ErrInvalidNode and shows the expected form.
func ParseProxy(id string, meta map[string]any) (*Proxy, error) {
	p, err := parseNodeID(id)
	if err != nil {
		return nil, err
	}
	if err := parseMetadata(&p.Metadata, meta); err != nil {
		return nil, err
	}
	md := &p.Metadata
	switch {
	case md.Namespace == "":
		md.Namespace = p.Namespace
	case md.Namespace != p.Namespace:
		return nil, &NodeError{Field: MetaNamespace, Reason: fmt.Sprintf(
			"%q differs from the namespace %q in the node ID; expected the node ID's NAMESPACE", md.Namespace, p.Namespace)}
	}
	if len(md.InstanceIPs) > 0 {
		p.IPs = md.InstanceIPs
	}
	return p, nil
}

func parseNodeID(id string) (*Proxy, error) {
	bad := func(why string) error {
		return &NodeError{Field: "id", Reason: fmt.Sprintf("%q: %s; expected %s", Clip(id), why, NodeIDForm)}
	}
	parts := strings.Split(id, "~")
	if len(parts) != 4 {
		return nil, bad(fmt.Sprintf("has %d fields separated by ~, want 4", len(parts)))
	}
	p := &Proxy{ID: id, Type: ProxyType(parts[0]), DNSDomain: parts[3]}
	if p.Type != ProxySidecar && p.Type != ProxyRouter {
		return nil, bad(fmt.Sprintf("type %q is neither sidecar nor router", parts[0]))
	}
	ip, err := netip.ParseAddr(parts[1])
	if err != nil {
		return nil, bad(fmt.Sprintf("%q is not an IP address", parts[1]))
	}
	p.IPs = []string{ip.String()}
	pod, ns, ok := strings.Cut(parts[2], ".")
	if !ok || pod == "" || ns == "" || strings.Contains(ns, ".") {
		return nil, bad(fmt.Sprintf("%q is not POD.NAMESPACE", parts[2]))
	}
	p.PodName, p.Namespace = pod, ns
	if !strings.HasPrefix(parts[3], ns+".svc.") || len(parts[3]) == len(ns)+len(".svc.") {
		return nil, bad(fmt.Sprintf("%q is not %s.svc.DOMAIN", parts[3], ns))
	}
	return p, nil
}

func parseMetadata(md *ProxyMetadata, meta map[string]any) error {
	for k, v := range meta {
		if s, ok := v.(string); ok {
			if md.Raw == nil {
				md.Raw = map[string]string{}
			}
			md.Raw[k] = s
		}
	}
	strs := map[string]*string{
		MetaNamespace: &md.Namespace, MetaServiceAccount: &md.ServiceAccount,
		MetaIstioVersion: &md.IstioVersion, MetaClusterID: &md.ClusterID,
		MetaGenerator: &md.Generator, MetaWorkloadName: &md.WorkloadName,
		MetaName: &md.Name, MetaMeshID: &md.MeshID, MetaInterceptionMode: &md.InterceptionMode,
		MetaNodeName: &md.NodeName, MetaNetwork: &md.Network, MetaAutoRegisterGroup: &md.AutoRegisterGroup,
		MetaWorkloadEntry: &md.WorkloadEntry,
	}
	for key, dst := range strs {
		v, ok := meta[key]
		if !ok || v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return &NodeError{Field: key, Reason: fmt.Sprintf("is a %s, expected a string", jsonKind(v))}
		}
		*dst = s
	}
	if v, ok := meta[MetaLabels]; ok && v != nil {
		labels, err := parseLabels(v)
		if err != nil {
			return err
		}
		md.Labels = labels
	}
	if v, ok := meta[MetaInstanceIPs]; ok && v != nil {
		ips, err := parseInstanceIPs(v)
		if err != nil {
			return err
		}
		md.InstanceIPs = ips
	}
	if v, ok := meta[MetaProxyConfig]; ok && v != nil {
		pc, ok := v.(map[string]any)
		if !ok {
			return &NodeError{Field: MetaProxyConfig, Reason: fmt.Sprintf("is a %s, expected an object (a ProxyConfig)", jsonKind(v))}
		}
		md.ProxyConfig = true
		if rp, ok := pc["readinessProbe"]; ok && rp != nil {
			md.ReadinessProbe = true
		}
		if t, ok := pc["tracing"]; ok && t != nil {
			b, err := json.Marshal(t)
			if err != nil {
				return &NodeError{Field: MetaProxyConfig, Reason: "tracing: " + err.Error()}
			}
			md.Tracing = string(b)
		}
	}
	return nil
}

func parseLabels(v any) (map[string]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &NodeError{Field: MetaLabels, Reason: fmt.Sprintf(
			"is a %s, expected an object of string values ({\"app\": \"reviews\"})", jsonKind(v))}
	}
	out := make(map[string]string, len(m))
	for k, lv := range m {
		s, ok := lv.(string)
		if !ok {
			return nil, &NodeError{Field: MetaLabels, Reason: fmt.Sprintf(
				"label %q is a %s, expected a string", k, jsonKind(lv))}
		}
		out[k] = s
	}
	return out, nil
}

func parseInstanceIPs(v any) ([]string, error) {
	s, ok := v.(string)
	if !ok {
		return nil, &NodeError{Field: MetaInstanceIPs, Reason: fmt.Sprintf(
			"is a %s, expected a comma-separated string of IP addresses", jsonKind(v))}
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ip, err := netip.ParseAddr(f)
		if err != nil {
			return nil, &NodeError{Field: MetaInstanceIPs, Reason: fmt.Sprintf(
				"%q is not an IP address; expected a comma-separated string of IP addresses", f)}
		}
		out = append(out, ip.String())
	}
	return out, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "list"
	}
	return fmt.Sprintf("%T", v)
}

// Clip shortens an untrusted string from a node (its ID, a metadata
// value, an error that quotes them) for a log line, marking what was cut:
// a node ID may be up to the server's bound long, and a log line per
// refused stream must not copy it whole.
func Clip(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s...(%d bytes)", s[:max], len(s))
}
