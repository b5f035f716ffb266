package gatewaydeploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	gw "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// Names, labels and annotations of Istio's automated deployment
// (pilot/pkg/config/kube/gatewaycommon and the kube-gateway template).
const (
	// FieldManager is the server-side apply field manager, Istio's
	// controller name (features.ManagedGatewayController).
	FieldManager = "istio.io/gateway-controller"
	// ManagedLabel marks what the controller made; an existing object
	// without it is never taken over.
	ManagedLabel = "gateway.istio.io/managed"
	// ManagedValue is ManagedLabel's value: the controller name with "/"
	// as "-".
	ManagedValue = "istio.io-gateway-controller"
	// GatewayNameLabel selects a Gateway's pods (the translation's
	// selector too).
	GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"
	// GatewayClassLabel names the Gateway's class.
	GatewayClassLabel = "gateway.networking.k8s.io/gateway-class-name"
	// ServiceTypeAnnotation on a Gateway sets its Service's type.
	ServiceTypeAnnotation = "networking.istio.io/service-type"
	// NameOverrideAnnotation on a Gateway names its Deployment and Service.
	NameOverrideAnnotation = "gateway.istio.io/name-override"
	// ServiceAccountAnnotation on a Gateway names its ServiceAccount.
	ServiceAccountAnnotation = "gateway.istio.io/service-account"
	// ControllerVersionAnnotation is istiod's marker of which controller
	// version manages a Gateway; discovery reads it (a newer owner wins)
	// but does not write it.
	ControllerVersionAnnotation = "gateway.istio.io/controller-version"
	// controllerVersion is istiod's ControllerVersion (1.18 and later).
	controllerVersion = 5
	// StatusPort is the proxy's health port, always on the Service.
	StatusPort = 15021
)

// omittedAnnotations are not copied from the Gateway to what it makes.
var omittedAnnotations = []string{
	"kubectl.kubernetes.io/last-applied-configuration", NameOverrideAnnotation, ServiceAccountAnnotation, ControllerVersionAnnotation,
}

// PodRenderer completes a gateway pod (an istio-proxy container of image
// "auto" and the injection template "gateway") as the injector would.
// *inject.Injector is the real one.
type PodRenderer interface {
	// RenderPod returns pod with the injection templates applied.
	RenderPod(pod *corev1.Pod) (*corev1.Pod, error)
}

// Input is what one Gateway's objects are rendered from.
type Input struct {
	Gateway *gw.Gateway
	// DefaultServiceType is the class's Service type (LoadBalancer for
	// istio), before the Gateway's networking.istio.io/service-type.
	DefaultServiceType corev1.ServiceType
	// Parameters is the data of the ConfigMap spec.infrastructure.parametersRef
	// names (nil without one): overlays keyed deployment, service,
	// serviceAccount, laid over the rendered objects by strategic merge.
	Parameters map[string]string
	// Pods renders the Deployment's pod template.
	Pods PodRenderer
}

// Objects are a Gateway's ServiceAccount, Deployment and Service.
type Objects struct {
	ServiceAccount *corev1.ServiceAccount
	Deployment     *appsv1.Deployment
	Service        *corev1.Service
}

// Managed reports whether a Gateway is deployed by the controller, as
// istiod's IsManaged: without spec.addresses, or with a single IP address
// (the Service's loadBalancerIP). A Hostname address names an existing
// Service: manual mode, nothing is deployed.
func Managed(spec *gw.GatewaySpec) bool {
	switch len(spec.Addresses) {
	case 0:
		return true
	case 1:
		t := spec.Addresses[0].Type
		return t == nil || *t == gw.IPAddressType
	}
	return false
}

