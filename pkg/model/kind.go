package model

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind names a type of object the World holds.
type Kind string

// Kinds read from Kubernetes or a config directory.
const (
	KindService               Kind = "Service"
	KindEndpointSlice         Kind = "EndpointSlice"
	KindPod                   Kind = "Pod"
	KindNamespace             Kind = "Namespace"
	KindNode                  Kind = "Node"
	KindVirtualService        Kind = "VirtualService"
	KindDestinationRule       Kind = "DestinationRule"
	KindGateway               Kind = "Gateway"
	KindServiceEntry          Kind = "ServiceEntry"
	KindSidecar               Kind = "Sidecar"
	KindWorkloadEntry         Kind = "WorkloadEntry"
	KindPeerAuthentication    Kind = "PeerAuthentication"
	KindAuthorizationPolicy   Kind = "AuthorizationPolicy"
	KindRequestAuthentication Kind = "RequestAuthentication"
	KindTelemetry             Kind = "Telemetry"
	KindEnvoyFilter           Kind = "EnvoyFilter"
	KindWorkloadGroup         Kind = "WorkloadGroup"
	KindProxyConfig           Kind = "ProxyConfig"
	KindWasmPlugin            Kind = "WasmPlugin"
	KindTrafficExtension      Kind = "TrafficExtension"
)

// Kinds of the Kubernetes Gateway API (gateway.networking.k8s.io), read
// with sigs.k8s.io/gateway-api's own Go types (apis/v1). The Gateway API's
// Gateway is KindKubernetesGateway, as Istio names it, so that it cannot
// be mistaken for Istio's Gateway (KindGateway); its API kind is still
// "Gateway". The translation (pkg/model/gatewayapi) turns them into
// Istio Gateways and VirtualServices held beside the user's (derived.go).
const (
	KindGatewayClass      Kind = "GatewayClass"
	KindKubernetesGateway Kind = "KubernetesGateway"
	KindHTTPRoute         Kind = "HTTPRoute"
	KindGRPCRoute         Kind = "GRPCRoute"
	KindTCPRoute          Kind = "TCPRoute"
	KindTLSRoute          Kind = "TLSRoute"
	KindReferenceGrant    Kind = "ReferenceGrant"
	// KindBackendTLSPolicy (v1 in gateway-api v1.6) makes a gateway's and
	// the mesh's traffic to a Service originate TLS; the translation turns
	// it into a DestinationRule (backendtls.go of pkg/model/gatewayapi).
	KindBackendTLSPolicy Kind = "BackendTLSPolicy"
)

// KindCAConfigMap is a ConfigMap read for its CA certificates only (keys
// ca.crt and cacert; every other key is dropped before it is cached), as
// a BackendTLSPolicy's caCertificateRefs name them. Its Event Object is a
// *corev1.ConfigMap; its API kind is ConfigMap, but KindFor never returns
// it (a ConfigMap in a config directory is a KindConfigMap, which the
// MeshConfig watcher passes on as a KindCAConfigMap unless it is the
// mesh's).
const KindCAConfigMap Kind = "CAConfigMap"

// KindConfigMap is read for one object only, the mesh's MeshConfig (the
// istio ConfigMap of the control plane's namespace): the MeshConfig
// watcher (pkg/config/mesh) turns it into a KindMeshConfig event, and the
// Store drops any ConfigMap that reaches it.
const KindConfigMap Kind = "ConfigMap"

// KindMeshConfig is derived: its one object (Key MeshKey) is the
// MeshConfig in force, an Event Object of type *MeshObject.
const KindMeshConfig Kind = "MeshConfig"

// MeshKey names the MeshConfig in force.
var MeshKey = Key{Kind: KindMeshConfig, Name: "mesh"}

// KindEndpoints is derived, never read: a Change of this kind, named after a
// Service, says that the Service's endpoint set changed (through its
// EndpointSlices or the Pods behind them).
const KindEndpoints Kind = "Endpoints"

// Group names of Istio's APIs.
const (
	GroupNetworking = "networking.istio.io"
	GroupSecurity   = "security.istio.io"
	GroupTelemetry  = "telemetry.istio.io"
	GroupExtensions = "extensions.istio.io"
	// GroupGatewayAPI is the Kubernetes Gateway API's group.
	GroupGatewayAPI = "gateway.networking.k8s.io"
)

// kindInfo describes where a Kind lives in the Kubernetes API.
type kindInfo struct {
	group string
	// version is the version discovery watches and stores: v1 where
	// Istio serves it, else Istio's storage version (EnvoyFilter v1alpha3,
	// ProxyConfig v1beta1, the extensions v1alpha1).
	version  string
	resource string // plural, as in the REST path
	// older lists further versions accepted from files, converted on read.
	older []string
}

