package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// annotationLastApplied is kubectl's copy of the whole object: as large as
// the object itself and never read by the mesh.
const annotationLastApplied = corev1.LastAppliedConfigAnnotation

// stripObject is the informer transform of every kind: it drops
// metadata.managedFields and kubectl's last-applied annotation, which the
// mesh never reads, and trims Pods further (see stripPod). client-go runs
// it before the object enters the informer cache, on an object nobody else
// holds, so it changes the object in place. Nodes keep their topology
// labels only (stripNode).
func stripObject(obj any) (any, error) {
	if acc, err := meta.Accessor(obj); err == nil {
		acc.SetManagedFields(nil)
		if ann := acc.GetAnnotations(); ann[annotationLastApplied] != "" {
			delete(ann, annotationLastApplied)
			acc.SetAnnotations(ann)
		}
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		stripPod(o)
	case *corev1.Node:
		stripNode(o)
	}
	return obj, nil
}

// stripCAConfigMap keeps a ConfigMap's name and its CA keys
// (model.CAConfigMapData): whatever else a ConfigMap holds is never
// cached.
func stripCAConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil // a tombstone
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace, ResourceVersion: cm.ResourceVersion, UID: cm.UID},
		Data:       model.CAConfigMapData(cm.Data),
	}, nil
}

// stripNode keeps a Node's name and topology labels (region, zone,
// subzone: the locality of its pods); its status (images, conditions,
// addresses) is most of a Node and never read.
func stripNode(n *corev1.Node) {
	keep := map[string]string{}
	for _, k := range []string{
		"topology.kubernetes.io/region", "topology.kubernetes.io/zone", "topology.istio.io/subzone",
		"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
	} {
		if v, ok := n.Labels[k]; ok {
			keep[k] = v
		}
	}
	n.Labels, n.Annotations, n.OwnerReferences = keep, nil, nil
	n.Spec = corev1.NodeSpec{}
	n.Status = corev1.NodeStatus{}
}

// stripPod keeps what model.Pod and Istio's view of a workload need: name,
// namespace, labels, owner references, Istio's own annotations
// (*istio.io/*), the service account, node, host networking, each
// container's name and ports (init containers too, for native sidecars),
// and the status phase, IPs and Ready condition. Everything else goes:
// other annotations, volumes, env, commands, images, resources, probes,
// security contexts, scheduling constraints, container statuses and the
// messages and timestamps of conditions. A Pod of a typical Deployment
// shrinks to a few hundred bytes.
func stripPod(p *corev1.Pod) {
	p.Annotations = istioAnnotations(p.Annotations)
	p.Spec = corev1.PodSpec{
		ServiceAccountName: p.Spec.ServiceAccountName,
		NodeName:           p.Spec.NodeName,
		HostNetwork:        p.Spec.HostNetwork,
		Containers:         stripContainers(p.Spec.Containers),
		InitContainers:     stripContainers(p.Spec.InitContainers),
	}
	var conds []corev1.PodCondition
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			conds = append(conds, corev1.PodCondition{Type: c.Type, Status: c.Status})
		}
	}
	p.Status = corev1.PodStatus{
		Phase:      p.Status.Phase,
		PodIP:      p.Status.PodIP,
		PodIPs:     p.Status.PodIPs,
		HostIP:     p.Status.HostIP,
		Conditions: conds,
	}
}

func stripContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy}
	}
	return out
}

func istioAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.Contains(k, "istio.io/") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// stripCRD is the transform of the CRD informer. The source needs only a
// CRD's name, group, plural, served versions, conditions and deletion
// mark: the OpenAPI schemas (tens of KB per Istio CRD) go, and CRDs of
// other APIs keep nothing but their metadata.
func stripCRD(interesting func(name string) bool) func(any) (any, error) {
	return func(obj any) (any, error) {
		crd, ok := obj.(*apiextv1.CustomResourceDefinition)
		if !ok {
			return obj, nil
		}
		crd.ManagedFields = nil
		crd.Annotations = nil
		if !interesting(crd.Name) {
			crd.Spec = apiextv1.CustomResourceDefinitionSpec{}
			crd.Status = apiextv1.CustomResourceDefinitionStatus{}
			return crd, nil
		}
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].Schema = nil
			crd.Spec.Versions[i].AdditionalPrinterColumns = nil
		}
		crd.Spec.Conversion = nil
		crd.Status.AcceptedNames = apiextv1.CustomResourceDefinitionNames{}
		for i := range crd.Status.Conditions {
			crd.Status.Conditions[i].Message = ""
		}
		return crd, nil
	}
}
