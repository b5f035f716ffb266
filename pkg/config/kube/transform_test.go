package kube

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// fullPod looks like a Pod of an injected Deployment, as the API server
// returns it.
func fullPod() *corev1.Pod {
	p := testPod("shop", "reviews-7d9f", "10.0.0.7")
	p.Annotations = map[string]string{
		"sidecar.istio.io/status":                  `{"initContainers":["istio-init"],"containers":["istio-proxy"]}`,
		"kubectl.kubernetes.io/restartedAt":        "2026-01-01T00:00:00Z",
		"prometheus.io/scrape":                     "true",
		corev1.LastAppliedConfigAnnotation:         `{"apiVersion":"v1","kind":"Pod"}`,
		"kubernetes.io/psp":                        "restricted",
		"istio.io/rev":                             "default",
		"traffic.sidecar.istio.io/excludeOutbound": "10.0.0.1/32",
	}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "reviews-7d9f"}}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{}}}`)},
	}}
	p.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}}
	p.Spec.InitContainers = []corev1.Container{{Name: "istio-init", Image: "proxyv2", Args: []string{"istio-iptables", "-p", "15001"}}}
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}}
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	proxy := corev1.Container{
		Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.32.0",
		Args:           []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local", "--proxyLogLevel=warning"},
		Ports:          []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready"}}},
	}
	// An injected sidecar carries about twenty environment variables and
	// half a dozen volume mounts.
	for i := range 20 {
		proxy.Env = append(proxy.Env, corev1.EnvVar{Name: fmt.Sprintf("ISTIO_META_SETTING_%d", i), Value: "some-value-of-moderate-length"})
	}
	for _, v := range []string{"workload-socket", "credential-socket", "workload-certs", "istio-envoy", "istio-data", "istio-podinfo", "istio-token", "istiod-ca-cert"} {
		proxy.VolumeMounts = append(proxy.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/var/run/" + v})
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	p.Spec.Containers = append(p.Spec.Containers, proxy)
	p.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}}
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = "192.168.0.10"
	p.Status.Conditions = append(p.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Message: "scheduled"})
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "reviews:v1", ImageID: "sha256:abc"}}
	return p
}

func TestStripPodKeepsWhatTheMeshReads(t *testing.T) {
	full := fullPod()
	stripped := full.DeepCopy()
	if _, err := stripObject(stripped); err != nil {
		t.Fatal(err)
	}

	before, after := model.NewStore(model.StoreOptions{}), model.NewStore(model.StoreOptions{})
	for store, p := range map[*model.Store]*corev1.Pod{before: full, after: stripped} {
		if _, err := store.Apply(model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindPod, Namespace: p.Namespace, Name: p.Name}, Object: p}); err != nil {
			t.Fatal(err)
		}
	}
	want, got := before.World().Pod("shop", "reviews-7d9f"), after.World().Pod("shop", "reviews-7d9f")
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("the model sees a different Pod after stripping:\nfull:     %+v\nstripped: %+v", want, got)
	}

	if stripped.ManagedFields != nil || stripped.Spec.Volumes != nil || stripped.Spec.Tolerations != nil ||
		stripped.Status.ContainerStatuses != nil || stripped.Spec.Containers[0].Env != nil || stripped.Spec.InitContainers[0].Args != nil {
		t.Errorf("fields the mesh does not read survived: %+v", stripped)
	}
	wantAnn := map[string]string{
		"sidecar.istio.io/status":                  full.Annotations["sidecar.istio.io/status"],
		"istio.io/rev":                             "default",
		"traffic.sidecar.istio.io/excludeOutbound": "10.0.0.1/32",
	}
	if !reflect.DeepEqual(stripped.Annotations, wantAnn) {
		t.Errorf("annotations = %v, want only Istio's: %v", stripped.Annotations, wantAnn)
	}
	if len(stripped.OwnerReferences) != 1 || stripped.Status.Phase != corev1.PodRunning || len(stripped.Status.Conditions) != 1 {
		t.Errorf("owner, phase or Ready condition lost: %+v", stripped)
	}
	fullJSON, _ := json.Marshal(full)
	strippedJSON, _ := json.Marshal(stripped)
	t.Logf("pod JSON: %d bytes before, %d after stripping", len(fullJSON), len(strippedJSON))
}

func TestStripObjectDropsManagedFieldsAndLastApplied(t *testing.T) {
	svc := testService("shop", "reviews")
	svc.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: "{}", model.AnnotationExportTo: "."}
	svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	if _, err := stripObject(svc); err != nil {
		t.Fatal(err)
	}
	if svc.ManagedFields != nil || len(svc.Annotations) != 1 || svc.Annotations[model.AnnotationExportTo] != "." {
		t.Errorf("got managedFields %v, annotations %v", svc.ManagedFields, svc.Annotations)
	}
	vs := testVirtualService("shop", "r", "reviews")
	vs.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	if _, err := stripObject(vs); err != nil || vs.ManagedFields != nil {
		t.Errorf("VirtualService managedFields = %v, err %v", vs.ManagedFields, err)
	}
}

func TestStripCRD(t *testing.T) {
	strip := stripCRD(func(name string) bool { return name == CRDName(model.KindGateway) })

	ours := kubetest.MarkEstablished(kubetest.CRD(model.KindGateway))
	if _, err := strip(ours); err != nil {
		t.Fatal(err)
	}
	if ours.Spec.Versions[0].Schema != nil {
		t.Error("schema kept")
	}
	if ok, reason := crdServes(ours, model.KindGateway); !ok {
		t.Errorf("a stripped CRD no longer serves: %s", reason)
	}

	other := kubetest.MarkEstablished(kubetest.CRD(model.KindSidecar))
	other.Name = "certificates.cert-manager.io"
	if _, err := strip(other); err != nil {
		t.Fatal(err)
	}
	if len(other.Spec.Versions) != 0 || len(other.Status.Conditions) != 0 || other.Name == "" {
		t.Errorf("another API's CRD kept more than its name: %+v", other)
	}
}

// BenchmarkStripPod measures a DeepCopy (the informer's decode stands in
// for it) plus the strip of an injected Pod.
func BenchmarkStripPod(b *testing.B) {
	full := fullPod()
	b.ReportAllocs()
	for b.Loop() {
		p := full.DeepCopy()
		if _, err := stripObject(p); err != nil {
			b.Fatal(err)
		}
	}
}
