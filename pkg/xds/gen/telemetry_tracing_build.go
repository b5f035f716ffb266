package gen

import (
	"fmt"
	"net/url"
	"sort"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	uuidv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"
	envdetectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/tracers/opentelemetry/resource_detectors/v3"
	samplersv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/tracers/opentelemetry/samplers/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"

	"github.com/meshplane/discovery/pkg/model"
)

// The connection managers' tracing, as istiod builds it
// (configureTracingFromTelemetry): the tracer of the provider
// (envoy.tracers.zipkin, .datadog, .skywalking, .opentelemetry) with its
// collector's outbound cluster (the provider's service, looked up as for
// access logs: istiod adds no cluster of its own), sampling, custom tags
// sorted by name, and the UUID request ID extension every connection
// manager carries (use_request_id_for_trace_sampling: the Telemetry's,
// else true).

// Tracer names.
const (
	zipkinTracer     = "envoy.tracers.zipkin"
	datadogTracer    = "envoy.tracers.datadog"
	skywalkingTracer = "envoy.tracers.skywalking"
	otelTracer       = "envoy.tracers.opentelemetry"
)

// defaultRequestID is Istio's UUIDRequestIDExtension: request IDs drive
// trace sampling.
var defaultRequestID = requestIDExtension(true)

func requestIDExtension(useForSampling bool) *hcmv3.RequestIDExtension {
	return &hcmv3.RequestIDExtension{TypedConfig: mustAny(&uuidv3.UuidRequestIdConfig{
		UseRequestIdForTraceSampling: wrapperspb.Bool(useForSampling),
	})}
}

// tracingInput is what building a class's tracing reads.
type tracingInput struct {
	look     meshLookup
	d        *tracingDecision
	proxy    *model.Proxy
	shared   bool                  // placeholders for the service tags' values (class_shared.go)
	pc       *meshv1alpha1.Tracing // the proxy's ProxyConfig tracing
	sampling float64               // PILOT_TRACE_SAMPLING
}

// buildTracing is the tracing and request ID extension of the connection
// managers of traffic class c; err says why a configured provider could
// not be (the managers then do not trace, as from istiod).
func buildTracing(in tracingInput, c trafficClass) (*hcmv3.HttpConnectionManager_Tracing, *hcmv3.RequestIDExtension, error) {
	if in.d == nil {
		if !in.look.mesh.GetEnableTracing() {
			return nil, defaultRequestID, nil
		}
		t := &hcmv3.HttpConnectionManager_Tracing{}
		setSampling(t, samplingOf(in.pc, in.sampling))
		t.CustomTags = customTags(in, nil)
		if n := in.pc.GetMaxPathTagLength(); n != 0 {
			t.MaxPathTagLength = wrapperspb.UInt32(n)
		}
		return t, defaultRequestID, nil
	}
	spec := in.d.forClass(c)
	if spec.disabled {
		return nil, defaultRequestID, nil
	}
	t, customSampler, err := providerTracing(in, spec.provider)
	if err != nil {
		return nil, defaultRequestID, fmt.Errorf("tracing provider %q: %w", spec.providerName, err)
	}
	switch {
	case customSampler:
		setSampling(t, 100)
	case spec.sampling != nil:
		setSampling(t, *spec.sampling)
	default:
		setSampling(t, samplingOf(in.pc, in.sampling))
	}
	t.CustomTags = customTags(in, &spec)
	if t.MaxPathTagLength == nil && in.pc.GetMaxPathTagLength() != 0 {
		t.MaxPathTagLength = wrapperspb.UInt32(in.pc.GetMaxPathTagLength())
	}
	if spec.noContext && versionAtLeast(in.proxy.Metadata.IstioVersion, 1, 30) {
		t.NoContextPropagation = true
	}
	if spec.useRequestID {
		return t, defaultRequestID, nil
	}
	return t, requestIDExtension(false), nil
}

