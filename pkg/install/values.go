package install

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Values is Istio's Helm values tree: an IstioOperator's spec.values, and
// what the base and discovery charts take (their values.yaml holds the
// defaults; values.schema.json is generated from these types). Every
// field of Istio's values_types.proto is here, with its verdict in the
// `install` tag (see validate.go):
//
//	(none)            discovery acts on it
//	noeffect=WHY      accepted; a warning says it changes nothing
//	unsupported=WHY   refused: "not supported by discovery"
//	only=V1|V2;WHY    those values accepted (they are what discovery does), others refused
//	moved=PATH        an earlier discovery field, now PATH
//	installer         read by the installer, not by the charts (gateways
//	                  are rendered by the gateway chart, whose values differ)
//
// and allowed values in `enum` (a|b|c) or `pattern` tags. Fields marked
// "discovery:" in their comment are discovery's own, not Istio's.
type Values struct {
	Global                 GlobalValues       `json:"global"`
	Pilot                  PilotValues        `json:"pilot"`
	SidecarInjectorWebhook InjectorValues     `json:"sidecarInjectorWebhook"`
	Gateways               GatewaysValues     `json:"gateways" install:"installer"`
	Base                   BaseValues         `json:"base"`
	IstiodRemote           IstiodRemoteValues `json:"istiodRemote"`
	// MeshConfig is Istio's MeshConfig; spec.meshConfig is laid over it.
	MeshConfig map[string]any `json:"meshConfig,omitempty" install:"meshconfig"`
	// Revision is spec.revision.
	Revision string `json:"revision,omitempty"`
	// RevisionTags are other names of this revision: each gets Istio's
	// istio-revision-tag-<tag> injection webhook configuration.
	RevisionTags []string `json:"revisionTags,omitempty"`
	// Profile selects a profile when spec.profile does not (Istio's
	// profiles say values.profile: demo).
	Profile              string `json:"profile,omitempty" install:"installer"`
	DefaultRevision      string `json:"defaultRevision,omitempty" install:"noeffect=the default revision is the one installed without spec.revision"`
	CompatibilityVersion string `json:"compatibilityVersion,omitempty" install:"noeffect=discovery has no compatibility profiles of older Istio versions"`
	OwnerName            string `json:"ownerName,omitempty" install:"noeffect=objects carry discovery's install labels instead"`
	Cni                  any    `json:"cni,omitempty" install:"noeffect=discovery has no CNI node agent"`
	IstioCni             any    `json:"istio_cni,omitempty" install:"noeffect=discovery has no CNI node agent"`
	Ztunnel              any    `json:"ztunnel,omitempty" install:"noeffect=discovery has no ambient mode (ztunnel)"`
	// Telemetry chooses Istio's default metrics provider: prometheus in
	// the istio ConfigMap's defaultProviders unless meshConfig sets them.
	Telemetry      TelemetryValues `json:"telemetry"`
	Experimental   any             `json:"experimental,omitempty" install:"noeffect=validation is discovery's webhook only, no ValidatingAdmissionPolicy"`
	GatewayClasses any             `json:"gatewayClasses,omitempty" install:"noeffect=discovery does not deploy Gateway API gateways"`
}

// TelemetryValues are Istio's values.telemetry. With all three enabled
// (the default) and no meshConfig.defaultProviders, the chart writes
// defaultProviders.metrics [prometheus], as Istio's chart does: the
// istio.stats filters that feed istio_requests_total and friends.
type TelemetryValues struct {
	Enabled *bool             `json:"enabled,omitempty"`
	V2      TelemetryV2Values `json:"v2"`
}

// TelemetryV2Values are values.telemetry.v2.
type TelemetryV2Values struct {
	Enabled     *bool                `json:"enabled,omitempty"`
	Prometheus  TelemetryPrometheus  `json:"prometheus"`
	Stackdriver TelemetryStackdriver `json:"stackdriver"`
}