// ManagedByUs reports whether istiod's controller-version annotation
// leaves the Gateway to a controller of Istio's current version: absent,
// or a number not above istiod's. Another number means a newer
// controller owns it.
func ManagedByUs(g *gw.Gateway) bool {
	v, ok := g.Annotations[ControllerVersionAnnotation]
	if !ok {
		return true
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || fmt.Sprint(n) != v {
		return false
	}
	return n <= controllerVersion
}

// Names returns the Deployment/Service name and the ServiceAccount name of
// g: <gateway>-<class>, unless overridden by annotation.
func Names(g *gw.Gateway) (deployment, serviceAccount string) {
	def := g.Name + "-" + string(g.Spec.GatewayClassName)
	deployment, serviceAccount = def, def
	if v := g.Annotations[NameOverrideAnnotation]; v != "" {
		deployment = v
	}
	if v := g.Annotations[ServiceAccountAnnotation]; v != "" {
		serviceAccount = v
	}
	return deployment, serviceAccount
}

// Render returns the objects of in.Gateway. An error is the Gateway's
// (an invalid service type, parameters that cannot be applied) and is
// meant for its owner.
func Render(in Input) (*Objects, error) {
	g := in.Gateway
	name, sa := Names(g)
	labels, annotations := infrastructure(g)
	svcType := in.DefaultServiceType
	if v, ok := g.Annotations[ServiceTypeAnnotation]; ok {
		svcType = corev1.ServiceType(v)
	}
	switch svcType {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return nil, fmt.Errorf("annotation %s: service type %q is not ClusterIP, NodePort or LoadBalancer", ServiceTypeAnnotation, svcType)
	}
	meta := func(n string) metav1.ObjectMeta {
		l := maps.Clone(labels)
		l[GatewayNameLabel] = g.Name
		l[GatewayClassLabel] = string(g.Spec.GatewayClassName)
		l[ManagedLabel] = ManagedValue
		return metav1.ObjectMeta{
			Name: n, Namespace: g.Namespace, Labels: l, Annotations: maps.Clone(annotations),
			OwnerReferences: []metav1.OwnerReference{OwnerRef(g)},
		}
	}
	out := &Objects{
		ServiceAccount: &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(sa)},
		Service: &corev1.Service{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta(name),
			Spec: corev1.ServiceSpec{
				Type: svcType, Ports: ServicePorts(g), Selector: map[string]string{GatewayNameLabel: g.Name},
				IPFamilyPolicy: ptr(corev1.IPFamilyPolicyPreferDualStack),
			},
		},
	}
	if len(g.Spec.Addresses) == 1 && svcType == corev1.ServiceTypeLoadBalancer {
		out.Service.Spec.LoadBalancerIP = g.Spec.Addresses[0].Value
	}
	dep, err := deployment(in, meta(name), sa, labels, annotations)
	if err != nil {
		return nil, err
	}
	out.Deployment = dep
	if err := overlay(out, in.Parameters); err != nil {
		return nil, err
	}
	return out, nil
}

// OwnerRef is the owner reference to g that everything it makes carries,
// as Istio's template writes it (no controller, no blockOwnerDeletion):
// the garbage collector deletes them with the Gateway.
func OwnerRef(g *gw.Gateway) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: gw.GroupVersion.String(), Kind: "Gateway", Name: g.Name, UID: g.UID}
}

// infrastructure returns the labels and annotations copied to every
// object: spec.infrastructure's when it sets them, else the Gateway's own
// (istiod's default, PILOT_ENABLE_GATEWAY_API_COPY_LABELS_ANNOTATIONS),
// without the gateway.networking.k8s.io/ prefix and Istio's own
// annotations.
func infrastructure(g *gw.Gateway) (labels, annotations map[string]string) {
	labels, annotations = map[string]string{}, map[string]string{}
	inf := g.Spec.Infrastructure
	if inf != nil && inf.Labels != nil {
		for k, v := range inf.Labels {
			labels[string(k)] = string(v)
		}
	} else {
		maps.Copy(labels, g.Labels)
	}
	if inf != nil && inf.Annotations != nil {
		for k, v := range inf.Annotations {
			annotations[string(k)] = string(v)
		}
	} else {
		maps.Copy(annotations, g.Annotations)
	}
	if inf != nil {
		// istiod drops this prefix from infrastructure metadata only.
		for _, m := range []map[string]string{labels, annotations} {
			maps.DeleteFunc(m, func(k, _ string) bool { return strings.HasPrefix(k, "gateway.networking.k8s.io/") })
		}
	}
	for _, k := range omittedAnnotations {
		delete(annotations, k)
	}
	return labels, annotations
}