func setSampling(t *hcmv3.HttpConnectionManager_Tracing, random float64) {
	t.ClientSampling = &typev3.Percent{Value: 100}
	t.OverallSampling = &typev3.Percent{Value: 100}
	t.RandomSampling = &typev3.Percent{Value: random}
}

// providerTracing is Istio's configureFromProviderConfig: the tracer of
// provider p; customSampler when p samples itself (an opentelemetry
// sampler: then every span reaches it).
func providerTracing(in tracingInput, p *meshv1alpha1.MeshConfig_ExtensionProvider) (t *hcmv3.HttpConnectionManager_Tracing, customSampler bool, err error) {
	childSpan := in.proxy.Type == model.ProxyRouter
	var maxTag uint32
	var name string
	var cfg *anypb.Any
	switch prov := p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin:
		name, maxTag = zipkinTracer, prov.Zipkin.GetMaxTagLength()
		cfg, err = zipkinConfig(in, prov.Zipkin)
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Datadog:
		name, maxTag = datadogTracer, prov.Datadog.GetMaxTagLength()
		host, cluster, ok := in.look.cluster(prov.Datadog.GetService(), prov.Datadog.GetPort())
		if !ok {
			return nil, false, errNoService(prov.Datadog.GetService())
		}
		cfg = mustAny(&tracev3.DatadogConfig{CollectorCluster: cluster, ServiceName: in.proxy.ServiceCluster, CollectorHostname: host})
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Skywalking:
		name, childSpan = skywalkingTracer, true
		host, cluster, ok := in.look.cluster(prov.Skywalking.GetService(), prov.Skywalking.GetPort())
		if !ok {
			return nil, false, errNoService(prov.Skywalking.GetService())
		}
		cfg = mustAny(&tracev3.SkyWalkingConfig{GrpcService: envoyGRPC(cluster, host)})
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry:
		name, maxTag = otelTracer, prov.Opentelemetry.GetMaxTagLength()
		cfg, customSampler, err = otelConfig(in, prov.Opentelemetry)
	default:
		return nil, false, fmt.Errorf("provider type %s does not trace (or is not supported)", providerType(p))
	}
	if err != nil {
		return nil, false, err
	}
	t = &hcmv3.HttpConnectionManager_Tracing{}
	if childSpan {
		t.SpawnUpstreamSpan = wrapperspb.Bool(true)
	}
	t.Provider = &tracev3.Tracing_Http{Name: name, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: cfg}}
	if maxTag != 0 {
		t.MaxPathTagLength = wrapperspb.UInt32(maxTag)
	}
	return t, customSampler, nil
}

func errNoService(s string) error {
	return fmt.Errorf("no single service %q in the registry", s)
}

func envoyGRPC(cluster, host string) *corev3.GrpcService {
	return &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
		EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host},
	}}
}

// zipkinConfig is Istio's zipkinConfig: proxies of Istio 1.29 and later
// get the collector as an HTTP service (timeout, default 5s, and
// headers), older ones the legacy collector fields; the trace context
// option from 1.28.
func zipkinConfig(in tracingInput, z *meshv1alpha1.MeshConfig_ExtensionProvider_ZipkinTracingProvider) (*anypb.Any, error) {
	host, cluster, ok := in.look.cluster(z.GetService(), z.GetPort())
	if !ok {
		return nil, errNoService(z.GetService())
	}
	path := z.GetPath()
	if path == "" {
		path = "/api/v2/spans"
	}
	zc := &tracev3.ZipkinConfig{
		CollectorEndpointVersion: tracev3.ZipkinConfig_HTTP_JSON,
		TraceId_128Bit:           !z.GetEnable_64BitTraceId(),
		SharedSpanContext:        wrapperspb.Bool(false),
	}
	version := in.proxy.Metadata.IstioVersion
	if versionAtLeast(version, 1, 29) {
		timeout := z.GetTimeout()
		if timeout == nil {
			timeout = durationpb.New(5 * time.Second)
		}
		svc := &corev3.HttpService{HttpUri: &corev3.HttpUri{
			Uri:              "http://" + host + path,
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster},
			Timeout:          timeout,
		}}
		if len(z.GetHeaders()) > 0 {
			svc.RequestHeadersToAdd = headerOptions(z.GetHeaders())
		}
		zc.CollectorService = svc
	} else {
		zc.CollectorCluster, zc.CollectorEndpoint, zc.CollectorHostname = cluster, path, host
	}
	if versionAtLeast(version, 1, 28) &&
		z.GetTraceContextOption() == meshv1alpha1.MeshConfig_ExtensionProvider_ZipkinTracingProvider_USE_B3_WITH_W3C_PROPAGATION {
		zc.TraceContextOption = tracev3.ZipkinConfig_USE_B3_WITH_W3C_PROPAGATION
	}
	return mustAny(zc), nil
}