// TelemetryPrometheus is values.telemetry.v2.prometheus.
type TelemetryPrometheus struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// TelemetryStackdriver is values.telemetry.v2.stackdriver.
type TelemetryStackdriver struct {
	Enabled *bool `json:"enabled,omitempty" install:"only=false;the stackdriver provider is not supported"`
}

// GlobalValues are read by every chart.
type GlobalValues struct {
	// Hub and Tag name every image, the discovery server's and the
	// proxies', as in Istio; values.pilot.hub/tag (components.pilot.hub/tag)
	// name discovery's over them, a gateway's hub/tag its proxy's. Empty:
	// discovery's image is ghcr.io/meshplane/discovery:<its version>, the
	// proxies' values.global.proxy.hub/proxyv2:values.global.proxy.tag.
	Hub string `json:"hub,omitempty"`
	Tag Tag    `json:"tag,omitempty"`
	// IstioNamespace is where discovery runs: spec.namespace.
	IstioNamespace   string   `json:"istioNamespace,omitempty"`
	ImagePullPolicy  string   `json:"imagePullPolicy,omitempty" enum:"|Always|IfNotPresent|Never"`
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// LogAsJson picks discovery's log format (values.pilot.logFormat wins).
	LogAsJson *bool `json:"logAsJson,omitempty"`
	// Logging.Level is Istio's "scope:level,...": the level of the
	// default scope (or a bare level) is discovery's log level.
	Logging                      LoggingValues        `json:"logging"`
	MeshID                       string               `json:"meshID,omitempty"`
	Network                      string               `json:"network,omitempty"`
	MultiCluster                 MultiClusterValues   `json:"multiCluster"`
	Proxy                        ProxyValues          `json:"proxy"`
	ProxyInit                    ProxyInitValues      `json:"proxy_init"`
	CAAddress                    string               `json:"caAddress,omitempty"`
	RemotePilotAddress           string               `json:"remotePilotAddress,omitempty"`
	ConfigValidation             *bool                `json:"configValidation,omitempty"`
	DefaultPodDisruptionBudget   PodDisruptionDefault `json:"defaultPodDisruptionBudget"`
	PriorityClassName            string               `json:"priorityClassName,omitempty"`
	OmitSidecarInjectorConfigMap bool                 `json:"omitSidecarInjectorConfigMap,omitempty"`
	IPFamilies                   []string             `json:"ipFamilies,omitempty"`
	IPFamilyPolicy               string               `json:"ipFamilyPolicy,omitempty" enum:"|SingleStack|PreferDualStack|RequireDualStack"`
	MeshNetworks                 map[string]any       `json:"meshNetworks,omitempty" install:"noeffect=discovery has no multi-network routing"`

	PilotCertProvider      string              `json:"pilotCertProvider,omitempty" install:"only=|istiod;discovery's own CA signs its serving certificate"`
	JwtPolicy              string              `json:"jwtPolicy,omitempty" install:"only=|third-party-jwt;the CA takes projected service account tokens (audience istio-ca)"`
	Sds                    any                 `json:"sds,omitempty" install:"noeffect=the CA takes tokens for the audience istio-ca"`
	Sts                    any                 `json:"sts,omitempty" install:"noeffect=discovery has no security token service"`
	CAName                 string              `json:"caName,omitempty" install:"only=;discovery's CA is its own"`
	MountMtlsCerts         bool                `json:"mountMtlsCerts,omitempty" install:"only=false;workloads get certificates from discovery's CA, not mounted files"`
	ExternalIstiod         bool                `json:"externalIstiod,omitempty" install:"only=false;discovery serves only the cluster it runs in (or, remote profile, is served)"`
	ConfigCluster          bool                `json:"configCluster,omitempty" install:"only=false;discovery has no external control plane mode"`
	OperatorManageWebhooks bool                `json:"operatorManageWebhooks,omitempty" install:"only=false;discovery keeps its webhooks' caBundle itself"`
	ResourceScope          string              `json:"resourceScope,omitempty" install:"only=|all;the charts render cluster and namespace objects together"`
	Revision               string              `json:"revision,omitempty" install:"noeffect=the revision is spec.revision (values.revision)"`
	Platform               string              `json:"platform,omitempty" install:"noeffect=discovery has no platform profiles"`
	Variant                string              `json:"variant,omitempty" install:"noeffect=discovery's image has no variants"`
	Arch                   any                 `json:"arch,omitempty" install:"noeffect=deprecated in Istio"`
	DefaultNodeSelector    map[string]any      `json:"defaultNodeSelector,omitempty" install:"noeffect=deprecated in Istio; use values.pilot.nodeSelector or components.*.k8s.nodeSelector"`
	DefaultResources       any                 `json:"defaultResources,omitempty" install:"noeffect=deprecated in Istio; use values.pilot.resources or components.*.k8s.resources"`
	DefaultTolerations     []corev1.Toleration `json:"defaultTolerations,omitempty" install:"noeffect=deprecated in Istio; use values.pilot.tolerations or components.*.k8s.tolerations"`
	CertSigners            []string            `json:"certSigners,omitempty" install:"noeffect=discovery signs with its own CA only"`
	PodDNSSearchNamespaces []string            `json:"podDNSSearchNamespaces,omitempty" install:"noeffect=the injector does not set DNS search domains"`
	Tracer                 any                 `json:"tracer,omitempty" install:"noeffect=the chart writes no defaultConfig.tracing from it; set meshConfig.defaultConfig.tracing or a Telemetry tracing provider"`
	Istiod                 any                 `json:"istiod,omitempty" install:"noeffect=discovery has no config analysis"`
	Waypoint               any                 `json:"waypoint,omitempty" install:"noeffect=discovery has no ambient mode (waypoints)"`
	TrustBundleName        string              `json:"trustBundleName,omitempty" install:"noeffect=discovery publishes the root certificate as istio-ca-root-cert"`
	NativeNftables         *bool               `json:"nativeNftables,omitempty" install:"noeffect=the proxies' traffic capture is the injected init container's"`
	NetworkPolicy          any                 `json:"networkPolicy,omitempty" install:"noeffect=the charts render no NetworkPolicy"`
	Agentgateway           any                 `json:"agentgateway,omitempty" install:"noeffect=discovery does not deploy agentgateway"`
	EnableReaderRBAC       *bool               `json:"enableReaderRBAC,omitempty" install:"noeffect=the base chart always renders the reader cluster role"`
	ReaderServiceAccount   any                 `json:"readerServiceAccount,omitempty" install:"noeffect=the base chart renders no reader service account"`

	// discovery: moved fields of earlier discovery versions.
	TrustDomain  string `json:"trustDomain,omitempty" install:"moved=meshConfig.trustDomain"`
	DomainSuffix string `json:"domainSuffix,omitempty" install:"moved=values.global.proxy.clusterDomain"`
}

