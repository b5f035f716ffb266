package install

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The --set paths Istio's users type, each with its effect on the rendered
// objects: what changes where, the warning when the value is accepted but
// changes nothing in discovery, or the refusal. -update writes the table
// to test/compat/INSTALL_SETS.md.

const installSetsMD = "../../test/compat/INSTALL_SETS.md"

// effect is one expectation on the render: the value at path (Path
// syntax; a string holding YAML or JSON, such as a ConfigMap's data, is
// read through) of the object kind/name, or the object's absence.
type effect struct {
	obj    string // Kind/name
	at     string // path in the object; "" with absent: the object itself
	eq     string // the value, printed: strings as they are, others as JSON
	has    string // a list element or substring the value has
	absent bool
}

func (e effect) String() string {
	switch {
	case e.absent && e.at == "":
		return fmt.Sprintf("no %s", e.obj)
	case e.absent:
		return fmt.Sprintf("%s: no %s", e.obj, e.at)
	case e.has != "":
		return fmt.Sprintf("%s %s has `%s`", e.obj, e.at, e.has)
	}
	return fmt.Sprintf("%s %s = `%s`", e.obj, e.at, e.eq)
}

type setCase struct {
	profile string
	sets    []string
	effects []effect
	warn    string // a warning that must be given
	err     string // the refusal
}

const (
	discoveryContainer = "spec.template.spec.containers.[name:discovery]"
	injectorValues     = "data.values"
	injectorConfig     = "data.config"
)

