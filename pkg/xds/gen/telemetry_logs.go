package gen

import (
	"sort"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filelogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	grpclogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	otellogv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	reqwithoutqueryv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/formatter/req_without_query/v3"
	otlpcommon "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/meshplane/discovery/pkg/model"
)

// Access logs, as istiod builds them (pilot/pkg/model/telemetry_logging.go,
// pilot/pkg/networking/core/accesslog.go): the MeshConfig's accessLogFile,
// accessLogFormat and accessLogEncoding when no Telemetry resource and no
// default provider configures access logging; otherwise one log per
// provider: envoyFileAccessLog, envoyHttpAls, envoyTcpAls, envoyOtelAls.

// envoyJSONLogFormat is Istio's default JSON access log format.
var envoyJSONLogFormat = func() *structpb.Struct {
	fields := map[string]string{
		"start_time": "%START_TIME%", "route_name": "%ROUTE_NAME%", "method": "%REQ(:METHOD)%",
		"path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "protocol": "%PROTOCOL%", "response_code": "%RESPONSE_CODE%",
		"response_flags": "%RESPONSE_FLAGS%", "response_code_details": "%RESPONSE_CODE_DETAILS%",
		"connection_termination_details": "%CONNECTION_TERMINATION_DETAILS%", "bytes_received": "%BYTES_RECEIVED%",
		"bytes_sent": "%BYTES_SENT%", "duration": "%DURATION%", "upstream_service_time": "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
		"x_forwarded_for": "%REQ(X-FORWARDED-FOR)%", "user_agent": "%REQ(USER-AGENT)%", "request_id": "%REQ(X-REQUEST-ID)%",
		"authority": "%REQ(:AUTHORITY)%", "upstream_host": "%UPSTREAM_HOST%", "upstream_cluster": "%UPSTREAM_CLUSTER_RAW%",
		"upstream_local_address": "%UPSTREAM_LOCAL_ADDRESS%", "downstream_local_address": "%DOWNSTREAM_LOCAL_ADDRESS%",
		"downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%", "requested_server_name": "%REQUESTED_SERVER_NAME%",
		"upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
	}
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range fields {
		s.Fields[k] = structpb.NewStringValue(v)
	}
	return s
}()

// Filter state the metadata exchange leaves, for the gRPC log services.
var (
	peerStateToLog = []string{"upstream_peer", "downstream_peer"}
	wasmStateToLog = []string{"upstream_peer", "downstream_peer", "wasm.upstream_peer", "wasm.upstream_peer_id", "wasm.downstream_peer", "wasm.downstream_peer_id"}
)

var reqWithoutQuery = &corev3.TypedExtensionConfig{Name: "envoy.formatter.req_without_query", TypedConfig: mustAny(&reqwithoutqueryv3.ReqWithoutQuery{})}

// meshLookup is what the access log providers need of a World.
type meshLookup struct {
	w    *view
	mesh *meshv1alpha1.MeshConfig
}

func (m meshLookup) provider(name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	return m.w.Mesh().Provider(name)
}

// cluster is Istio's LookupCluster: the outbound cluster of the service
// named NAMESPACE/HOST, or HOST when one namespace has it.
func (m meshLookup) cluster(service string, port uint32) (host, cluster string, ok bool) {
	ns, h, named := strings.Cut(service, "/")
	if !named {
		h, ns = service, ""
	}
	named1 := m.w.ServicesWhere(func(_ *view, s *model.Service) bool {
		return s.Hostname == h && (ns == "" || s.Namespace == ns)
	})
	if len(named1) != 1 {
		return "", "", false
	}
	found := named1[0]
	return found.Hostname, ClusterName(int32(port), "", found.Hostname), true
}

// textFormat adds the newline Istio adds to every text format, or is
// Istio's default format.
func textFormat(f string) string {
	if f == "" {
		return envoyTextLogFormat
	}
	if !strings.HasSuffix(f, "\n") {
		f += "\n"
	}
	return f
}

func textFormatters(f string) []*corev3.TypedExtensionConfig {
	if strings.Contains(f, "%REQ_WITHOUT_QUERY") {
		return []*corev3.TypedExtensionConfig{reqWithoutQuery}
	}
	return nil
}