// ServicePorts are the status port and one port per distinct listener
// port, named after its first listener (dots as dashes, at most 63
// characters, made unique with the port number), appProtocol the
// listener's protocol in lower case, as istiod's extractServicePorts.
func ServicePorts(g *gw.Gateway) []corev1.ServicePort {
	ports := []corev1.ServicePort{{Name: "status-port", Port: StatusPort, Protocol: corev1.ProtocolTCP, AppProtocol: ptr("tcp")}}
	used := map[string]bool{"status-port": true}
	seen := map[int32]bool{}
	for i, l := range g.Spec.Listeners {
		if seen[int32(l.Port)] {
			continue
		}
		seen[int32(l.Port)] = true
		name := strings.ReplaceAll(string(l.Name), ".", "-")
		if name == "" {
			name = fmt.Sprintf("%s-%d", strings.ToLower(string(l.Protocol)), i)
		}
		name = uniquePortName(name, int32(l.Port), used)
		ports = append(ports, corev1.ServicePort{
			Name: name, Port: int32(l.Port), Protocol: corev1.ProtocolTCP,
			AppProtocol: ptr(strings.ToLower(string(l.Protocol))),
		})
	}
	return ports
}

// uniquePortName is name cut to 63 characters, with -<port> (and x's)
// appended while it is taken.
func uniquePortName(name string, port int32, used map[string]bool) string {
	if len(name) > 63 {
		name = name[:63]
	}
	candidate := name
	for suffix := fmt.Sprintf("-%d", port); used[candidate]; suffix += "x" {
		trimmed := name
		if len(trimmed)+len(suffix) > 63 {
			trimmed = trimmed[:63-len(suffix)]
		}
		candidate = trimmed + suffix
	}
	used[candidate] = true
	return candidate
}

// deployment is the gateway's Deployment: one replica of pods labelled
// with the Gateway's name, whose istio-proxy container (pilot-agent
// "proxy router") the injector's "gateway" template completes, so that
// the image, the discovery address (15012) and the proxy settings are the
// injector's, as istiod renders its kube-gateway template from the
// injection configuration. Chosen differently from istiod: no
// HorizontalPodAutoscaler or PodDisruptionBudget (istiod makes them only
// when the parameters ask), and the pods carry the injector's gateway
// template's labels rather than a template of their own.
func deployment(in Input, meta metav1.ObjectMeta, sa string, labels, annotations map[string]string) (*appsv1.Deployment, error) {
	g := in.Gateway
	podLabels := map[string]string{
		"service.istio.io/canonical-name":     meta.Name,
		"service.istio.io/canonical-revision": "latest",
	}
	maps.Copy(podLabels, labels)
	podLabels[GatewayNameLabel] = g.Name
	podLabels[GatewayClassLabel] = string(g.Spec.GatewayClassName)
	podLabels[ManagedLabel] = ManagedValue
	podAnnotations := maps.Clone(annotations)
	podAnnotations["inject.istio.io/templates"] = "gateway"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: meta.Name, Namespace: g.Namespace, Labels: podLabels, Annotations: podAnnotations},
		Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{
			Name: "istio-proxy", Image: "auto",
			Ports: []corev1.ContainerPort{
				{Name: "metrics", ContainerPort: 15020, Protocol: corev1.ProtocolTCP},
				{Name: "status-port", ContainerPort: StatusPort, Protocol: corev1.ProtocolTCP},
			},
		}}},
	}
	if in.Pods == nil {
		return nil, fmt.Errorf("no pod renderer")
	}
	rendered, err := in.Pods.RenderPod(pod)
	if err != nil {
		return nil, fmt.Errorf("render the gateway pod: %w", err)
	}
	tmplMeta := metav1.ObjectMeta{Labels: rendered.Labels, Annotations: rendered.Annotations}
	if tmplMeta.Labels == nil {
		tmplMeta.Labels = map[string]string{}
	}
	// The pod is complete: the webhook must not inject it again.
	tmplMeta.Labels["sidecar.istio.io/inject"] = "false"
	delete(tmplMeta.Annotations, "inject.istio.io/templates")
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{GatewayNameLabel: g.Name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmplMeta, Spec: rendered.Spec},
		},
	}, nil
}