// Istio's opentelemetry resource detectors.
var (
	envResourceDetector = &corev3.TypedExtensionConfig{
		Name:        "envoy.tracers.opentelemetry.resource_detectors.environment",
		TypedConfig: mustAny(&envdetectorv3.EnvironmentResourceDetectorConfig{}),
	}
	dynatraceResourceDetector = &corev3.TypedExtensionConfig{
		Name:        "envoy.tracers.opentelemetry.resource_detectors.dynatrace",
		TypedConfig: mustAny(&envdetectorv3.DynatraceResourceDetectorConfig{}),
	}
)

// otelConfig is Istio's otelConfig: export over gRPC, or over HTTP when
// the provider says http; resource detectors; the Dynatrace sampler.
func otelConfig(in tracingInput, o *meshv1alpha1.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider) (*anypb.Any, bool, error) {
	host, cluster, ok := in.look.cluster(o.GetService(), o.GetPort())
	if !ok {
		return nil, false, errNoService(o.GetService())
	}
	oc := &tracev3.OpenTelemetryConfig{ServiceName: in.proxy.ServiceCluster}
	if h := o.GetHttp(); h != nil {
		uri, err := url.JoinPath(host, h.GetPath())
		if err != nil {
			return nil, false, fmt.Errorf("otlp/http path: %w", err)
		}
		oc.HttpService = &corev3.HttpService{
			HttpUri: &corev3.HttpUri{
				Uri: uri, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster}, Timeout: h.GetTimeout(),
			},
			RequestHeadersToAdd: headerOptions(h.GetHeaders()),
		}
	} else {
		oc.GrpcService = envoyGRPC(cluster, host)
		oc.GrpcService.Timeout = o.GetGrpc().GetTimeout()
		if md := o.GetGrpc().GetInitialMetadata(); md != nil {
			oc.GrpcService.InitialMetadata = make([]*corev3.HeaderValue, 0, len(md))
			for _, h := range md {
				oc.GrpcService.InitialMetadata = append(oc.GrpcService.InitialMetadata, &corev3.HeaderValue{Key: h.GetName(), Value: h.GetValue()})
			}
		}
	}
	if rd := o.GetResourceDetectors(); rd != nil {
		if rd.GetEnvironment() != nil {
			oc.ResourceDetectors = append(oc.ResourceDetectors, envResourceDetector)
		}
		if rd.GetDynatrace() != nil {
			oc.ResourceDetectors = append(oc.ResourceDetectors, dynatraceResourceDetector)
		}
	}
	if o.GetSampling() == nil {
		return mustAny(oc), false, nil
	}
	if dt := o.GetDynatraceSampler(); dt != nil {
		s, err := dynatraceSampler(in, host, cluster, o, dt)
		if err != nil {
			return nil, false, err
		}
		oc.Sampler = s
	}
	return mustAny(oc), true, nil
}