func jsonFormatters(s *structpb.Struct) []*corev3.TypedExtensionConfig {
	for _, v := range s.GetFields() {
		if strings.Contains(v.GetStringValue(), "%REQ_WITHOUT_QUERY") {
			return []*corev3.TypedExtensionConfig{reqWithoutQuery}
		}
	}
	return nil
}

// meshFileAccessLog is Istio's FileAccessLogFromMeshConfig: the file log of
// accessLogFile in accessLogEncoding, with accessLogFormat or Istio's
// default format (a JSON format that does not parse falls back to the
// default, as in Istio).
func meshFileAccessLog(path string, mc *meshv1alpha1.MeshConfig, filter *accesslogv3.AccessLogFilter) *accesslogv3.AccessLog {
	fl := &filelogv3.FileAccessLog{Path: path}
	var formatters []*corev3.TypedExtensionConfig
	if mc.GetAccessLogEncoding() == meshv1alpha1.MeshConfig_JSON {
		format := envoyJSONLogFormat
		if f := mc.GetAccessLogFormat(); f != "" {
			parsed := &structpb.Struct{}
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(f), parsed); err == nil {
				format = parsed
			}
		}
		formatters = jsonFormatters(format)
		fl.AccessLogFormat = &filelogv3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format:            &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: format},
			JsonFormatOptions: &corev3.JsonFormatOptions{SortProperties: false},
		}}
	} else {
		text := textFormat(mc.GetAccessLogFormat())
		formatters = textFormatters(text)
		fl.AccessLogFormat = &filelogv3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
				Specifier: &corev3.DataSource_InlineString{InlineString: text},
			}},
		}}
	}
	if len(formatters) > 0 {
		fl.GetLogFormat().Formatters = formatters
	}
	return &accesslogv3.AccessLog{Name: fileAccessLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(fl)}, Filter: filter}
}

// providerAccessLog is Istio's telemetryAccessLog; nil for providers that
// write no access log or whose service is not found.
func providerAccessLog(m meshLookup, p *meshv1alpha1.MeshConfig_ExtensionProvider) *accesslogv3.AccessLog {
	switch prov := p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog:
		f := prov.EnvoyFileAccessLog
		if p.GetName() == "envoy" && f.GetLogFormat() == nil && !f.GetOmitEmptyValues() {
			// Istio's built-in provider takes the MeshConfig's format.
			return meshFileAccessLog(f.GetPath(), m.mesh, nil)
		}
		return providerFileAccessLog(f)
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyHttpAls:
		return httpALS(m, prov.EnvoyHttpAls)
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyTcpAls:
		return tcpALS(m, prov.EnvoyTcpAls)
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOtelAls:
		return otelALS(m, prov.EnvoyOtelAls)
	}
	return nil
}

func providerFileAccessLog(f *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider) *accesslogv3.AccessLog {
	path := f.GetPath()
	if path == "" {
		path = "/dev/stdout"
	}
	fl := &filelogv3.FileAccessLog{Path: path}
	var formatters []*corev3.TypedExtensionConfig
	switch lf := f.GetLogFormat().GetLogFormat().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider_LogFormat_Labels:
		labels := lf.Labels
		if len(labels.GetFields()) == 0 {
			labels = envoyJSONLogFormat
		}
		formatters = jsonFormatters(labels)
		fl.AccessLogFormat = &filelogv3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format:            &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: labels},
			JsonFormatOptions: &corev3.JsonFormatOptions{SortProperties: false},
			OmitEmptyValues:   f.GetOmitEmptyValues(),
		}}
	default:
		text := ""
		if t, ok := lf.(*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider_LogFormat_Text); ok {
			text = t.Text
		}
		text = textFormat(text)
		formatters = textFormatters(text)
		fl.AccessLogFormat = &filelogv3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
				Specifier: &corev3.DataSource_InlineString{InlineString: text},
			}},
			OmitEmptyValues: f.GetOmitEmptyValues(),
		}}
	}
	if len(formatters) > 0 {
		fl.GetLogFormat().Formatters = formatters
	}
	return &accesslogv3.AccessLog{Name: fileAccessLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(fl)}}
}