// LoggingValues is Istio's global.logging.
type LoggingValues struct {
	Level string `json:"level,omitempty" pattern:"^$|^([a-z0-9_.-]+:)?(debug|info|warn|warning|error|fatal)(,([a-z0-9_.-]+:)?(debug|info|warn|warning|error|fatal))*$" patternDesc:"Istio's scope:level list (default:info,ads:debug) with levels debug, info, warn, error or fatal (discovery cannot turn its logs off)"`
}

// MultiClusterValues is Istio's global.multiCluster.
type MultiClusterValues struct {
	ClusterName        string `json:"clusterName,omitempty"`
	Enabled            *bool  `json:"enabled,omitempty" install:"noeffect=discovery serves one cluster"`
	GlobalDomainSuffix string `json:"globalDomainSuffix,omitempty" install:"noeffect=discovery serves one cluster"`
	IncludeEnvoyFilter *bool  `json:"includeEnvoyFilter,omitempty" install:"noeffect=discovery serves one cluster"`
}

// PodDisruptionDefault is global.defaultPodDisruptionBudget: with it, a
// Deployment that runs more than one replica gets a PodDisruptionBudget.
type PodDisruptionDefault struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// ProxyValues describe the injected proxy (istio-proxy): what the
// injector's templates read.
type ProxyValues struct {
	// discovery: Hub and Tag name the proxy image when global.hub and
	// global.tag do not (docker.io/istio and the Istio release discovery
	// is tested with).
	Hub string `json:"hub,omitempty"`
	Tag Tag    `json:"tag,omitempty"`
	// Image is the proxy image's name, or a whole reference (with a '/').
	Image string `json:"image,omitempty"`
	// AutoInject is the injection policy: enabled or disabled.
	AutoInject                      string                       `json:"autoInject,omitempty" enum:"|enabled|disabled"`
	ClusterDomain                   string                       `json:"clusterDomain,omitempty"`
	LogLevel                        string                       `json:"logLevel,omitempty" enum:"|trace|debug|info|warning|error|critical|off"`
	ComponentLogLevel               string                       `json:"componentLogLevel,omitempty"`
	IncludeIPRanges                 string                       `json:"includeIPRanges,omitempty"`
	ExcludeIPRanges                 string                       `json:"excludeIPRanges,omitempty"`
	IncludeInboundPorts             string                       `json:"includeInboundPorts,omitempty"`
	ExcludeInboundPorts             string                       `json:"excludeInboundPorts,omitempty"`
	ExcludeOutboundPorts            string                       `json:"excludeOutboundPorts,omitempty"`
	HoldApplicationUntilProxyStarts *bool                        `json:"holdApplicationUntilProxyStarts,omitempty"`
	Resources                       *corev1.ResourceRequirements `json:"resources,omitempty"`

	IncludeOutboundPorts         string  `json:"includeOutboundPorts,omitempty" install:"noeffect=the injected capture rules take includeIPRanges and the exclusions only"`
	OutlierLogPath               string  `json:"outlierLogPath,omitempty" install:"noeffect=discovery configures no outlier event log"`
	Privileged                   *bool   `json:"privileged,omitempty" install:"noeffect=the injected proxy is never privileged"`
	EnableCoreDump               *bool   `json:"enableCoreDump,omitempty" install:"noeffect=the injector does not enable core dumps"`
	ReadinessInitialDelaySeconds *uint32 `json:"readinessInitialDelaySeconds,omitempty" install:"noeffect=the injected readiness probe is fixed"`
	ReadinessPeriodSeconds       *uint32 `json:"readinessPeriodSeconds,omitempty" install:"noeffect=the injected readiness probe is fixed"`
	ReadinessFailureThreshold    *uint32 `json:"readinessFailureThreshold,omitempty" install:"noeffect=the injected readiness probe is fixed"`
	StartupProbe                 any     `json:"startupProbe,omitempty" install:"noeffect=the injected proxy has no startup probe"`
	StatusPort                   *uint32 `json:"statusPort,omitempty" install:"noeffect=the proxy's status port is 15020"`
	SeccompProfile               any     `json:"seccompProfile,omitempty" install:"noeffect=the injector sets no seccomp profile"`
	Lifecycle                    any     `json:"lifecycle,omitempty" install:"noeffect=the injector sets no lifecycle hooks"`
	Tracer                       string  `json:"tracer,omitempty" install:"noeffect=the chart writes no defaultConfig.tracing from it; set meshConfig.defaultConfig.tracing or a Telemetry tracing provider"`
}