var kindInfos = map[Kind]kindInfo{
	KindService:               {"", "v1", "services", nil},
	KindEndpointSlice:         {"discovery.k8s.io", "v1", "endpointslices", nil},
	KindPod:                   {"", "v1", "pods", nil},
	KindNamespace:             {"", "v1", "namespaces", nil},
	KindNode:                  {"", "v1", "nodes", nil},
	KindVirtualService:        {GroupNetworking, "v1", "virtualservices", []string{"v1beta1", "v1alpha3"}},
	KindDestinationRule:       {GroupNetworking, "v1", "destinationrules", []string{"v1beta1", "v1alpha3"}},
	KindGateway:               {GroupNetworking, "v1", "gateways", []string{"v1beta1", "v1alpha3"}},
	KindServiceEntry:          {GroupNetworking, "v1", "serviceentries", []string{"v1beta1", "v1alpha3"}},
	KindSidecar:               {GroupNetworking, "v1", "sidecars", []string{"v1beta1", "v1alpha3"}},
	KindWorkloadEntry:         {GroupNetworking, "v1", "workloadentries", []string{"v1beta1", "v1alpha3"}},
	KindPeerAuthentication:    {GroupSecurity, "v1", "peerauthentications", []string{"v1beta1"}},
	KindAuthorizationPolicy:   {GroupSecurity, "v1", "authorizationpolicies", []string{"v1beta1"}},
	KindRequestAuthentication: {GroupSecurity, "v1", "requestauthentications", []string{"v1beta1"}},
	KindTelemetry:             {GroupTelemetry, "v1", "telemetries", []string{"v1alpha1"}},
	KindEnvoyFilter:           {GroupNetworking, "v1alpha3", "envoyfilters", nil},
	KindWorkloadGroup:         {GroupNetworking, "v1", "workloadgroups", []string{"v1beta1", "v1alpha3"}},
	KindProxyConfig:           {GroupNetworking, "v1beta1", "proxyconfigs", nil},
	KindWasmPlugin:            {GroupExtensions, "v1alpha1", "wasmplugins", nil},
	KindTrafficExtension:      {GroupExtensions, "v1alpha1", "trafficextensions", nil},
	KindConfigMap:             {"", "v1", "configmaps", nil},
	KindGatewayClass:          {GroupGatewayAPI, "v1", "gatewayclasses", []string{"v1beta1"}},
	KindKubernetesGateway:     {GroupGatewayAPI, "v1", "gateways", []string{"v1beta1"}},
	KindHTTPRoute:             {GroupGatewayAPI, "v1", "httproutes", []string{"v1beta1"}},
	KindGRPCRoute:             {GroupGatewayAPI, "v1", "grpcroutes", nil},
	KindTCPRoute:              {GroupGatewayAPI, "v1", "tcproutes", nil},
	KindTLSRoute:              {GroupGatewayAPI, "v1", "tlsroutes", nil},
	KindReferenceGrant:        {GroupGatewayAPI, "v1", "referencegrants", []string{"v1beta1"}},
	KindBackendTLSPolicy:      {GroupGatewayAPI, "v1", "backendtlspolicies", nil},
	KindCAConfigMap:           {"", "v1", "configmaps", nil},
}

// apiKinds names the API kind of a Kind where the two differ.
var apiKinds = map[Kind]string{KindKubernetesGateway: "Gateway", KindCAConfigMap: "ConfigMap"}

// apiKind is k's kind in the Kubernetes API.
func (k Kind) apiKind() string {
	if a, ok := apiKinds[k]; ok {
		return a
	}
	return string(k)
}

// byGroupKind maps an API group and kind to the Kind.
var byGroupKind = func() map[schema.GroupKind]Kind {
	m := make(map[schema.GroupKind]Kind, len(kindInfos))
	for k, info := range kindInfos {
		if k == KindCAConfigMap {
			continue // a ConfigMap is a KindConfigMap
		}
		m[schema.GroupKind{Group: info.group, Kind: k.apiKind()}] = k
	}
	return m
}()

// GatewayAPIKinds lists the Gateway API kinds discovery reads, in a fixed
// order. Their CRDs are the user's: each is read while its CRD is there.
// BackendTLSPolicy's CA ConfigMaps are read as KindCAConfigMap. Not read
// yet: UDPRoute, ListenerSet (see the README's Gateway API section).
var GatewayAPIKinds = []Kind{
	KindGatewayClass, KindKubernetesGateway, KindHTTPRoute, KindGRPCRoute, KindTCPRoute, KindTLSRoute, KindReferenceGrant,
	KindBackendTLSPolicy,
}

// CRDKinds lists every kind whose CRD may come and go: Istio's, then the
// Gateway API's.
var CRDKinds = append(append([]Kind{}, IstioKinds...), GatewayAPIKinds...)

// IsGatewayAPI reports whether k is one of the Gateway API kinds.
func (k Kind) IsGatewayAPI() bool {
	info, ok := kindInfos[k]
	return ok && info.group == GroupGatewayAPI
}

