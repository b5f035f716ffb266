package install

import (
	"encoding/json"
	"errors"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// The IstioOperator input, as istioctl takes it. Profiles, -f files and
// --set all write into this one tree; it is validated against these types
// field by field (validate.go), so an unknown field or a value of the
// wrong type names its path, and a field of Istio's that discovery does
// not act on says so (the `install` tag, see Values). The top-level
// fields are folded into spec.values (normalize.go), which the charts
// read; components.*.k8s is laid over the rendered objects as Istio does
// (patch.go).

// APIVersion and Kind of the input files.
const (
	OperatorAPIVersion = "install.istio.io/v1alpha1"
	OperatorKind       = "IstioOperator"
)

// IstioOperator is a whole input file.
type IstioOperator struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata,omitempty" install:"free"`
	Spec       Spec           `json:"spec"`
}

// Spec is what gets installed.
type Spec struct {
	// Profile names the profile the spec overlays (default when empty).
	Profile string `json:"profile,omitempty"`
	// Hub and Tag are values.global.hub and values.global.tag: they name
	// every image, discovery's and the proxies'.
	Hub string `json:"hub,omitempty"`
	Tag Tag    `json:"tag,omitempty"`
	// Revision is the control plane revision (values.revision); empty is
	// the default one.
	Revision string `json:"revision,omitempty"`
	// Namespace is where the control plane runs (values.global.istioNamespace).
	Namespace string `json:"namespace,omitempty"`
	// MeshConfig is laid over values.meshConfig.
	MeshConfig map[string]any `json:"meshConfig,omitempty" install:"meshconfig"`
	Components Components     `json:"components"`
	Values     Values         `json:"values"`

	InstallPackagePath   string `json:"installPackagePath,omitempty" install:"unsupported=the charts are discovery's own: built in, or a directory given with --manifests"`
	CompatibilityVersion string `json:"compatibilityVersion,omitempty" install:"noeffect=discovery has no compatibility profiles of older Istio versions"`
	UnvalidatedValues    any    `json:"unvalidatedValues,omitempty" install:"noeffect=the charts read only the values they declare (values.schema.json)"`
}

// Components turns the parts of the installation on and off. A component
// without enabled is on, as in Istio.
type Components struct {
	Base            BaseComponent      `json:"base"`
	Pilot           ComponentSpec      `json:"pilot"`
	IngressGateways []GatewayComponent `json:"ingressGateways,omitempty"`
	EgressGateways  []GatewayComponent `json:"egressGateways,omitempty"`
	Cni             CNIComponent       `json:"cni"`
	Ztunnel         ZtunnelComponent   `json:"ztunnel"`
	IstiodRemote    RemoteComponent    `json:"istiodRemote"`
}

// BaseComponent is the base chart: CRDs and shared cluster roles.
type BaseComponent struct {
	Enabled *bool `json:"enabled,omitempty"`
	// K8s: only overlays apply (the chart has no Deployment).
	K8s *K8s `json:"k8s,omitempty"`
}

// ComponentSpec is the discovery chart (components.pilot).
type ComponentSpec struct {
	Enabled *bool `json:"enabled,omitempty"`
	// Namespace is the control plane's namespace, as spec.namespace.
	Namespace string `json:"namespace,omitempty"`
	// Hub and Tag are values.pilot.hub and values.pilot.tag.
	Hub string `json:"hub,omitempty"`
	Tag Tag    `json:"tag,omitempty"`
	K8s *K8s   `json:"k8s,omitempty"`
}

// GatewayComponent is one gateway (the gateway chart, once per gateway).
type GatewayComponent struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Enabled   *bool  `json:"enabled,omitempty"`
	// Label selects the gateway's pods; without one, app: <name> and
	// istio: <name without istio->.
	Label map[string]string `json:"label,omitempty"`
	// Hub and Tag name this gateway's proxy image.
	Hub string `json:"hub,omitempty"`
	Tag Tag    `json:"tag,omitempty"`
	K8s *K8s   `json:"k8s,omitempty"`
}

// CNIComponent is Istio's CNI node agent, which discovery does not have.
type CNIComponent struct {
	Enabled   bool   `json:"enabled,omitempty" install:"only=false;discovery has no CNI node agent: the injector adds the istio-init container"`
	Namespace string `json:"namespace,omitempty" install:"noeffect=discovery has no CNI node agent"`
	Hub       string `json:"hub,omitempty" install:"noeffect=discovery has no CNI node agent"`
	Tag       Tag    `json:"tag,omitempty" install:"noeffect=discovery has no CNI node agent"`
	K8s       any    `json:"k8s,omitempty" install:"noeffect=discovery has no CNI node agent"`
}