// ProxyInitValues is global.proxy_init, the injected init container.
type ProxyInitValues struct {
	Resources          *corev1.ResourceRequirements `json:"resources,omitempty"`
	Image              string                       `json:"image,omitempty" install:"noeffect=the init container runs the proxy image"`
	ForceApplyIptables *bool                        `json:"forceApplyIptables,omitempty" install:"noeffect=the injected init container's rules are fixed"`
}

// PilotValues configure the discovery server (Istio's istiod).
type PilotValues struct {
	// Enabled is components.pilot.enabled.
	Enabled *bool `json:"enabled,omitempty"`
	// Hub, Tag and Image name discovery's image: <hub>/<image>:<tag>, or
	// Image alone when it holds a '/'.
	Hub   string `json:"hub,omitempty"`
	Tag   Tag    `json:"tag,omitempty"`
	Image string `json:"image,omitempty"`

	AutoscaleEnabled          *bool                             `json:"autoscaleEnabled,omitempty"`
	AutoscaleMin              *uint32                           `json:"autoscaleMin,omitempty"`
	AutoscaleMax              *uint32                           `json:"autoscaleMax,omitempty"`
	AutoscaleBehavior         map[string]any                    `json:"autoscaleBehavior,omitempty"`
	ReplicaCount              *uint32                           `json:"replicaCount,omitempty"`
	RollingMaxSurge           *intstr.IntOrString               `json:"rollingMaxSurge,omitempty"`
	RollingMaxUnavailable     *intstr.IntOrString               `json:"rollingMaxUnavailable,omitempty"`
	Resources                 *corev1.ResourceRequirements      `json:"resources,omitempty"`
	CPU                       *UtilizationTarget                `json:"cpu,omitempty"`
	Memory                    *UtilizationTarget                `json:"memory,omitempty"`
	Env                       map[string]any                    `json:"env,omitempty"`
	EnvVarFrom                []corev1.EnvVar                   `json:"envVarFrom,omitempty"`
	NodeSelector              map[string]string                 `json:"nodeSelector,omitempty"`
	Tolerations               []corev1.Toleration               `json:"tolerations,omitempty"`
	Affinity                  *corev1.Affinity                  `json:"affinity,omitempty"`
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	PodAnnotations            map[string]string                 `json:"podAnnotations,omitempty"`
	PodLabels                 map[string]string                 `json:"podLabels,omitempty"`
	DeploymentLabels          map[string]string                 `json:"deploymentLabels,omitempty"`
	ServiceAnnotations        map[string]string                 `json:"serviceAnnotations,omitempty"`
	ServiceAccountAnnotations map[string]string                 `json:"serviceAccountAnnotations,omitempty"`
	SeccompProfile            *corev1.SeccompProfile            `json:"seccompProfile,omitempty"`
	Volumes                   []corev1.Volume                   `json:"volumes,omitempty"`
	VolumeMounts              []corev1.VolumeMount              `json:"volumeMounts,omitempty"`
	// ExtraContainerArgs are more flags of `discovery serve`.
	ExtraContainerArgs []string `json:"extraContainerArgs,omitempty"`
	// KeepaliveMaxServerConnectionAge is --max-stream-age: 0, or at least 1m.
	KeepaliveMaxServerConnectionAge string `json:"keepaliveMaxServerConnectionAge,omitempty"`
	// ConfigMap renders the mesh config ConfigMap (istio[-<revision>]).
	ConfigMap      *bool    `json:"configMap,omitempty"`
	IPFamilies     []string `json:"ipFamilies,omitempty"`
	IPFamilyPolicy string   `json:"ipFamilyPolicy,omitempty" enum:"|SingleStack|PreferDualStack|RequireDualStack"`

	// discovery: LogLevel is the server's --log-level, over
	// global.logging.level.
	LogLevel string `json:"logLevel,omitempty" enum:"|debug|info|warn|error"`
	// discovery: LogFormat is the server's --log-format, over global.logAsJson.
	LogFormat string `json:"logFormat,omitempty" enum:"|text|json"`
	// discovery: PlaintextXDS serves xDS without TLS or authentication on
	// port 15010 of the Pod and the Services, for trusted networks. Off
	// (the default), the plaintext server listens on the Pod's loopback
	// only, reachable through kubectl port-forward.
	PlaintextXDS bool `json:"plaintextXDS,omitempty"`

	Cni     CNIUsageValues `json:"cni"`
	Taint   TaintValues    `json:"taint"`
	Variant string         `json:"variant,omitempty" install:"noeffect=discovery's image has no variants"`
	// TraceSampling is --trace-sampling (istiod's PILOT_TRACE_SAMPLING).
	TraceSampling           *float64 `json:"traceSampling,omitempty"`
	JwksResolverExtraRootCA string   `json:"jwksResolverExtraRootCA,omitempty" install:"noeffect=discovery does not fetch JWKS"`
	TrustedZtunnelNamespace string   `json:"trustedZtunnelNamespace,omitempty" install:"noeffect=discovery has no ambient mode (ztunnel)"`
	TrustedZtunnelName      string   `json:"trustedZtunnelName,omitempty" install:"noeffect=discovery has no ambient mode (ztunnel)"`
	CrlConfigMapName        string   `json:"crlConfigMapName,omitempty" install:"noeffect=discovery's CA publishes no revocation list"`
	IstiodRemote            any      `json:"istiodRemote,omitempty" install:"noeffect=use values.istiodRemote"`

	// discovery: moved fields of earlier discovery versions.
	ExtraArgs []string          `json:"extraArgs,omitempty" install:"moved=values.pilot.extraContainerArgs"`
	Labels    map[string]string `json:"labels,omitempty" install:"moved=values.pilot.podLabels"`
	Remote    bool              `json:"remote,omitempty" install:"moved=values.istiodRemote.enabled"`
}