var setCases = map[string]setCase{
	// Images: hub and tag name every image, as in Istio.
	"hub names the discovery image and the proxies'": {sets: []string{"hub=registry.example.com/mesh"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "registry.example.com/mesh/discovery:test"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.hub", eq: "registry.example.com/mesh"},
	}},
	"tag names the discovery image and the proxies'": {sets: []string{"tag=1.2.3"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "ghcr.io/meshplane/discovery:1.2.3"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.tag", eq: "1.2.3"},
	}},
	"spec.hub is hub": {sets: []string{"spec.hub=registry.example.com/mesh"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "registry.example.com/mesh/discovery:test"},
	}},
	"values.global.hub is hub": {sets: []string{"values.global.hub=registry.example.com/mesh"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "registry.example.com/mesh/discovery:test"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.hub", eq: "registry.example.com/mesh"},
	}},
	"values.global.tag is tag, kept a string": {sets: []string{"values.global.tag=1.30"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "ghcr.io/meshplane/discovery:1.30"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.tag", eq: "1.30"},
	}},
	"values.pilot.hub names the discovery image only": {sets: []string{"values.pilot.hub=registry.example.com/cp"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "registry.example.com/cp/discovery:test"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.hub", eq: "docker.io/istio"},
	}},
	"values.pilot.tag names the discovery image only": {sets: []string{"values.pilot.tag=v2"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "ghcr.io/meshplane/discovery:v2"},
	}},
	"values.pilot.image may be a whole reference": {sets: []string{"values.pilot.image=registry.example.com/x/discovery:dev"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "registry.example.com/x/discovery:dev"},
	}},
	"components.pilot.hub and tag name the discovery image": {sets: []string{"components.pilot.hub=registry.example.com/cp", "components.pilot.tag=7"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".image", eq: "registry.example.com/cp/discovery:7"},
	}},
	"values.global.proxy.image names the proxy image": {sets: []string{"values.global.proxy.image=registry.example.com/proxyv2:custom"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.proxy.image", eq: "registry.example.com/proxyv2:custom"},
	}},
	"a gateway's tag names its proxy image": {sets: []string{"components.ingressGateways[0].tag=1.32.1"}, effects: []effect{
		{obj: "Deployment/istio-ingressgateway", at: "spec.template.metadata.annotations.sidecar\\.istio\\.io/proxyImage", eq: "docker.io/istio/proxyv2:1.32.1"},
	}},

	// Top level.
	"profile picks a profile":                   {sets: []string{"profile=demo"}, effects: []effect{{obj: "Deployment/istio-egressgateway", at: "metadata.name", eq: "istio-egressgateway"}}},
	"revision names the revision":               {sets: []string{"revision=canary"}, effects: []effect{{obj: "Deployment/discovery-canary", at: discoveryContainer + ".args", has: "--revision=canary"}}},
	"namespace moves the control plane":         {sets: []string{"namespace=mesh-system"}, effects: []effect{{obj: "Deployment/discovery", at: "metadata.namespace", eq: "mesh-system"}}},
	"values.global.istioNamespace is namespace": {sets: []string{"values.global.istioNamespace=mesh-system"}, effects: []effect{{obj: "Deployment/discovery", at: "metadata.namespace", eq: "mesh-system"}}},
	"installPackagePath is refused":             {sets: []string{"installPackagePath=/tmp/istio"}, err: "installPackagePath: not supported by discovery: the charts are discovery's own"},

	// Mesh config.
	"meshConfig.defaultConfig reaches the proxies": {sets: []string{"meshConfig.defaultConfig.holdApplicationUntilProxyStarts=true"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".meshConfig.defaultConfig.holdApplicationUntilProxyStarts", eq: "true"},
	}},
	"proxyMetadata values stay strings": {sets: []string{"meshConfig.defaultConfig.proxyMetadata.ISTIO_META_DNS_CAPTURE=true"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".meshConfig.defaultConfig.proxyMetadata.ISTIO_META_DNS_CAPTURE", eq: "true"},
		{obj: "ConfigMap/istio", at: "data.mesh.defaultConfig.proxyMetadata.ISTIO_META_DNS_CAPTURE", eq: "true"},
	}},
	"meshConfig.trustDomain is the server's trust domain": {sets: []string{"meshConfig.trustDomain=example.org"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--trust-domain=example.org"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.trustDomain", eq: "example.org"},
	}},
	"values.meshConfig is meshConfig": {sets: []string{"values.meshConfig.defaultConfig.proxyMetadata.FOO=bar"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.defaultConfig.proxyMetadata.FOO", eq: "bar"},
	}},
	"meshConfig.accessLogFile reaches the server": {sets: []string{"meshConfig.accessLogFile=/dev/stdout"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.accessLogFile", eq: "/dev/stdout"},
	}},
	"a mesh setting discovery does not act on is written and warned about": {sets: []string{"meshConfig.ingressClass=nginx"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.ingressClass", eq: "nginx"},
	}, warn: "meshConfig.ingressClass: accepted, but has no effect in discovery (Kubernetes Ingress resources are not read)"},
	"a Go duration in meshConfig is accepted, as by Istio": {sets: []string{"meshConfig.connectTimeout=1m30s"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.connectTimeout", eq: "1m30s"},
	}},
	"an invalid mesh setting is refused": {sets: []string{"meshConfig.connectTimeout=0s"}, err: "not a valid Istio MeshConfig"},
	"the root namespace follows the namespace": {sets: []string{"namespace=mesh-system"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.rootNamespace", eq: "mesh-system"},
	}},
	"prometheus is the default metrics provider": {effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.defaultProviders.metrics.[0]", eq: "prometheus"},
	}},
	"values.telemetry.v2.prometheus.enabled=false leaves no default metrics provider": {sets: []string{"values.telemetry.v2.prometheus.enabled=false"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.defaultProviders", absent: true},
	}},
	"meshConfig.defaultProviders replaces the default provider": {sets: []string{"meshConfig.defaultProviders.accessLogging[0]=envoy"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.defaultProviders.accessLogging.[0]", eq: "envoy"},
		{obj: "ConfigMap/istio", at: "data.mesh.defaultProviders.metrics", absent: true},
	}},
	"values.telemetry.v2.stackdriver.enabled is refused": {sets: []string{"values.telemetry.v2.stackdriver.enabled=true"}, err: "values.telemetry.v2.stackdriver.enabled: not supported by discovery"},
	"an unknown mesh setting is refused":                 {sets: []string{"meshConfig.accessLogFil=/dev/stdout"}, err: "not a valid Istio MeshConfig"},

	// The discovery Deployment.
	"components.pilot.k8s.replicaCount sets the replicas": {sets: []string{"values.pilot.autoscaleEnabled=false", "components.pilot.k8s.replicaCount=2"}, effects: []effect{
		{obj: "Deployment/discovery", at: "spec.replicas", eq: "2"},
		{obj: "PodDisruptionBudget/discovery", at: "spec.minAvailable", eq: "1"},
	}},
	"values.pilot.autoscaleEnabled=false leaves out the autoscaler": {sets: []string{"values.pilot.autoscaleEnabled=false"}, effects: []effect{
		{obj: "HorizontalPodAutoscaler/discovery", absent: true},
		{obj: "Deployment/discovery", at: "spec.replicas", eq: "1"},
	}},
	"values.pilot.autoscaleMin sets the autoscaler's minimum": {sets: []string{"values.pilot.autoscaleMin=2"}, effects: []effect{
		{obj: "HorizontalPodAutoscaler/discovery", at: "spec.minReplicas", eq: "2"},
		{obj: "PodDisruptionBudget/discovery", at: "spec.minAvailable", eq: "1"},
	}},
	"values.pilot.autoscaleMax sets the autoscaler's maximum": {sets: []string{"values.pilot.autoscaleMax=10"}, effects: []effect{
		{obj: "HorizontalPodAutoscaler/discovery", at: "spec.maxReplicas", eq: "10"},
	}},
	"values.pilot.replicaCount sets the replicas without an autoscaler": {sets: []string{"values.pilot.autoscaleEnabled=false", "values.pilot.replicaCount=3"}, effects: []effect{
		{obj: "Deployment/discovery", at: "spec.replicas", eq: "3"},
	}},
	"values.pilot.cpu.targetAverageUtilization sets the autoscaler's target": {sets: []string{"values.pilot.cpu.targetAverageUtilization=60"}, effects: []effect{
		{obj: "HorizontalPodAutoscaler/discovery", at: "spec.metrics.[0].resource.target.averageUtilization", eq: "60"},
	}},
	"components.pilot.k8s.hpaSpec.maxReplicas sets the autoscaler's maximum": {sets: []string{"components.pilot.k8s.hpaSpec.maxReplicas=7"}, effects: []effect{
		{obj: "HorizontalPodAutoscaler/discovery", at: "spec.maxReplicas", eq: "7"},
	}},
	"values.pilot.resources sets the container's resources": {sets: []string{"values.pilot.resources.requests.memory=1Gi"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".resources.requests.memory", eq: "1Gi"},
		{obj: "Deployment/discovery", at: discoveryContainer + ".resources.requests.cpu", eq: "500m"},
	}},
	"components.pilot.k8s.resources sets the container's resources": {sets: []string{"components.pilot.k8s.resources.requests.cpu=1"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".resources.requests.cpu", eq: "1"},
	}},
	"values.pilot.env sets an environment variable": {sets: []string{"values.pilot.env.HTTPS_PROXY=http://proxy:3128"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".env.[name:HTTPS_PROXY].value", eq: "http://proxy:3128"},
	}},
	"an Istio feature flag in values.pilot.env is set and warned about": {sets: []string{"values.pilot.env.PILOT_ENABLE_QUIC_LISTENERS=true"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".env.[name:PILOT_ENABLE_QUIC_LISTENERS].value", eq: "true"},
	}, warn: "values.pilot.env.PILOT_ENABLE_QUIC_LISTENERS: accepted, but has no effect in discovery"},
	"components.pilot.k8s.env with Istio's list syntax": {sets: []string{"components.pilot.k8s.env[0].name=HTTPS_PROXY", "components.pilot.k8s.env[0].value=http://proxy:3128"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".env.[name:HTTPS_PROXY].value", eq: "http://proxy:3128"},
	}},
	"values.pilot.nodeSelector with an escaped dot": {sets: []string{`values.pilot.nodeSelector.kubernetes\.io/os=linux`}, effects: []effect{
		{obj: "Deployment/discovery", at: `spec.template.spec.nodeSelector.kubernetes\.io/os`, eq: "linux"},
	}},
	"values.pilot.podAnnotations annotates the pod": {sets: []string{`values.pilot.podAnnotations.example\.com/team=mesh`}, effects: []effect{
		{obj: "Deployment/discovery", at: `spec.template.metadata.annotations.example\.com/team`, eq: "mesh"},
	}},
	"values.pilot.podLabels labels the pod": {sets: []string{"values.pilot.podLabels.team=mesh"}, effects: []effect{
		{obj: "Deployment/discovery", at: "spec.template.metadata.labels.team", eq: "mesh"},
	}},
	"values.pilot.keepaliveMaxServerConnectionAge is the stream age": {sets: []string{"values.pilot.keepaliveMaxServerConnectionAge=10m"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--max-stream-age=10m"},
	}},
	"a stream age the server refuses is refused": {sets: []string{"values.pilot.keepaliveMaxServerConnectionAge=10s"}, err: "values.pilot.keepaliveMaxServerConnectionAge"},
	"values.pilot.logLevel sets the log level": {sets: []string{"values.pilot.logLevel=debug"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--log-level=debug"},
	}},
	"a log level the server refuses is refused": {sets: []string{"values.pilot.logLevel=verbose"}, err: `values.pilot.logLevel: "verbose" is not one of debug, info, warn, error`},
	"Istio's global.logging.level sets the log level": {sets: []string{"values.global.logging.level=default:debug"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--log-level=debug"},
	}},
	"Istio's per-scope levels are warned about": {sets: []string{"values.global.logging.level=default:info,ads:debug"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--log-level=info"},
	}, warn: `values.global.logging.level: scope "ads"`},
	"values.global.logAsJson picks the log format": {sets: []string{"values.global.logAsJson=false"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--log-format=text"},
	}},
	"values.pilot.extraContainerArgs adds server flags": {sets: []string{"values.pilot.extraContainerArgs[0]=--drain-period=30s"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--drain-period=30s"},
	}},
	"values.pilot.plaintextXDS opens port 15010": {sets: []string{"values.pilot.plaintextXDS=true"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--grpc-address=:15010"},
	}},
	"values.pilot.traceSampling is --trace-sampling":             {sets: []string{"values.pilot.traceSampling=10"}, effects: []effect{{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--trace-sampling=10"}}},
	"values.pilot.configMap=false leaves out the mesh ConfigMap": {sets: []string{"values.pilot.configMap=false"}, effects: []effect{{obj: "ConfigMap/istio", absent: true}}},
	"values.pilot.cni.enabled is refused":                        {sets: []string{"values.pilot.cni.enabled=true"}, err: "values.pilot.cni.enabled: not supported by discovery"},

	// Global values.
	"values.global.imagePullPolicy sets every pull policy": {sets: []string{"values.global.imagePullPolicy=Always"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".imagePullPolicy", eq: "Always"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.imagePullPolicy", eq: "Always"},
	}},
	"values.global.imagePullSecrets with Istio's list syntax": {sets: []string{"values.global.imagePullSecrets[0]=regcred"}, effects: []effect{
		{obj: "ServiceAccount/discovery", at: "imagePullSecrets.[0].name", eq: "regcred"},
	}},
	"values.global.priorityClassName sets the pods' priority class": {sets: []string{"values.global.priorityClassName=system-cluster-critical"}, effects: []effect{
		{obj: "Deployment/discovery", at: "spec.template.spec.priorityClassName", eq: "system-cluster-critical"},
	}},
	"values.global.proxy.logLevel sets the proxies' log level": {sets: []string{"values.global.proxy.logLevel=debug"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.proxy.logLevel", eq: "debug"},
	}},
	"values.global.proxy.resources sets the proxies' resources": {sets: []string{"values.global.proxy.resources.requests.cpu=50m"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.proxy.resources.requests.cpu", eq: "50m"},
	}},
	"values.global.proxy.includeIPRanges sets the capture ranges": {sets: []string{"values.global.proxy.includeIPRanges=10.0.0.0/8"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.proxy.includeIPRanges", eq: "10.0.0.0/8"},
	}},
	"an IP range that is not one is refused": {sets: []string{"values.global.proxy.includeIPRanges=10.0.0.0/33"}, err: "values.global.proxy.includeIPRanges"},
	"values.global.proxy.holdApplicationUntilProxyStarts holds the application": {sets: []string{"values.global.proxy.holdApplicationUntilProxyStarts=true"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.proxy.holdApplicationUntilProxyStarts", eq: "true"},
	}},
	"values.global.proxy.autoInject sets the injection policy": {sets: []string{"values.global.proxy.autoInject=disabled"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorConfig + ".policy", eq: "disabled"},
	}},
	"values.global.proxy.clusterDomain is the cluster's DNS suffix": {sets: []string{"values.global.proxy.clusterDomain=example.local"}, effects: []effect{
		{obj: "Deployment/discovery", at: discoveryContainer + ".args", has: "--domain-suffix=example.local"},
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.proxy.clusterDomain", eq: "example.local"},
	}},
	"values.global.proxy.privileged is warned about": {sets: []string{"values.global.proxy.privileged=true"}, warn: "values.global.proxy.privileged: accepted, but has no effect in discovery"},
	"values.global.meshID reaches the proxies": {sets: []string{"values.global.meshID=mesh1"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.meshID", eq: "mesh1"},
	}},
	"values.global.multiCluster.clusterName reaches the proxies": {sets: []string{"values.global.multiCluster.clusterName=cluster1"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.multiCluster.clusterName", eq: "cluster1"},
	}},
	"values.global.network reaches the proxies": {sets: []string{"values.global.network=network1"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.network", eq: "network1"},
	}},
	"values.global.configValidation=false leaves out the validating webhook": {sets: []string{"values.global.configValidation=false"}, effects: []effect{
		{obj: "ValidatingWebhookConfiguration/istio-validator-istio-system", absent: true},
	}},
	"values.global.defaultPodDisruptionBudget.enabled=false leaves out the budgets": {sets: []string{"values.pilot.autoscaleMin=2", "values.global.defaultPodDisruptionBudget.enabled=false"}, effects: []effect{
		{obj: "PodDisruptionBudget/discovery", absent: true},
	}},
	"values.global.variant is warned about":   {sets: []string{"values.global.variant=distroless"}, warn: "values.global.variant: accepted, but has no effect in discovery"},
	"values.global.mountMtlsCerts is refused": {sets: []string{"values.global.mountMtlsCerts=true"}, err: "values.global.mountMtlsCerts: not supported by discovery"},

	// The injector.
	"values.sidecarInjectorWebhook.enableNamespacesByDefault injects every namespace": {sets: []string{"values.sidecarInjectorWebhook.enableNamespacesByDefault=true"}, effects: []effect{
		{obj: "MutatingWebhookConfiguration/istio-sidecar-injector", at: "webhooks.[name:namespace.sidecar-injector.istio.io].namespaceSelector.matchExpressions.[0].operator", eq: "NotIn"},
	}},
	"values.sidecarInjectorWebhook.reinvocationPolicy sets the webhooks'": {sets: []string{"values.sidecarInjectorWebhook.reinvocationPolicy=IfNeeded"}, effects: []effect{
		{obj: "MutatingWebhookConfiguration/istio-sidecar-injector", at: "webhooks.[0].reinvocationPolicy", eq: "IfNeeded"},
	}},
	"values.sidecarInjectorWebhook.neverInjectSelector reaches the injector": {sets: []string{"values.sidecarInjectorWebhook.neverInjectSelector[0].matchLabels.skip=true"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorConfig + ".neverInjectSelector.[0].matchLabels.skip", eq: "true"},
	}},
	"values.sidecarInjectorWebhook.injectedAnnotations reaches the injector": {sets: []string{"values.sidecarInjectorWebhook.injectedAnnotations.team=mesh"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorConfig + ".injectedAnnotations.team", eq: "mesh"},
	}},
	"values.sidecarInjectorWebhook.defaultTemplates reaches the injector": {sets: []string{"values.sidecarInjectorWebhook.defaultTemplates[0]=sidecar", "values.sidecarInjectorWebhook.defaultTemplates[1]=grpc-agent"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorConfig + ".defaultTemplates", has: "grpc-agent"},
	}},
	"an Istio native-sidecar flag turns on native sidecars": {sets: []string{"values.pilot.env.ENABLE_NATIVE_SIDECARS=true"}, effects: []effect{
		{obj: "ConfigMap/istio-sidecar-injector", at: injectorValues + ".global.nativeSidecar", eq: "true"},
	}},
	"values.revisionTags is accepted": {sets: []string{"values.revisionTags[0]=prod"}, effects: []effect{
		{obj: "MutatingWebhookConfiguration/istio-revision-tag-prod", at: "metadata.labels.istio\\.io/tag", eq: "prod"},
	}},

	// Base.
	"values.base.enableIstioConfigCRDs=false leaves out the CRDs": {sets: []string{"values.base.enableIstioConfigCRDs=false"}, effects: []effect{
		{obj: "CustomResourceDefinition/virtualservices.networking.istio.io", absent: true},
	}},
	"values.base.validationFailurePolicy sets the validator's": {sets: []string{"values.base.validationFailurePolicy=Fail"}, effects: []effect{
		{obj: "ValidatingWebhookConfiguration/istio-validator-istio-system", at: "webhooks.[0].failurePolicy", eq: "Fail"},
	}},

	// Gateways.
	"components.ingressGateways[0].enabled with Istio's list syntax": {sets: []string{"components.ingressGateways[0].enabled=false"}, effects: []effect{{obj: "Deployment/istio-ingressgateway", absent: true}}},
	"components.ingressGateways.[0].enabled with discovery's":        {sets: []string{"components.ingressGateways.[0].enabled=false"}, effects: []effect{{obj: "Deployment/istio-ingressgateway", absent: true}}},
	"a gateway chosen by name":                                       {sets: []string{"components.ingressGateways[name:istio-ingressgateway].enabled=false"}, effects: []effect{{obj: "Deployment/istio-ingressgateway", absent: true}}},
	"a name that selects no gateway is refused":                      {sets: []string{"components.ingressGateways.[name:nope].enabled=true"}, err: "[name:nope] selects no element"},
	"a new gateway by index": {sets: []string{"components.ingressGateways[1].name=edge"}, effects: []effect{
		{obj: "Deployment/edge", at: "spec.selector.matchLabels.app", eq: "edge"},
	}},
	"components.egressGateways[0].enabled turns on the egress gateway": {sets: []string{"components.egressGateways[0].enabled=true"}, effects: []effect{
		{obj: "Service/istio-egressgateway", at: "spec.type", eq: "ClusterIP"},
	}},
	"components.ingressGateways[0].k8s.service.type sets the Service type": {sets: []string{"components.ingressGateways[0].k8s.service.type=NodePort"}, effects: []effect{
		{obj: "Service/istio-ingressgateway", at: "spec.type", eq: "NodePort"},
	}},
	"components.ingressGateways[0].k8s.hpaSpec.maxReplicas sets the autoscaler's maximum": {sets: []string{"components.ingressGateways[0].k8s.hpaSpec.maxReplicas=10"}, effects: []effect{
		{obj: "HorizontalPodAutoscaler/istio-ingressgateway", at: "spec.maxReplicas", eq: "10"},
	}},
	"components.ingressGateways[0].label labels the pods": {sets: []string{"components.ingressGateways[0].label.team=edge"}, effects: []effect{
		{obj: "Deployment/istio-ingressgateway", at: "spec.template.metadata.labels.team", eq: "edge"},
	}},
	"components.ingressGateways[0].k8s.serviceAnnotations annotates the Service": {sets: []string{"components.ingressGateways[0].k8s.serviceAnnotations.team=edge"}, effects: []effect{
		{obj: "Service/istio-ingressgateway", at: "metadata.annotations.team", eq: "edge"},
	}},
	"values.gateways.istio-ingressgateway.type sets the Service type": {sets: []string{"values.gateways.istio-ingressgateway.type=NodePort"}, effects: []effect{
		{obj: "Service/istio-ingressgateway", at: "spec.type", eq: "NodePort"},
	}},
	"values.gateways.istio-ingressgateway.autoscaleEnabled=false leaves out the autoscaler": {sets: []string{"values.gateways.istio-ingressgateway.autoscaleEnabled=false"}, effects: []effect{
		{obj: "HorizontalPodAutoscaler/istio-ingressgateway", absent: true},
	}},
	"values.gateways.istio-ingressgateway.serviceAnnotations annotates the Service": {sets: []string{"values.gateways.istio-ingressgateway.serviceAnnotations.team=edge"}, effects: []effect{
		{obj: "Service/istio-ingressgateway", at: "metadata.annotations.team", eq: "edge"},
	}},
	"values.gateways.istio-ingressgateway.resources sets the proxy's resources": {sets: []string{"values.gateways.istio-ingressgateway.resources.requests.cpu=200m"}, effects: []effect{
		{obj: "Deployment/istio-ingressgateway", at: "spec.template.spec.containers.[name:istio-proxy].resources.requests.cpu", eq: "200m"},
	}},
	"values.gateways.istio-egressgateway.enabled turns on the egress gateway": {sets: []string{"values.gateways.istio-egressgateway.enabled=true"}, effects: []effect{
		{obj: "Deployment/istio-egressgateway", at: "metadata.name", eq: "istio-egressgateway"},
	}},
	"values.gateways.istio-ingressgateway.injectionTemplate picks the template": {sets: []string{"values.gateways.istio-ingressgateway.injectionTemplate=gateway"}, effects: []effect{
		{obj: "Deployment/istio-ingressgateway", at: "spec.template.metadata.annotations.inject\\.istio\\.io/templates", eq: "gateway"},
	}},
	"values.gateways.istio-ingressgateway.runAsRoot is warned about": {sets: []string{"values.gateways.istio-ingressgateway.runAsRoot=true"}, warn: "values.gateways.istio-ingressgateway.runAsRoot: accepted, but has no effect in discovery"},

	// Istio's components discovery does not have.
	"components.cni.enabled is refused":        {sets: []string{"components.cni.enabled=true"}, err: "components.cni.enabled: not supported by discovery"},
	"components.ztunnel.enabled is refused":    {sets: []string{"components.ztunnel.enabled=true"}, err: "components.ztunnel.enabled: not supported by discovery"},
	"components.cni.enabled=false is accepted": {sets: []string{"components.cni.enabled=false"}, effects: []effect{{obj: "Deployment/discovery", at: "metadata.name", eq: "discovery"}}},
	"values.cni settings are warned about":     {sets: []string{"values.cni.cniBinDir=/opt/cni/bin"}, warn: "values.cni: accepted, but has no effect in discovery"},
	"values.telemetry.enabled=false leaves no default metrics provider": {sets: []string{"values.telemetry.enabled=false"}, effects: []effect{
		{obj: "ConfigMap/istio", at: "data.mesh.defaultProviders", absent: true},
	}},
	"the remote profile points the webhooks at the remote discovery": {profile: "remote", sets: []string{"values.global.remotePilotAddress=discovery.example.com:15012"}, effects: []effect{
		{obj: "MutatingWebhookConfiguration/istio-sidecar-injector", at: "webhooks.[0].clientConfig.url", eq: "https://discovery.example.com:15017/inject"},
		{obj: "Deployment/discovery", absent: true},
	}},
}