// ZtunnelComponent is Istio's ambient node proxy, which discovery does not have.
type ZtunnelComponent struct {
	Enabled   bool   `json:"enabled,omitempty" install:"only=false;discovery has no ambient mode (ztunnel)"`
	Namespace string `json:"namespace,omitempty" install:"noeffect=discovery has no ambient mode (ztunnel)"`
	Hub       string `json:"hub,omitempty" install:"noeffect=discovery has no ambient mode (ztunnel)"`
	Tag       Tag    `json:"tag,omitempty" install:"noeffect=discovery has no ambient mode (ztunnel)"`
	K8s       any    `json:"k8s,omitempty" install:"noeffect=discovery has no ambient mode (ztunnel)"`
}

// RemoteComponent is Istio's components.istiodRemote, which renders
// nothing in Istio either; the remote profile is discovery's.
type RemoteComponent struct {
	Enabled   *bool  `json:"enabled,omitempty" install:"noeffect=use --profile remote (values.istiodRemote.enabled)"`
	Namespace string `json:"namespace,omitempty" install:"noeffect=use --profile remote (values.istiodRemote.enabled)"`
	Hub       string `json:"hub,omitempty" install:"noeffect=use --profile remote (values.istiodRemote.enabled)"`
	Tag       Tag    `json:"tag,omitempty" install:"noeffect=use --profile remote (values.istiodRemote.enabled)"`
	K8s       any    `json:"k8s,omitempty" install:"noeffect=use --profile remote (values.istiodRemote.enabled)"`
}

// K8s are Istio's KubernetesResources: laid over the component's rendered
// objects (its Deployment and container, Service, HorizontalPodAutoscaler,
// PodDisruptionBudget) as strategic merge patches, as istioctl does.
type K8s struct {
	Affinity            *corev1.Affinity             `json:"affinity,omitempty"`
	Env                 []corev1.EnvVar              `json:"env,omitempty"`
	HPASpec             *HPASpec                     `json:"hpaSpec,omitempty"`
	ImagePullPolicy     string                       `json:"imagePullPolicy,omitempty" enum:"|Always|IfNotPresent|Never"`
	NodeSelector        map[string]string            `json:"nodeSelector,omitempty"`
	PodDisruptionBudget *PDBSpec                     `json:"podDisruptionBudget,omitempty"`
	PodAnnotations      map[string]string            `json:"podAnnotations,omitempty"`
	PriorityClassName   string                       `json:"priorityClassName,omitempty"`
	ReadinessProbe      *corev1.Probe                `json:"readinessProbe,omitempty"`
	ReplicaCount        uint32                       `json:"replicaCount,omitempty"`
	Resources           *corev1.ResourceRequirements `json:"resources,omitempty"`
	Service             *corev1.ServiceSpec          `json:"service,omitempty"`
	Strategy            *appsv1.DeploymentStrategy   `json:"strategy,omitempty"`
	Tolerations         []corev1.Toleration          `json:"tolerations,omitempty"`
	ServiceAnnotations  map[string]string            `json:"serviceAnnotations,omitempty"`
	SecurityContext     *corev1.PodSecurityContext   `json:"securityContext,omitempty"`
	Volumes             []corev1.Volume              `json:"volumes,omitempty"`
	VolumeMounts        []corev1.VolumeMount         `json:"volumeMounts,omitempty"`
	// Overlays patch rendered objects by path (patch.go).
	Overlays []Overlay `json:"overlays,omitempty"`
}

// HPASpec is a HorizontalPodAutoscaler's spec (autoscaling/v2).
type HPASpec struct {
	autoscalingv2.HorizontalPodAutoscalerSpec `json:",inline"`

	// discovery: moved fields of earlier discovery versions.
	Enabled                        *bool `json:"enabled,omitempty" install:"moved=values.pilot.autoscaleEnabled (a gateway: values.gateways.istio-ingressgateway.autoscaleEnabled)"`
	TargetCPUUtilizationPercentage int32 `json:"targetCPUUtilizationPercentage,omitempty" install:"moved=values.pilot.cpu.targetAverageUtilization (a gateway: values.gateways.istio-ingressgateway.cpu.targetAverageUtilization)"`
}

// PDBSpec is a PodDisruptionBudget's spec (policy/v1).
type PDBSpec struct {
	policyv1.PodDisruptionBudgetSpec `json:",inline"`

	// discovery: moved fields of earlier discovery versions.
	Enabled *bool `json:"enabled,omitempty" install:"moved=values.global.defaultPodDisruptionBudget.enabled"`
}

// Overlay patches one rendered object of the component, found by kind and
// name (the namespace is the component's).
type Overlay struct {
	APIVersion string         `json:"apiVersion,omitempty"`
	Kind       string         `json:"kind"`
	Name       string         `json:"name"`
	Patches    []OverlayPatch `json:"patches,omitempty"`
}

// OverlayPatch sets (or, without value, removes) the node at Path:
// a.b.[key:value].c, [N] an index, [:value] the element of a list of
// scalars equal to value.
type OverlayPatch struct {
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Tag is an image tag. Istio takes a number too (tag: 2), as the text it
// is written as; --set keeps the text.
type Tag string

// UnmarshalJSON takes a string or a number.
func (t *Tag) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = Tag(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("want an image tag (a string, or a number)")
	}
	*t = Tag(n.String())
	return nil
}