// UtilizationTarget is an autoscaler's target, in percent of requests.
type UtilizationTarget struct {
	TargetAverageUtilization int32 `json:"targetAverageUtilization,omitempty"`
}

// CNIUsageValues is Istio's pilot.cni: injection for a node CNI agent.
type CNIUsageValues struct {
	Enabled  bool   `json:"enabled,omitempty" install:"only=false;discovery has no CNI node agent: the injector adds the istio-init container"`
	Chained  *bool  `json:"chained,omitempty" install:"noeffect=discovery has no CNI node agent"`
	Provider string `json:"provider,omitempty" install:"noeffect=discovery has no CNI node agent"`
}

// TaintValues is Istio's pilot.taint (the CNI untaint controller).
type TaintValues struct {
	Enabled   bool   `json:"enabled,omitempty" install:"only=false;discovery has no CNI node agent to wait for"`
	Namespace string `json:"namespace,omitempty" install:"noeffect=discovery has no CNI node agent"`
	Name      string `json:"name,omitempty" install:"noeffect=discovery has no CNI node agent"`
}

// InjectorValues configure the sidecar injector: its webhook and the
// config of the istio-sidecar-injector ConfigMap.
type InjectorValues struct {
	// EnableNamespacesByDefault injects every namespace that does not opt
	// out, not only those labelled.
	EnableNamespacesByDefault bool              `json:"enableNamespacesByDefault,omitempty"`
	ReinvocationPolicy        string            `json:"reinvocationPolicy,omitempty" enum:"|Never|IfNeeded"`
	NeverInjectSelector       []LabelSelector   `json:"neverInjectSelector,omitempty"`
	AlwaysInjectSelector      []LabelSelector   `json:"alwaysInjectSelector,omitempty"`
	InjectedAnnotations       map[string]string `json:"injectedAnnotations,omitempty"`
	Templates                 map[string]string `json:"templates,omitempty"`
	DefaultTemplates          []string          `json:"defaultTemplates,omitempty"`
	InjectionURL              string            `json:"injectionURL,omitempty"`
	// discovery: NativeSidecar injects istio-proxy as a native sidecar
	// (Istio: values.pilot.env.ENABLE_NATIVE_SIDECARS).
	NativeSidecar bool `json:"nativeSidecar,omitempty"`

	RewriteAppHTTPProbe *bool `json:"rewriteAppHTTPProbe,omitempty" install:"noeffect=the injector does not rewrite application probes"`
}