// renderedObject finds kind/name in the manifest.
func renderedObject(m *Manifest, ref string) *unstructured.Unstructured {
	kind, name, _ := strings.Cut(ref, "/")
	for _, o := range m.Objects() {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// valueAt walks p through a decoded object; a string met before the end
// is parsed as YAML (ConfigMap data holding YAML or JSON).
func valueAt(v any, p Path) (any, bool) {
	for i, st := range p {
		if s, ok := v.(string); ok && i < len(p) {
			var inner any
			if err := yaml.Unmarshal([]byte(s), &inner); err != nil {
				return nil, false
			}
			v = inner
		}
		switch {
		case st.IsKey():
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[st.Key]; !ok {
				return nil, false
			}
		default:
			l, ok := v.([]any)
			if !ok {
				return nil, false
			}
			i := st.Index
			if st.MatchKey != "" {
				i = -1
				for j, e := range l {
					if em, ok := e.(map[string]any); ok && fmt.Sprint(em[st.MatchKey]) == st.MatchValue {
						i = j
						break
					}
				}
			}
			if i < 0 || i >= len(l) {
				return nil, false
			}
			v = l[i]
		}
	}
	return v, true
}

func printed(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (e effect) check(m *Manifest) error {
	o := renderedObject(m, e.obj)
	if e.absent && e.at == "" {
		if o != nil {
			return fmt.Errorf("%s is rendered", e.obj)
		}
		return nil
	}
	if o == nil {
		return fmt.Errorf("no %s rendered", e.obj)
	}
	p, err := ParsePath(e.at)
	if err != nil {
		return err
	}
	v, ok := valueAt(o.Object, p)
	switch {
	case e.absent && ok:
		return fmt.Errorf("%s %s = %s, want none", e.obj, e.at, printed(v))
	case e.absent:
		return nil
	case !ok:
		return fmt.Errorf("%s has no %s", e.obj, e.at)
	case e.has != "":
		if l, isList := v.([]any); isList {
			for _, x := range l {
				if printed(x) == e.has {
					return nil
				}
			}
			return fmt.Errorf("%s %s = %s, want it to have %q", e.obj, e.at, printed(v), e.has)
		}
		if !strings.Contains(printed(v), e.has) {
			return fmt.Errorf("%s %s = %s, want it to contain %q", e.obj, e.at, printed(v), e.has)
		}
	case printed(v) != e.eq:
		return fmt.Errorf("%s %s = %s, want %s", e.obj, e.at, printed(v), e.eq)
	}
	return nil
}

func TestSetPaths(t *testing.T) {
	for name, tc := range setCases {
		t.Run(name, func(t *testing.T) {
			m, err := Render(renderOpts(), Input{Profile: tc.profile, Sets: tc.sets})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.effects {
				if err := e.check(m); err != nil {
					t.Error(err)
				}
			}
			warnings := m.Warnings
			if tc.warn != "" && !strings.Contains(strings.Join(warnings, "\n"), tc.warn) {
				t.Errorf("warnings %q, want one containing %q", warnings, tc.warn)
			}
			if tc.warn == "" && len(warnings) > 0 {
				t.Errorf("unexpected warnings %q", warnings)
			}
		})
	}
}

// TestSetPathsTable keeps test/compat/INSTALL_SETS.md in step with setCases.
func TestSetPathsTable(t *testing.T) {
	names := make([]string, 0, len(setCases))
	for n := range setCases {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Istio's --set paths: their effect in discovery\n\n")
	fmt.Fprintf(&b, "Generated by `go test ./pkg/install -run TestSetPathsTable -update` from the cases of\n")
	fmt.Fprintf(&b, "pkg/install/set_paths_test.go, which `make test` checks against the render; do not edit.\n")
	fmt.Fprintf(&b, "Objects are those of `discovery manifest generate --set ...` over the default profile.\n\n")
	fmt.Fprintf(&b, "%d cases.\n\n| case | --set | effect |\n|---|---|---|\n", len(names))
	for _, n := range names {
		tc := setCases[n]
		var sets []string
		if tc.profile != "" {
			sets = append(sets, "--profile "+tc.profile)
		}
		for _, s := range tc.sets {
			sets = append(sets, "`"+s+"`")
		}
		var eff []string
		for _, e := range tc.effects {
			eff = append(eff, e.String())
		}
		if tc.warn != "" {
			eff = append(eff, "warning: "+tc.warn)
		}
		if tc.err != "" {
			eff = append(eff, "refused: "+tc.err)
		}
		row := fmt.Sprintf("| %s | %s | %s |\n", n, strings.Join(sets, " "), strings.Join(eff, "; "))
		b.WriteString(strings.ReplaceAll(row, "\\|", "|"))
	}
	if *update {
		if err := os.WriteFile(installSetsMD, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(installSetsMD)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/install -run TestSetPathsTable -update)", err)
	}
	if !bytes.Equal(want, b.Bytes()) {
		t.Errorf("%s is stale: run go test ./pkg/install -run TestSetPathsTable -update", installSetsMD)
	}
}