// overlayKeys are the parameters' keys discovery applies; istiod's
// horizontalPodAutoscaler and podDisruptionBudget are refused (discovery
// makes neither).
var overlayKeys = []string{"deployment", "service", "serviceAccount"}

// overlay lays params' overlays over objs by strategic merge patch, as
// istiod does; an overlay may not change an object's identity (name,
// namespace, owner references).
func overlay(objs *Objects, params map[string]string) error {
	for k := range params {
		if !slices.Contains(overlayKeys, k) {
			known := slices.Clone(overlayKeys)
			sort.Strings(known)
			return fmt.Errorf("parametersRef: key %q is not supported (supported: %s)", k, strings.Join(known, ", "))
		}
	}
	targets := map[string]runtime.Object{"deployment": objs.Deployment, "service": objs.Service, "serviceAccount": objs.ServiceAccount}
	for _, k := range overlayKeys {
		patch, ok := params[k]
		if !ok {
			continue
		}
		if err := patchObject(targets[k], patch); err != nil {
			return fmt.Errorf("parametersRef: %s: %w", k, err)
		}
	}
	return nil
}

func patchObject(obj runtime.Object, patchYAML string) error {
	before, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	patch, err := yaml.YAMLToJSON([]byte(patchYAML))
	if err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	after, err := strategicpatch.StrategicMergePatch(before, patch, obj)
	if err != nil {
		return fmt.Errorf("strategic merge patch: %w", err)
	}
	accessor, ok := obj.(metav1.Object)
	if !ok {
		return fmt.Errorf("not an object")
	}
	id := func(o metav1.Object) []any {
		return []any{o.GetName(), o.GetNamespace(), o.GetGenerateName(), o.GetOwnerReferences(), o.GetFinalizers(), o.GetUID()}
	}
	old := id(accessor)
	typ := reflect.TypeOf(obj).Elem()
	fresh := reflect.New(typ).Interface().(runtime.Object)
	if err := json.Unmarshal(after, fresh); err != nil {
		return fmt.Errorf("patched object: %w", err)
	}
	if !reflect.DeepEqual(old, id(fresh.(metav1.Object))) {
		return fmt.Errorf("may not change the object's name, namespace, owner references or finalizers")
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(fresh).Elem())
	return nil
}

// Unstructured is obj as a server-side apply body: no status, no empty
// creationTimestamp.
func Unstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	// An unset targetPort (the port itself, as Istio's template leaves
	// it) rather than the typed zero value.
	if ports, ok, _ := unstructured.NestedSlice(m, "spec", "ports"); ok {
		for _, p := range ports {
			if pm, ok := p.(map[string]any); ok && fmt.Sprint(pm["targetPort"]) == "0" {
				delete(pm, "targetPort")
			}
		}
		_ = unstructured.SetNestedSlice(m, ports, "spec", "ports")
	}
	if tmpl, ok, _ := unstructured.NestedMap(m, "spec", "template", "metadata"); ok {
		delete(tmpl, "creationTimestamp")
		_ = unstructured.SetNestedMap(m, tmpl, "spec", "template", "metadata")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func ptr[T any](v T) *T { return &v }