// LabelSelector is a Kubernetes label selector.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one expression of a LabelSelector.
type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator" enum:"In|NotIn|Exists|DoesNotExist"`
	Values   []string `json:"values,omitempty"`
}

// BaseValues configure the base chart and the validating webhook.
type BaseValues struct {
	// EnableIstioConfigCRDs installs Istio's CRDs.
	EnableIstioConfigCRDs *bool `json:"enableIstioConfigCRDs,omitempty"`
	// ExcludedCRDs names CRDs (plural.group) to leave out.
	ExcludedCRDs []string `json:"excludedCRDs,omitempty"`
	// discovery: ValidationFailurePolicy of the validating webhook.
	ValidationFailurePolicy string `json:"validationFailurePolicy,omitempty" enum:"|Ignore|Fail"`
	// ValidationURL is the validating webhook's URL (remote profile).
	ValidationURL string `json:"validationURL,omitempty"`

	EnableCRDTemplates *bool  `json:"enableCRDTemplates,omitempty" install:"noeffect=the CRDs are always templates of the base chart"`
	ValidateGateway    *bool  `json:"validateGateway,omitempty" install:"noeffect=Gateways are validated with every other kind"`
	ValidationCABundle string `json:"validationCABundle,omitempty" install:"noeffect=discovery keeps its webhooks' caBundle itself"`

	// discovery: moved fields of earlier discovery versions.
	EnableCRDs *bool `json:"enableCRDs,omitempty" install:"moved=values.base.enableIstioConfigCRDs"`
}

