package model

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Labels Istio reads a workload's locality from, and the topology labels
// it adds to the labels of workloads and proxies (Istio's AugmentLabels),
// which DestinationRule failoverPriority names.
const (
	// LabelTopologyLocality is Istio's pod label that sets a workload's
	// locality (region.zone.subzone or region/zone/subzone); it wins over
	// LabelLocality.
	LabelTopologyLocality = "topology.istio.io/locality"
	LabelTopologyRegion   = "topology.kubernetes.io/region"
	LabelTopologyZone     = "topology.kubernetes.io/zone"
	LabelTopologySubzone  = "topology.istio.io/subzone"
	LabelTopologyCluster  = "topology.istio.io/cluster"
	LabelTopologyNetwork  = "topology.istio.io/network"
	LabelHostname         = "kubernetes.io/hostname"

	// The deprecated Node labels Istio still reads when the GA ones are
	// missing.
	labelBetaRegion = "failure-domain.beta.kubernetes.io/region"
	labelBetaZone   = "failure-domain.beta.kubernetes.io/zone"
)

// ClusterID names the one cluster discovery reads (Istio's default), the
// topology.istio.io/cluster of its workloads.
const ClusterID = "Kubernetes"

// IsZero reports whether the locality is unknown.
func (l Locality) IsZero() bool { return l == Locality{} }

// String is the locality as Istio writes it: region[/zone[/subzone]].
func (l Locality) String() string {
	s := l.Region
	if l.Zone == "" {
		return s
	}
	s += "/" + l.Zone
	if l.Subzone == "" {
		return s
	}
	return s + "/" + l.Subzone
}

// LocalityLabel is the locality a workload's labels set
// (topology.istio.io/locality, else istio-locality), "" for none.
func LocalityLabel(labels map[string]string) string {
	if v, ok := labels[LabelTopologyLocality]; ok {
		return v
	}
	return labels[LabelLocality]
}

// ParseLocality reads a locality label as Istio does: "." separates the
// parts when there is no "/" (Kubernetes labels cannot hold "/"), and
// region, zone and subzone are the first three parts.
func ParseLocality(v string) Locality {
	if v == "" {
		return Locality{}
	}
	if !strings.Contains(v, "/") {
		v = strings.ReplaceAll(v, ".", "/")
	}
	parts := strings.Split(v, "/")
	loc := Locality{Region: parts[0]}
	if len(parts) > 1 {
		loc.Zone = parts[1]
	}
	if len(parts) > 2 {
		loc.Subzone = parts[2]
	}
	return loc
}

// Node is what the mesh needs of a Kubernetes Node: the locality of the
// pods that run on it, from its topology labels.
type Node struct {
	Name     string   `json:"name"`
	Locality Locality `json:"locality"`
}

// Node returns the Node name, or nil.
func (w *World) Node(name string) *Node { return w.nodes[name] }

func convertNode(n *corev1.Node) *Node {
	get := func(ga, beta string) string {
		if v, ok := n.Labels[ga]; ok {
			return v
		}
		return n.Labels[beta]
	}
	return &Node{Name: n.Name, Locality: Locality{
		Region:  get(LabelTopologyRegion, labelBetaRegion),
		Zone:    get(LabelTopologyZone, labelBetaZone),
		Subzone: n.Labels[LabelTopologySubzone],
	}}
}

// podLocality is a pod's locality as istiod reads it: its locality label,
// else the topology labels of its Node. ok is false when neither is
// known (no label and the Node not read, or without topology labels).
func podLocality(p *Pod, node *Node) (Locality, bool) {
	if v := LocalityLabel(p.Labels); v != "" {
		return ParseLocality(v), true
	}
	if node != nil && !node.Locality.IsZero() {
		return node.Locality, true
	}
	return Locality{}, false
}

// PodLocality is the locality of the pod ns/name in w (its locality
// label, else its Node's topology labels), and whether one is known.
func (w *World) PodLocality(p *Pod) (Locality, bool) {
	if p == nil {
		return Locality{}, false
	}
	return podLocality(p, w.nodes[p.Node])
}