func grpcCommon(logName, host, cluster string, state []string) *grpclogv3.CommonGrpcAccessLogConfig {
	return &grpclogv3.CommonGrpcAccessLogConfig{
		LogName: logName,
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host},
		}},
		TransportApiVersion:     corev3.ApiVersion_V3,
		FilterStateObjectsToLog: state,
	}
}

func httpALS(m meshLookup, p *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyHttpGrpcV3LogProvider) *accesslogv3.AccessLog {
	host, cluster, ok := m.cluster(p.GetService(), p.GetPort())
	if !ok {
		return nil
	}
	name := p.GetLogName()
	if name == "" {
		name = "http_envoy_accesslog"
	}
	state := peerStateToLog
	if len(p.GetFilterStateObjectsToLog()) > 0 {
		state = p.GetFilterStateObjectsToLog()
	}
	cfg := &grpclogv3.HttpGrpcAccessLogConfig{
		CommonConfig:                    grpcCommon(name, host, cluster, state),
		AdditionalRequestHeadersToLog:   p.GetAdditionalRequestHeadersToLog(),
		AdditionalResponseHeadersToLog:  p.GetAdditionalResponseHeadersToLog(),
		AdditionalResponseTrailersToLog: p.GetAdditionalResponseTrailersToLog(),
	}
	return &accesslogv3.AccessLog{Name: httpGRPCLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(cfg)}}
}

func tcpALS(m meshLookup, p *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyTcpGrpcV3LogProvider) *accesslogv3.AccessLog {
	host, cluster, ok := m.cluster(p.GetService(), p.GetPort())
	if !ok {
		return nil
	}
	name := p.GetLogName()
	if name == "" {
		name = "tcp_envoy_accesslog"
	}
	state := peerStateToLog
	if len(p.GetFilterStateObjectsToLog()) > 0 {
		state = p.GetFilterStateObjectsToLog()
	}
	cfg := &grpclogv3.TcpGrpcAccessLogConfig{CommonConfig: grpcCommon(name, host, cluster, state)}
	return &accesslogv3.AccessLog{Name: tcpGRPCLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(cfg)}}
}

func otelALS(m meshLookup, p *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOpenTelemetryLogProvider) *accesslogv3.AccessLog {
	host, cluster, ok := m.cluster(p.GetService(), p.GetPort())
	if !ok {
		return nil
	}
	name := p.GetLogName()
	if name == "" {
		name = "otel_envoy_accesslog"
	}
	format := envoyTextLogFormat
	if t := p.GetLogFormat().GetText(); t != "" {
		format = t
	}
	cfg := &otellogv3.OpenTelemetryAccessLogConfig{
		CommonConfig:         grpcCommon(name, host, cluster, wasmStateToLog),
		DisableBuiltinLabels: true,
		Body:                 &otlpcommon.AnyValue{Value: &otlpcommon.AnyValue_StringValue{StringValue: format}},
	}
	labels := p.GetLogFormat().GetLabels()
	if len(labels.GetFields()) > 0 {
		keys := make([]string, 0, len(labels.GetFields()))
		for k := range labels.GetFields() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		kv := &otlpcommon.KeyValueList{}
		for _, k := range keys {
			kv.Values = append(kv.Values, &otlpcommon.KeyValue{Key: k, Value: &otlpcommon.AnyValue{
				Value: &otlpcommon.AnyValue_StringValue{StringValue: labels.GetFields()[k].GetStringValue()},
			}})
		}
		cfg.Attributes = kv
	}
	cfg.Formatters = append(textFormatters(format), jsonFormatters(labels)...)
	if len(cfg.Formatters) > 1 {
		cfg.Formatters = cfg.Formatters[:1] // the same formatter, once
	}
	return &accesslogv3.AccessLog{Name: otelLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(cfg)}}
}

// tcpProxyFilter is a TCP proxy to cluster with access logs.
func tcpProxyFilter(statPrefix, cluster string, logs []*accesslogv3.AccessLog) *listenerv3.Filter {
	return &listenerv3.Filter{
		Name: "envoy.filters.network.tcp_proxy",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&tcpv3.TcpProxy{
			StatPrefix: statPrefix, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster}, AccessLog: logs,
		})},
	}
}