// IstiodRemoteValues is Istio's istiodRemote: discovery runs in another
// cluster (at global.remotePilotAddress); this one gets the CRDs, the
// injector's config and webhooks, but no discovery Deployment.
type IstiodRemoteValues struct {
	Enabled bool `json:"enabled,omitempty"`
	// InjectionURL is the injection webhook's URL (default
	// https://<remotePilotAddress host>:15017/inject).
	InjectionURL      string `json:"injectionURL,omitempty"`
	InjectionPath     string `json:"injectionPath,omitempty"`
	InjectionCABundle string `json:"injectionCABundle,omitempty" install:"noeffect=discovery keeps its webhooks' caBundle itself"`

	EnabledLocalInjectorIstiod bool `json:"enabledLocalInjectorIstiod,omitempty" install:"only=false;in the remote profile, injection is the remote discovery's"`
}

// GatewaysValues is Istio's values.gateways: the defaults of every
// ingress (or egress) gateway component.
type GatewaysValues struct {
	IstioIngressgateway GatewayValues `json:"istio-ingressgateway"`
	IstioEgressgateway  GatewayValues `json:"istio-egressgateway"`
	// Enabled is Istio's switch for every gateway.
	Enabled         *bool `json:"enabled,omitempty" install:"noeffect=gateways are turned on one by one (components.*Gateways[].enabled)"`
	SecurityContext any   `json:"securityContext,omitempty" install:"noeffect=for Istio's Gateway API gateways, which discovery does not deploy"`
	SeccompProfile  any   `json:"seccompProfile,omitempty" install:"noeffect=for Istio's Gateway API gateways, which discovery does not deploy"`
}

