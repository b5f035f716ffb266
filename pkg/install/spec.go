package install

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The IstioOperator-shaped input. Profiles, -f files and --set all write
// into this one tree; it is validated against these types field by field
// (validate.go), so an unknown field or a value of the wrong type names its
// path. Everything a chart reads comes from here (chartValues).

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
	// Hub and Tag name the discovery image: <hub>/discovery:<tag>.
	Hub string `json:"hub,omitempty"`
	Tag string `json:"tag,omitempty"`
	// Revision is the control plane revision; empty is the default one.
	Revision string `json:"revision,omitempty"`
	// Namespace is where the control plane runs.
	Namespace string `json:"namespace,omitempty"`
	// MeshConfig becomes the mesh config of the istio ConfigMap; it is
	// checked against Istio's MeshConfig message.
	MeshConfig map[string]any `json:"meshConfig,omitempty" install:"meshconfig"`
	Components Components     `json:"components"`
	Values     Values         `json:"values"`
}

// Components turns the parts of the installation on and off.
type Components struct {
	Base            BaseComponent      `json:"base"`
	Pilot           PilotComponent     `json:"pilot"`
	IngressGateways []GatewayComponent `json:"ingressGateways,omitempty"`
	EgressGateways  []GatewayComponent `json:"egressGateways,omitempty"`
}

// BaseComponent is the base chart: CRDs and shared cluster roles.
type BaseComponent struct {
	Enabled bool `json:"enabled"`
}

// PilotComponent is the discovery chart.
type PilotComponent struct {
	Enabled bool `json:"enabled"`
	K8s     K8s  `json:"k8s"`
}

// GatewayComponent is one gateway (gateway chart).
type GatewayComponent struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Enabled   bool              `json:"enabled"`
	Label     map[string]string `json:"label,omitempty"`
	K8s       K8s               `json:"k8s"`
}

// K8s are the Kubernetes settings of a component's Deployment.
type K8s struct {
	ReplicaCount        int                          `json:"replicaCount,omitempty"`
	Resources           *corev1.ResourceRequirements `json:"resources,omitempty"`
	HPASpec             *HPASpec                     `json:"hpaSpec,omitempty"`
	PodDisruptionBudget *PDBSpec                     `json:"podDisruptionBudget,omitempty"`
	NodeSelector        map[string]string            `json:"nodeSelector,omitempty"`
	Tolerations         []corev1.Toleration          `json:"tolerations,omitempty"`
	Affinity            *corev1.Affinity             `json:"affinity,omitempty"`
	Env                 []corev1.EnvVar              `json:"env,omitempty"`
	PodAnnotations      map[string]string            `json:"podAnnotations,omitempty"`
	Service             *ServiceSpec                 `json:"service,omitempty"`
}

// HPASpec turns on a HorizontalPodAutoscaler on CPU.
type HPASpec struct {
	Enabled                        bool  `json:"enabled"`
	MinReplicas                    int32 `json:"minReplicas,omitempty"`
	MaxReplicas                    int32 `json:"maxReplicas,omitempty"`
	TargetCPUUtilizationPercentage int32 `json:"targetCPUUtilizationPercentage,omitempty"`
}

// PDBSpec turns on a PodDisruptionBudget.
type PDBSpec struct {
	Enabled      bool                `json:"enabled"`
	MinAvailable *intstr.IntOrString `json:"minAvailable,omitempty"`
}

// ServiceSpec is a gateway's Service.
type ServiceSpec struct {
	Type  string        `json:"type,omitempty"`
	Ports []ServicePort `json:"ports,omitempty"`
}

// ServicePort is one port of a gateway's Service.
type ServicePort struct {
	Name       string `json:"name"`
	Port       int32  `json:"port"`
	TargetPort int32  `json:"targetPort,omitempty"`
	Protocol   string `json:"protocol,omitempty"`
}

// Values are settings that are not Kubernetes objects' shapes.
type Values struct {
	Global                 GlobalValues   `json:"global"`
	Pilot                  PilotValues    `json:"pilot"`
	SidecarInjectorWebhook InjectorValues `json:"sidecarInjectorWebhook"`
	Base                   BaseValues     `json:"base"`
}

// GlobalValues are read by every chart.
type GlobalValues struct {
	ImagePullPolicy  string      `json:"imagePullPolicy,omitempty"`
	ImagePullSecrets []string    `json:"imagePullSecrets,omitempty"`
	TrustDomain      string      `json:"trustDomain,omitempty"`
	DomainSuffix     string      `json:"domainSuffix,omitempty"`
	Proxy            ProxyValues `json:"proxy"`
	// RemotePilotAddress is where proxies find discovery when it runs in
	// another cluster (profile remote).
	RemotePilotAddress string `json:"remotePilotAddress,omitempty"`
}

// ProxyValues describe the injected proxy (istio-proxy) image and logs.
type ProxyValues struct {
	Hub      string `json:"hub,omitempty"`
	Tag      string `json:"tag,omitempty"`
	Image    string `json:"image,omitempty"`
	LogLevel string `json:"logLevel,omitempty"`
}

// PilotValues configure the discovery server itself.
type PilotValues struct {
	// Remote says discovery runs in another cluster, at
	// global.remotePilotAddress: no discovery Deployment or Services here.
	Remote    bool              `json:"remote"`
	Image     string            `json:"image,omitempty"`
	LogLevel  string            `json:"logLevel,omitempty"`
	LogFormat string            `json:"logFormat,omitempty"`
	ExtraArgs []string          `json:"extraArgs,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`

	// PlaintextXDS serves xDS without TLS or authentication on port 15010
	// of the Pod and the Services, for trusted networks. Off (the
	// default), the plaintext server listens on the Pod's loopback only,
	// reachable through kubectl port-forward.
	PlaintextXDS bool `json:"plaintextXDS"`
}

// InjectorValues configure the sidecar injector webhook.
type InjectorValues struct {
	// EnableNamespacesByDefault injects every namespace that does not opt
	// out, not only those labelled.
	EnableNamespacesByDefault bool `json:"enableNamespacesByDefault"`
	// ReinvocationPolicy of the mutating webhook: Never or IfNeeded.
	ReinvocationPolicy string `json:"reinvocationPolicy,omitempty"`
	// NativeSidecar injects istio-proxy as a native sidecar.
	NativeSidecar bool `json:"nativeSidecar"`
}

// BaseValues configure the base chart.
type BaseValues struct {
	EnableCRDs bool `json:"enableCRDs"`
	// ValidationFailurePolicy of the validating webhook: Ignore or Fail.
	ValidationFailurePolicy string `json:"validationFailurePolicy,omitempty"`
}
