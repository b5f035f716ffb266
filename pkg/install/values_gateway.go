package install

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// GatewayChartValues are the gateway chart's values: those of Istio's
// gateway chart (istio/gateway) that discovery's gateways have, with the
// same names, so that a values file written for Istio's chart works; the
// chart's values.schema.json is generated from this type. The installer
// fills them from values.gateways.istio-<kind>gateway and the gateway
// component (chartvalues.go).
type GatewayChartValues struct {
	// Name of the gateway's objects; empty: the Helm release's name.
	Name string `json:"name,omitempty"`
	// Revision whose injector completes the gateway's pods.
	Revision string `json:"revision,omitempty"`
	// Labels of the pods, which the Service selects; empty: app: <name>
	// and istio: <name without istio->.
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations of the Deployment.
	Annotations    map[string]string `json:"annotations,omitempty"`
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`
	// ReplicaCount is the Deployment's replicas without an autoscaler.
	ReplicaCount              *uint32                           `json:"replicaCount,omitempty"`
	Autoscaling               GatewayAutoscaling                `json:"autoscaling"`
	Service                   GatewayService                    `json:"service"`
	Resources                 *corev1.ResourceRequirements      `json:"resources,omitempty"`
	Env                       map[string]any                    `json:"env,omitempty"`
	NodeSelector              map[string]string                 `json:"nodeSelector,omitempty"`
	Tolerations               []corev1.Toleration               `json:"tolerations,omitempty"`
	Affinity                  *corev1.Affinity                  `json:"affinity,omitempty"`
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	ServiceAccount            GatewayServiceAccount             `json:"serviceAccount"`
	Strategy                  *appsv1.DeploymentStrategy        `json:"strategy,omitempty"`
	ImagePullSecrets          []corev1.LocalObjectReference     `json:"imagePullSecrets,omitempty"`
	PriorityClassName         string                            `json:"priorityClassName,omitempty"`
	// PodDisruptionBudget, when set, is the budget's spec (minAvailable
	// or maxUnavailable).
	PodDisruptionBudget *GatewayBudget `json:"podDisruptionBudget,omitempty"`

	Kind                          string `json:"kind,omitempty" install:"only=|Deployment;discovery's gateways are Deployments"`
	RBAC                          any    `json:"rbac,omitempty" install:"noeffect=the gateway always gets its Role for the TLS Secrets of its namespace"`
	SecurityContext               any    `json:"securityContext,omitempty" install:"noeffect=the pod's security context is fixed (unprivileged ports from 0)"`
	ContainerSecurityContext      any    `json:"containerSecurityContext,omitempty" install:"noeffect=the container's security context is fixed (non-root, read-only)"`
	EnvVarFrom                    any    `json:"envVarFrom,omitempty" install:"noeffect=use env"`
	MinReadySeconds               any    `json:"minReadySeconds,omitempty" install:"noeffect=the Deployment's minReadySeconds is fixed"`
	ReadinessProbe                any    `json:"readinessProbe,omitempty" install:"noeffect=the proxy's readiness probe is fixed (/healthz/ready on 15021)"`
	NetworkGateway                any    `json:"networkGateway,omitempty" install:"noeffect=discovery has no multi-network routing"`
	NetworkGatewayPorts           any    `json:"networkGatewayPorts,omitempty" install:"noeffect=discovery has no multi-network routing"`
	ImagePullPolicy               any    `json:"imagePullPolicy,omitempty" install:"noeffect=the injector sets the proxy's pull policy (global.imagePullPolicy of the discovery chart)"`
	DNSPolicy                     any    `json:"dnsPolicy,omitempty" install:"noeffect=the chart sets no DNS policy"`
	DNSConfig                     any    `json:"dnsConfig,omitempty" install:"noeffect=the chart sets no DNS config"`
	TerminationGracePeriodSeconds any    `json:"terminationGracePeriodSeconds,omitempty" install:"noeffect=the chart sets no grace period"`
	Volumes                       any    `json:"volumes,omitempty" install:"noeffect=the gateway reads TLS credentials over SDS; use an overlay"`
	VolumeMounts                  any    `json:"volumeMounts,omitempty" install:"noeffect=the gateway reads TLS credentials over SDS; use an overlay"`
	InitContainers                any    `json:"initContainers,omitempty" install:"noeffect=use an overlay"`
	AdditionalContainers          any    `json:"additionalContainers,omitempty" install:"noeffect=use an overlay"`
	Lifecycle                     any    `json:"lifecycle,omitempty" install:"noeffect=the injector sets the proxy's lifecycle"`
	Global                        any    `json:"global,omitempty" install:"noeffect=the gateway chart reads no global values"`
}

// GatewayAutoscaling is the gateway's HorizontalPodAutoscaler.
type GatewayAutoscaling struct {
	Enabled                           *bool          `json:"enabled,omitempty"`
	MinReplicas                       *uint32        `json:"minReplicas,omitempty"`
	MaxReplicas                       *uint32        `json:"maxReplicas,omitempty"`
	TargetCPUUtilizationPercentage    *int32         `json:"targetCPUUtilizationPercentage,omitempty"`
	TargetMemoryUtilizationPercentage *int32         `json:"targetMemoryUtilizationPercentage,omitempty"`
	AutoscaleBehavior                 map[string]any `json:"autoscaleBehavior,omitempty"`
}

// GatewayService is the gateway's Service.
type GatewayService struct {
	Type                     string            `json:"type,omitempty" enum:"|ClusterIP|NodePort|LoadBalancer"`
	Ports                    []GatewayPort     `json:"ports,omitempty"`
	Annotations              map[string]string `json:"annotations,omitempty"`
	LoadBalancerIP           string            `json:"loadBalancerIP,omitempty"`
	LoadBalancerSourceRanges []string          `json:"loadBalancerSourceRanges,omitempty"`
	ExternalTrafficPolicy    string            `json:"externalTrafficPolicy,omitempty" enum:"|Cluster|Local"`
	IPFamilies               []string          `json:"ipFamilies,omitempty"`
	IPFamilyPolicy           string            `json:"ipFamilyPolicy,omitempty" enum:"|SingleStack|PreferDualStack|RequireDualStack"`

	ClusterIP           any `json:"clusterIP,omitempty" install:"noeffect=the Service's cluster IP is allocated"`
	SelectorLabels      any `json:"selectorLabels,omitempty" install:"noeffect=the Service selects labels"`
	HealthCheckNodePort any `json:"healthCheckNodePort,omitempty" install:"noeffect=the chart sets no health check node port"`
	ExternalIPs         any `json:"externalIPs,omitempty" install:"noeffect=the chart sets no external IPs"`
}

// GatewayServiceAccount is the gateway's ServiceAccount.
type GatewayServiceAccount struct {
	// Name; empty: <name>-service-account.
	Name        string            `json:"name,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Create      *bool             `json:"create,omitempty" install:"only=true;the gateway always gets its ServiceAccount"`
}

// GatewayBudget is the gateway's PodDisruptionBudget.
type GatewayBudget struct {
	MinAvailable               *intstr.IntOrString `json:"minAvailable,omitempty"`
	MaxUnavailable             *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	UnhealthyPodEvictionPolicy string              `json:"unhealthyPodEvictionPolicy,omitempty" enum:"|IfHealthyBudget|AlwaysAllow"`
}