// GatewayValues is Istio's values.gateways.istio-ingressgateway (or
// egress): the gateway chart's values for each gateway of that kind,
// under the gateway component's own settings.
type GatewayValues struct {
	// Enabled turns on the default gateway of this kind.
	Enabled                  *bool                        `json:"enabled,omitempty"`
	Name                     string                       `json:"name,omitempty"`
	Labels                   map[string]string            `json:"labels,omitempty"`
	AutoscaleEnabled         *bool                        `json:"autoscaleEnabled,omitempty"`
	AutoscaleMin             *uint32                      `json:"autoscaleMin,omitempty"`
	AutoscaleMax             *uint32                      `json:"autoscaleMax,omitempty"`
	CPU                      *UtilizationTarget           `json:"cpu,omitempty"`
	Memory                   *UtilizationTarget           `json:"memory,omitempty"`
	ReplicaCount             *uint32                      `json:"replicaCount,omitempty"`
	Resources                *corev1.ResourceRequirements `json:"resources,omitempty"`
	Env                      map[string]any               `json:"env,omitempty"`
	NodeSelector             map[string]string            `json:"nodeSelector,omitempty"`
	Tolerations              []corev1.Toleration          `json:"tolerations,omitempty"`
	PodAnnotations           map[string]string            `json:"podAnnotations,omitempty"`
	ServiceAnnotations       map[string]string            `json:"serviceAnnotations,omitempty"`
	Type                     string                       `json:"type,omitempty" enum:"|ClusterIP|NodePort|LoadBalancer"`
	Ports                    []GatewayPort                `json:"ports,omitempty"`
	LoadBalancerIP           string                       `json:"loadBalancerIP,omitempty"`
	LoadBalancerSourceRanges []string                     `json:"loadBalancerSourceRanges,omitempty"`
	ExternalTrafficPolicy    string                       `json:"externalTrafficPolicy,omitempty" enum:"|Cluster|Local"`
	IPFamilies               []string                     `json:"ipFamilies,omitempty"`
	IPFamilyPolicy           string                       `json:"ipFamilyPolicy,omitempty" enum:"|SingleStack|PreferDualStack|RequireDualStack"`
	RollingMaxSurge          *intstr.IntOrString          `json:"rollingMaxSurge,omitempty"`
	RollingMaxUnavailable    *intstr.IntOrString          `json:"rollingMaxUnavailable,omitempty"`
	ServiceAccount           ServiceAccountValues         `json:"serviceAccount"`
	// InjectionTemplate names the injector's template (default gateway).
	InjectionTemplate string `json:"injectionTemplate,omitempty"`

	RunAsRoot                        *bool `json:"runAsRoot,omitempty" install:"noeffect=gateways bind ports below 1024 without root (net.ipv4.ip_unprivileged_port_start)"`
	CustomService                    *bool `json:"customService,omitempty" install:"noeffect=every gateway gets its Service"`
	SecretVolumes                    any   `json:"secretVolumes,omitempty" install:"noeffect=gateways read TLS credentials over SDS (credentialName)"`
	ConfigVolumes                    any   `json:"configVolumes,omitempty" install:"noeffect=use components.*Gateways[].k8s.overlays"`
	AdditionalContainers             any   `json:"additionalContainers,omitempty" install:"noeffect=use components.*Gateways[].k8s.overlays"`
	PodAntiAffinityLabelSelector     any   `json:"podAntiAffinityLabelSelector,omitempty" install:"noeffect=deprecated in Istio; use components.*Gateways[].k8s.affinity"`
	PodAntiAffinityTermLabelSelector any   `json:"podAntiAffinityTermLabelSelector,omitempty" install:"noeffect=deprecated in Istio; use components.*Gateways[].k8s.affinity"`
	IngressPorts                     any   `json:"ingressPorts,omitempty" install:"noeffect=deprecated in Istio; use ports"`
}

// GatewayPort is one port of a gateway's Service.
type GatewayPort struct {
	Name       string             `json:"name"`
	Port       int32              `json:"port"`
	TargetPort intstr.IntOrString `json:"targetPort,omitempty"`
	NodePort   int32              `json:"nodePort,omitempty"`
	Protocol   string             `json:"protocol,omitempty" enum:"|TCP|UDP|SCTP"`
}

// ServiceAccountValues configure a ServiceAccount.
type ServiceAccountValues struct {
	Annotations map[string]string `json:"annotations,omitempty"`
}
