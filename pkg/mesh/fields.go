package mesh

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// Applied says, for each top-level MeshConfig field discovery acts on,
// what it changes. Every other field that a MeshConfig sets is reported
// (Config.Ignored), and so are the parts of these fields listed in
// partlyIgnored.
var Applied = map[string]string{
	"rootNamespace":                  "where mesh-wide Sidecar, PeerAuthentication, AuthorizationPolicy, DestinationRule and Telemetry configuration is read",
	"trustDomain":                    "the SPIFFE trust domain of identities, read at start-up unless --trust-domain is given on the command line",
	"trustDomainAliases":             "identities of these domains count as the mesh's own (server verification, AuthorizationPolicy principals)",
	"outboundTrafficPolicy":          "ALLOW_ANY or REGISTRY_ONLY for sidecars whose Sidecar resource sets none",
	"inboundTrafficPolicy":           "inbound clusters send to the pod address (PASSTHROUGH) or to localhost (LOCALHOST)",
	"enableAutoMtls":                 "clients pick mTLS for endpoints in the mesh when no DestinationRule sets TLS",
	"defaultConfig":                  "the injector's proxy defaults (PROXY_CONFIG of injected pods: proxyMetadata, holdApplicationUntilProxyStarts, discoveryAddress, tracing, ...)",
	"accessLogFile":                  "the proxies' access log file (used when no Telemetry or default provider configures access logging)",
	"accessLogFormat":                "the access log format",
	"accessLogEncoding":              "TEXT or JSON access logs",
	"extensionProviders":             "providers the Telemetry API and defaultProviders name (prometheus; envoyFileAccessLog, envoyHttpAls, envoyTcpAls, envoyOtelAls; zipkin, opentelemetry, datadog, skywalking), and AuthorizationPolicy CUSTOM names (envoyExtAuthzHttp, envoyExtAuthzGrpc)",
	"defaultProviders":               "the metrics, access log and tracing providers where no Telemetry names one",
	"enableTracing":                  "connection managers trace (sampling and tags from defaultConfig.tracing) when neither Telemetry nor defaultProviders.tracing configure tracing",
	"defaultServiceExportTo":         "the exportTo of Services and ServiceEntries that set none",
	"defaultVirtualServiceExportTo":  "the exportTo of VirtualServices that set none",
	"defaultDestinationRuleExportTo": "the exportTo of DestinationRules that set none",
	"connectTimeout":                 "the clusters' connect timeout (a DestinationRule's connectionPool.tcp.connectTimeout wins)",
	"protocolDetectionTimeout":       "how long a sidecar waits for the first bytes of a connection on a sniffed port",
	"h2UpgradePolicy":                "HTTP/1.1 connections to services in the mesh are upgraded to HTTP/2 (a DestinationRule's connectionPool.http.h2UpgradePolicy wins)",
	"defaultHttpRetryPolicy":         "the retries of outbound routes whose VirtualService sets none (a VirtualService's retries win)",
	"dnsRefreshRate":                 "how often DNS clusters (ServiceEntries with resolution DNS) resolve their hosts again, sooner when a record's TTL is shorter",
	"localityLbSetting":              "locality load balancing of the clusters whose DestinationRule sets none (enabled, distribute; failover and failoverPriority where the rule sets outlierDetection, as in istiod), per proxy locality",
}

// notApplied gives the reason some fields that are often set change
// nothing; any other field not in Applied gets a generic one.
var notApplied = map[string]string{
	"ingressClass":                "Kubernetes Ingress resources are not read",
	"ingressService":              "Kubernetes Ingress resources are not read",
	"ingressControllerMode":       "Kubernetes Ingress resources are not read",
	"ingressSelector":             "Kubernetes Ingress resources are not read",
	"zoneAwareLbSetting":          "zone-aware load balancing is not implemented (localityLbSetting is)",
	"enablePrometheusMerge":       "the injector does not rewrite prometheus.io annotations",
	"proxyListenPort":             "sidecars' outbound listener is always on 15001",
	"proxyInboundListenPort":      "sidecars' inbound listener is always on 15006",
	"discoverySelectors":          "every namespace is read",
	"serviceSettings":             "clusterLocal services are not implemented",
	"pathNormalization":           "paths are always normalized as BASE",
	"enableEnvoyAccessLogService": "use the Telemetry API with an envoyHttpAls provider instead",
}

