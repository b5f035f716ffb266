// Package scenario is one input of the conformance suite as both control
// planes see it: the Kubernetes and Istio objects, completed the way a
// cluster would complete them (a Pod per workload, EndpointSlices per
// Service, addresses allocated, namespaces present), and the proxies that
// ask for configuration.
//
// In: multi-document YAML as written (Istio samples, pilot fixtures,
// discovery's golden inputs, the suite's own cases).
// Out: an Input whose Objects istiod and discovery both read unchanged, and
// its Nodes (sidecars, gateways, proxyless gRPC clients) with the xDS node
// ID and metadata each proxy would send.
package scenario

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Object is one Kubernetes or Istio object of an input.
type Object struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// Doc is the object as a JSON document, apiVersion and kind included.
	Doc map[string]any
}

// Group is the API group of the object's apiVersion.
func (o *Object) Group() string {
	g, _, ok := strings.Cut(o.APIVersion, "/")
	if !ok {
		return ""
	}
	return g
}

// IsIstio reports whether the object is one of Istio's configuration kinds.
func (o *Object) IsIstio() bool {
	switch o.Group() {
	case "networking.istio.io", "security.istio.io", "telemetry.istio.io", "extensions.istio.io":
		return true
	}
	return false
}

// Spec is the object's spec (nil when it has none).
func (o *Object) Spec() map[string]any {
	s, _ := o.Doc["spec"].(map[string]any)
	return s
}

// Labels are the object's metadata labels.
func (o *Object) Labels() map[string]string {
	md, _ := o.Doc["metadata"].(map[string]any)
	return stringMap(md["labels"])
}

// YAML renders the object as a YAML document.
func (o *Object) YAML() []byte {
	b, err := yaml.Marshal(o.Doc)
	if err != nil {
		// Doc came from YAML: it always marshals.
		panic(err)
	}
	return b
}

// Key names the object: Kind/namespace/name.
func (o *Object) Key() string { return o.Kind + "/" + o.Namespace + "/" + o.Name }

// NodeKind is the kind of proxy a Node is.
type NodeKind string

// The proxies of the suite.
const (
	Sidecar NodeKind = "sidecar"
	Gateway NodeKind = "gateway"
	GRPC    NodeKind = "grpc"
)

// Node is a proxy that connects to the control plane.
type Node struct {
	Kind NodeKind
	// ID is the xDS node ID (TYPE~IP~POD.NS~NS.svc.cluster.local) and
	// Meta its metadata, as Istio's pilot-agent sends them.
	ID   string
	Meta map[string]any
	// The workload behind the proxy.
	Namespace      string
	Pod            string
	IP             string
	Labels         map[string]string
	ServiceAccount string
	// Locality is the xDS node's locality, as pilot-agent sends it: the
	// pod's locality label (istio-locality or topology.istio.io/locality),
	// none for a pod without (the control planes read its Node's).
	Locality Locality
}

// Locality is a region/zone/subzone.
type Locality struct {
	Region, Zone, SubZone string
}

// ParseLocality reads a locality label as pilot-agent does: "." separates
// the parts when there is no "/".
func ParseLocality(v string) Locality {
	if v == "" {
		return Locality{}
	}
	if !strings.Contains(v, "/") {
		v = strings.ReplaceAll(v, ".", "/")
	}
	parts := append(strings.Split(v, "/"), "", "")
	return Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
}

// String is region/zone/subzone ("" for none).
func (l Locality) String() string {
	if l == (Locality{}) {
		return ""
	}
	return l.Region + "/" + l.Zone + "/" + l.SubZone
}

// Name is a short name for reports: kind:namespace/pod.
func (n *Node) Name() string { return string(n.Kind) + ":" + n.Namespace + "/" + n.Pod }

// Principal is the workload's SPIFFE identity.
func (n *Node) Principal() string {
	return "spiffe://cluster.local/ns/" + n.Namespace + "/sa/" + n.ServiceAccount
}

// Input is one scenario of the corpus.
type Input struct {
	// Name identifies the input in reports, e.g. "istio:samples/bookinfo/...".
	Name string
	// Source is the corpus the input came from.
	Source string
	// Objects are what both control planes read.
	Objects []*Object
	// Nodes are the proxies configuration is generated for.
	Nodes []*Node
	// Dropped lists kinds in the input that neither side is given (kinds
	// of other APIs), with counts, for the report.
	Dropped map[string]int
	// Mesh is the MeshConfig text of the input's istio ConfigMap in
	// istio-system ("" for Istio's defaults).
	Mesh string
}

// Of returns the input's objects of a kind.
func (in *Input) Of(kind string) []*Object {
	var out []*Object
	for _, o := range in.Objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// IstioObjects returns the input's Istio objects.
func (in *Input) IstioObjects() []*Object {
	var out []*Object
	for _, o := range in.Objects {
		if o.IsIstio() {
			out = append(out, o)
		}
	}
	return out
}

// KubeObjects returns the input's Kubernetes objects.
func (in *Input) KubeObjects() []*Object {
	var out []*Object
	for _, o := range in.Objects {
		if !o.IsIstio() {
			out = append(out, o)
		}
	}
	return out
}

// Render joins objects as one multi-document YAML stream.
func Render(objs []*Object) string {
	var b bytes.Buffer
	for i, o := range objs {
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(o.YAML())
	}
	return b.String()
}

var docSep = regexp.MustCompile(`(?m)^---[^\n]*$`)

// Parse reads a multi-document YAML stream into objects. Documents
// without apiVersion and kind are skipped; a List's items are read as
// objects.
func Parse(data []byte) ([]*Object, error) {
	var out []*Object
	for i, doc := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if m == nil {
			continue
		}
		objs, err := fromMap(m)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

func fromMap(m map[string]any) ([]*Object, error) {
	av, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	if av == "" || kind == "" {
		return nil, nil
	}
	if kind == "List" {
		items, _ := m["items"].([]any)
		var out []*Object
		for _, it := range items {
			im, ok := it.(map[string]any)
			if !ok {
				continue
			}
			objs, err := fromMap(im)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	return []*Object{{APIVersion: av, Kind: kind, Namespace: ns, Name: name, Doc: m}}, nil
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SelectorMatches reports whether labels carry every key and value of
// selector (an empty selector matches everything).
func SelectorMatches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}