// IsConfig reports whether k is a configuration kind held as a Config in
// the World: Istio's or the Gateway API's.
func (k Kind) IsConfig() bool { return k.IsIstio() || k.IsGatewayAPI() }

// IstioKinds lists the Istio configuration kinds, in a fixed order: every
// kind whose CRD Istio's base chart installs. Discovery reads them all;
// what generation does with each is gen.ReadsKind's and
// gen.UnsupportedFields' to say.
var IstioKinds = []Kind{
	KindVirtualService, KindDestinationRule, KindGateway, KindServiceEntry, KindSidecar,
	KindWorkloadEntry, KindPeerAuthentication, KindAuthorizationPolicy, KindRequestAuthentication, KindTelemetry,
	KindEnvoyFilter, KindWorkloadGroup, KindProxyConfig, KindWasmPlugin, KindTrafficExtension,
}

// KubeKinds lists the core Kubernetes kinds, in a fixed order. Nodes are
// read for their topology labels only (the locality of the pods on them).
var KubeKinds = []Kind{KindService, KindEndpointSlice, KindPod, KindNamespace, KindNode}

// IsIstio reports whether k is one of Istio's configuration kinds.
func (k Kind) IsIstio() bool {
	info, ok := kindInfos[k]
	return ok && (info.group == GroupNetworking || info.group == GroupSecurity || info.group == GroupTelemetry || info.group == GroupExtensions)
}

// GroupVersionKind is the version of k that discovery watches.
func (k Kind) GroupVersionKind() schema.GroupVersionKind {
	info := kindInfos[k]
	return schema.GroupVersionKind{Group: info.group, Version: info.version, Kind: k.apiKind()}
}

// GroupVersionResource is the REST resource of k that discovery watches.
func (k Kind) GroupVersionResource() schema.GroupVersionResource {
	info := kindInfos[k]
	return schema.GroupVersionResource{Group: info.group, Version: info.version, Resource: info.resource}
}

// Namespaced reports whether objects of k live in a namespace.
func (k Kind) Namespaced() bool {
	return k != KindNamespace && k != KindNode && k != KindGatewayClass
}

// KindFor maps an apiVersion's group and version plus a kind to a Kind
// discovery reads. Older Istio versions (v1beta1, v1alpha3, v1alpha1)
// are accepted where Istio serves them.
func KindFor(gvk schema.GroupVersionKind) (Kind, error) {
	k, ok := byGroupKind[gvk.GroupKind()]
	info := kindInfos[k]
	if !ok {
		return "", fmt.Errorf("%s is not a kind discovery reads (known: %v)", gvk.GroupKind(), knownKinds())
	}
	if gvk.Version == info.version {
		return k, nil
	}
	for _, v := range info.older {
		if gvk.Version == v {
			return k, nil
		}
	}
	return "", fmt.Errorf("%s: version %q is not served (use %s)", gvk.GroupKind(), gvk.Version, info.version)
}

func knownKinds() []string {
	out := make([]string, 0, len(KubeKinds)+len(CRDKinds)+1)
	for _, k := range append(append(append([]Kind{}, KubeKinds...), IstioKinds...), append(GatewayAPIKinds, KindConfigMap)...) {
		gvk := k.GroupVersionKind()
		out = append(out, gvk.GroupVersion().String()+"/"+gvk.Kind)
	}
	return out
}

// Op says whether an Event adds or changes an object, or removes it.
type Op uint8

// Event operations.
const (
	OpUpsert Op = iota
	OpDelete
)

func (o Op) String() string {
	if o == OpDelete {
		return "delete"
	}
	return "upsert"
}

// Key names one object.
type Key struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (k Key) String() string {
	if k.Namespace == "" {
		return string(k.Kind) + "/" + k.Name
	}
	return string(k.Kind) + "/" + k.Namespace + "/" + k.Name
}

// NamespacedName names an object within its kind.
type NamespacedName struct {
	Namespace string
	Name      string
}

func (n NamespacedName) String() string { return n.Namespace + "/" + n.Name }

// Event is one change reported by a source. Object is the typed object for
// OpUpsert, as client-go and istio.io/client-go define it (for Istio kinds,
// always the v1 type): *corev1.Service, *discoveryv1.EndpointSlice,
// *corev1.Pod, *corev1.Namespace, *corev1.Node, *networkingv1.VirtualService, ...; for
// the kinds Istio serves in no v1, the type of the version discovery
// watches: *networkingv1alpha3.EnvoyFilter, *networkingv1beta1.ProxyConfig,
// *extensionsv1alpha1.WasmPlugin, *extensionsv1alpha1.TrafficExtension);
// for the Gateway API kinds, sigs.k8s.io/gateway-api's apis/v1 types
// (*gatewayv1.Gateway, *gatewayv1.HTTPRoute, ...). It is
// nil for OpDelete. Objects handed to the Store must not be changed after.
type Event struct {
	Op     Op
	Key    Key
	Object runtime.Object
}