func dynatraceSampler(in tracingInput, host, cluster string, o *meshv1alpha1.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider,
	dt *meshv1alpha1.MeshConfig_ExtensionProvider_OpenTelemetryTracingProvider_DynatraceSampler,
) (*corev3.TypedExtensionConfig, error) {
	dsc := &samplersv3.DynatraceSamplerConfig{Tenant: dt.GetTenant(), ClusterId: dt.GetClusterId(), RootSpansPerMinute: dt.GetRootSpansPerMinute()}
	if api := dt.GetHttpService(); api != nil {
		h, c, ok := in.look.cluster(api.GetService(), api.GetPort())
		if !ok {
			return nil, errNoService(api.GetService())
		}
		uri, err := url.JoinPath(h, api.GetHttp().GetPath())
		if err != nil {
			return nil, fmt.Errorf("dynatrace sampler path: %w", err)
		}
		dsc.HttpService = &corev3.HttpService{
			HttpUri:             &corev3.HttpUri{Uri: uri, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: c}, Timeout: api.GetHttp().GetTimeout()},
			RequestHeadersToAdd: headerOptions(api.GetHttp().GetHeaders()),
		}
	} else {
		h := o.GetHttp()
		if h == nil {
			return nil, fmt.Errorf("the dynatrace sampler needs the provider's http settings or its own httpService")
		}
		uri, err := url.JoinPath(host, "api/v2/samplingConfiguration")
		if err != nil {
			return nil, err
		}
		dsc.HttpService = &corev3.HttpService{
			HttpUri:             &corev3.HttpUri{Uri: uri, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster}, Timeout: h.GetTimeout()},
			RequestHeadersToAdd: headerOptions(h.GetHeaders()),
		}
	}
	return &corev3.TypedExtensionConfig{Name: "envoy.tracers.opentelemetry.samplers.dynatrace", TypedConfig: mustAny(dsc)}, nil
}

// headerOptions is Istio's buildHTTPHeaders. A header whose value names an
// environment variable (envName) reads istiod's environment in Istio;
// discovery does not read it, and sends the empty value (what istiod sends
// when the variable is not set); reportProviders says so.
func headerOptions(hs []*meshv1alpha1.MeshConfig_ExtensionProvider_HttpHeader) []*corev3.HeaderValueOption {
	out := make([]*corev3.HeaderValueOption, 0, len(hs))
	for _, h := range hs {
		out = append(out, &corev3.HeaderValueOption{
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			Header:       &corev3.HeaderValue{Key: h.GetName(), Value: h.GetValue()},
		})
	}
	return out
}

// customTags is Istio's configureCustomTags: Istio's tags (the proxy's
// canonical service and revision, mesh, namespace, cluster, and the
// authorization dry-run results) unless turned off, then the Telemetry's
// custom tags, else the ProxyConfig's; sorted by name.
func customTags(in tracingInput, spec *tracingSpec) []*tracingv3.CustomTag {
	var tags []*tracingv3.CustomTag
	istio := true
	if spec == nil {
		if v := in.pc.GetEnableIstioTags(); v != nil {
			istio = v.GetValue()
		}
	} else {
		istio = spec.istioTags
	}
	if istio {
		st := serviceTags(in.proxy)
		if in.shared {
			st = placeholderTags()
		}
		tags = append(st, dryRunTags...)
	}
	if spec == nil || len(spec.customTags) == 0 {
		tags = append(tags, proxyConfigTags(in.pc.GetCustomTags())...)
	} else {
		tags = append(tags, telemetryTags(in.proxy, spec.customTags)...)
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].Tag < tags[j].Tag })
	return tags
}

func literalTag(name, value string) *tracingv3.CustomTag {
	return &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Literal_{Literal: &tracingv3.CustomTag_Literal{Value: value}}}
}