// ignoredFields lists what the text set that discovery does not act on.
func ignoredFields(mc *meshv1alpha1.MeshConfig, raw map[string]json.RawMessage) []Field {
	md := mc.ProtoReflect().Descriptor()
	var out []Field
	for key := range raw {
		fd := fieldByName(md, key)
		if fd == nil {
			continue // unknown: reported by unknownFields
		}
		name := fd.JSONName()
		if _, ok := Applied[name]; ok {
			out = append(out, partlyIgnored(mc, name)...)
			continue
		}
		why := notApplied[name]
		if why == "" {
			why = "not implemented by discovery"
		}
		out = append(out, Field{Path: name, Reason: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// partlyIgnored lists the parts of an applied field that are not applied.
func partlyIgnored(mc *meshv1alpha1.MeshConfig, name string) []Field {
	var out []Field
	switch name {
	case "outboundTrafficPolicy":
		if mc.GetOutboundTrafficPolicy().GetTls() != nil {
			out = append(out, Field{Path: "outboundTrafficPolicy.tls", Reason: "ALLOW_ANY_DYNAMIC_DNS is not implemented"})
		}
		if mc.GetOutboundTrafficPolicy().GetMode() == meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY_DYNAMIC_DNS {
			out = append(out, Field{Path: "outboundTrafficPolicy.mode", Reason: "ALLOW_ANY_DYNAMIC_DNS is served as ALLOW_ANY"})
		}
	case "extensionProviders":
		for _, p := range mc.GetExtensionProviders() {
			if why := unsupportedProvider(p); why != "" {
				out = append(out, Field{Path: fmt.Sprintf("extensionProviders[%s]", p.GetName()), Reason: why})
			}
		}
	case "defaultProviders":
		if t := mc.GetDefaultProviders().GetTracing(); len(t) > 1 {
			out = append(out, Field{Path: "defaultProviders.tracing", Reason: "only the first provider is used, as in istiod"})
		}
	}
	return out
}

// SupportedProvider reports whether discovery configures proxies for an
// extension provider of p's type, and for which signals.
func SupportedProvider(p *meshv1alpha1.MeshConfig_ExtensionProvider) (metrics, logs bool) {
	switch p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus:
		return true, false
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog,
		*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyHttpAls,
		*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyTcpAls,
		*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOtelAls:
		return false, true
	}
	return false, false
}

// TracingProvider reports whether discovery configures tracing for an
// extension provider of p's type. Lightstep is not among them: Istio
// deprecated it and istiod cannot build it either.
func TracingProvider(p *meshv1alpha1.MeshConfig_ExtensionProvider) bool {
	switch p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin,
		*meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry,
		*meshv1alpha1.MeshConfig_ExtensionProvider_Datadog,
		*meshv1alpha1.MeshConfig_ExtensionProvider_Skywalking:
		return true
	}
	return false
}

func unsupportedProvider(p *meshv1alpha1.MeshConfig_ExtensionProvider) string {
	if p.GetEnvoyExtAuthzHttp() != nil || p.GetEnvoyExtAuthzGrpc() != nil {
		// AuthorizationPolicy CUSTOM's (xds/gen/authz_custom.go); every
		// field is served (clearRouteCache is not read, as in istiod).
		return ""
	}
	if m, l := SupportedProvider(p); m || l || TracingProvider(p) {
		return tracingPartlyIgnored(p)
	}
	kind := "no provider"
	if p.GetProvider() != nil {
		kind = strings.TrimPrefix(fmt.Sprintf("%T", p.GetProvider()), "*v1alpha1.MeshConfig_ExtensionProvider_")
	}
	if p.GetName() == "stackdriver" && p.GetStackdriver() != nil {
		return "" // one of Istio's defaults: reported where a Telemetry names it
	}
	return "provider type " + kind + " is not supported; Telemetry that names it is reported"
}

// fieldByName finds a field as jsonpb does: by JSON name or proto name.
func fieldByName(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByJSONName(key); fd != nil {
		return fd
	}
	return md.Fields().ByName(protoreflect.Name(key))
}

// tracingPartlyIgnored names the parts of a tracing provider discovery
// does not apply.
func tracingPartlyIgnored(p *meshv1alpha1.MeshConfig_ExtensionProvider) string {
	var headers []*meshv1alpha1.MeshConfig_ExtensionProvider_HttpHeader
	switch prov := p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin:
		headers = prov.Zipkin.GetHeaders()
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry:
		o := prov.Opentelemetry
		if o.GetServiceAttributeEnrichment() == meshv1alpha1.MeshConfig_ExtensionProvider_OTEL_SEMANTIC_CONVENTIONS {
			return "serviceAttributeEnrichment OTEL_SEMANTIC_CONVENTIONS is not applied: spans are named after the node cluster"
		}
		headers = append(append(o.GetHttp().GetHeaders(), o.GetGrpc().GetInitialMetadata()...), o.GetDynatraceSampler().GetHttpService().GetHttp().GetHeaders()...)
	}
	for _, h := range headers {
		if h.GetEnvName() != "" {
			return fmt.Sprintf("header %q names istiod's environment variable %q, which discovery does not read: it is sent empty", h.GetName(), h.GetEnvName())
		}
	}
	return ""
}