func orUnknown(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// serviceTags is Istio's buildServiceTags.
func serviceTags(p *model.Proxy) []*tracingv3.CustomTag {
	l := p.Labels()
	return []*tracingv3.CustomTag{
		literalTag("istio.canonical_revision", orUnknown(l[canonicalRevisionLabel], "latest")),
		literalTag("istio.canonical_service", orUnknown(l[canonicalNameLabel], "unknown")),
		literalTag("istio.mesh_id", orUnknown(p.Metadata.MeshID, "unknown")),
		literalTag("istio.namespace", orUnknown(p.Metadata.Namespace, "default")),
		literalTag("istio.cluster_id", orUnknown(p.Metadata.ClusterID, "unknown")),
	}
}

// dryRunTags are Istio's optionalPolicyTags: the RBAC filters' shadow
// (dry-run) results from the request's dynamic metadata.
var dryRunTags = []*tracingv3.CustomTag{
	dryRunTag("istio.authorization.dry_run.allow_policy.name", "istio_dry_run_allow_shadow_effective_policy_id"),
	dryRunTag("istio.authorization.dry_run.allow_policy.result", "istio_dry_run_allow_shadow_engine_result"),
	dryRunTag("istio.authorization.dry_run.deny_policy.name", "istio_dry_run_deny_shadow_effective_policy_id"),
	dryRunTag("istio.authorization.dry_run.deny_policy.result", "istio_dry_run_deny_shadow_engine_result"),
}

func dryRunTag(name, key string) *tracingv3.CustomTag {
	return &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Metadata_{Metadata: &tracingv3.CustomTag_Metadata{
		Kind: &metadatav3.MetadataKind{Kind: &metadatav3.MetadataKind_Request_{Request: &metadatav3.MetadataKind_Request{}}},
		MetadataKey: &metadatav3.MetadataKey{
			Key:  "envoy.filters.http.rbac",
			Path: []*metadatav3.MetadataKey_PathSegment{{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: key}}},
		},
	}}}
}

func envTag(name, env, dflt string) *tracingv3.CustomTag {
	return &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Environment_{Environment: &tracingv3.CustomTag_Environment{Name: env, DefaultValue: dflt}}}
}

func headerTag(name, header, dflt string) *tracingv3.CustomTag {
	return &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_RequestHeader{RequestHeader: &tracingv3.CustomTag_Header{Name: header, DefaultValue: dflt}}}
}

// telemetryTags is Istio's buildCustomTagsFromProvider; formatter tags
// need Istio 1.29 proxies.
func telemetryTags(p *model.Proxy, tags map[string]*tpb.Tracing_CustomTag) []*tracingv3.CustomTag {
	formatter := versionAtLeast(p.Metadata.IstioVersion, 1, 29)
	out := make([]*tracingv3.CustomTag, 0, len(tags))
	for name, t := range tags {
		if t == nil {
			continue
		}
		switch v := t.GetType().(type) {
		case *tpb.Tracing_CustomTag_Environment:
			out = append(out, envTag(name, v.Environment.GetName(), v.Environment.GetDefaultValue()))
		case *tpb.Tracing_CustomTag_Header:
			out = append(out, headerTag(name, v.Header.GetName(), v.Header.GetDefaultValue()))
		case *tpb.Tracing_CustomTag_Literal:
			out = append(out, literalTag(name, v.Literal.GetValue()))
		case *tpb.Tracing_CustomTag_Formatter:
			if formatter {
				out = append(out, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Value{Value: v.Formatter.GetValue()}})
			}
		default:
			out = append(out, &tracingv3.CustomTag{Tag: name})
		}
	}
	return out
}

// proxyConfigTags is Istio's buildCustomTagsFromProxyConfig.
func proxyConfigTags(tags map[string]*meshv1alpha1.Tracing_CustomTag) []*tracingv3.CustomTag {
	out := make([]*tracingv3.CustomTag, 0, len(tags))
	for name, t := range tags {
		switch v := t.GetType().(type) {
		case *meshv1alpha1.Tracing_CustomTag_Environment:
			out = append(out, envTag(name, v.Environment.GetName(), v.Environment.GetDefaultValue()))
		case *meshv1alpha1.Tracing_CustomTag_Header:
			out = append(out, headerTag(name, v.Header.GetName(), v.Header.GetDefaultValue()))
		case *meshv1alpha1.Tracing_CustomTag_Literal:
			out = append(out, literalTag(name, v.Literal.GetValue()))
		}
	}
	return out
}
