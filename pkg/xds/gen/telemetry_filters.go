package gen

import (
	"maps"
	"slices"

	udpav1 "github.com/cncf/xds/go/udpa/type/v1"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	grpcstatsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_stats/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	alpnv2 "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"
	"istio.io/api/envoy/extensions/stats"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"

	"github.com/meshplane/discovery/pkg/model"
)

// The filters Istio's proxy build provides for telemetry, configured as
// istiod configures them (pilot/pkg/xds/filters, pilot/pkg/model
// telemetry*.go): the same names, typed configs and places, so that
// Istio's unchanged proxy produces Istio's metrics (istio_requests_total,
// istio_request_duration_milliseconds, istio_request_bytes,
// istio_response_bytes, istio_tcp_*) with Istio's labels.
//
//	HTTP connection manager, in order:
//	  istio.metadata_exchange   peer metadata (io.istio.http.peer_metadata.Config,
//	                            as a TypedStruct): inbound discovers the
//	                            downstream peer, outbound and gateways the
//	                            upstream one, from Istio's headers and the
//	                            workload discovery
//	  RBAC filters              (authz.go)
//	  envoy.filters.http.grpc_stats   gRPC message counts for istio.stats
//	  istio.alpn                outbound and gateways: the ALPN that tells a
//	                            peer sidecar which HTTP protocol follows
//	  fault, cors
//	  istio.stats               (stats.PluginConfig) when a prometheus provider
//	                            applies
//	  router
//	Network filters:
//	  istio.metadata_exchange   inbound (and gateway ISTIO_MUTUAL TCP): the TCP
//	                            peer exchange over ALPN istio-peer-exchange
//	  RBAC, istio.stats, tcp_proxy (access logs on the tcp_proxy)
//	Clusters: the istio.metadata_exchange upstream filter on outbound
//	  service clusters and PassthroughCluster, and istio metadata naming
//	  the service (istio.services), which istio.stats reads for the
//	  destination_service labels.
//
// Proxyless gRPC gets none of these, as from istiod: grpc-go has no
// istio.stats filter, and istiod configures no stats for it.
//
// Chosen differently from istiod: the endpoint metadata istio.workload
// (the destination workload of a peer without a sidecar) is not sent:
// discovery does not resolve a pod's owning workload.

// Filter names and type URLs of Istio's proxy extensions.
const (
	statsFilterName    = "istio.stats"
	mxFilterName       = "istio.metadata_exchange"
	alpnFilterName     = "istio.alpn"
	grpcStatsName      = "envoy.filters.http.grpc_stats"
	peerMetadataType   = "type.googleapis.com/io.istio.http.peer_metadata.Config"
	metadataExchType   = "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange"
	fileAccessLogName  = "envoy.access_loggers.file"
	httpGRPCLogName    = "envoy.access_loggers.http_grpc"
	tcpGRPCLogName     = "envoy.tcp_grpc_access_log"
	otelLogName        = "envoy.access_loggers.open_telemetry"
	celLogFilterName   = "envoy.access_loggers.extension_filters.cel"
	istioMetadataKey   = "istio"
	peerExchangeALPN   = "istio-peer-exchange"
	envoyTextLogFormat = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% " +
		"%PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% " +
		"%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% " +
		"\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% " +
		"%DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" " +
		"\"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" " +
		"%UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% " +
		"%DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n"
)

// typedStruct is Istio's protoconv.TypedStructWithFields: a config of a
// type the proxy knows and go-control-plane does not, as a udpa TypedStruct.
func typedStruct(typeURL string, fields map[string]any) *anypb.Any {
	v, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err) // static maps of strings, lists and maps
	}
	return mustAny(&udpav1.TypedStruct{TypeUrl: typeURL, Value: v})
}

// The filters that do not depend on configuration, built once.
var (
	inboundMXFilter = &hcmv3.HttpFilter{Name: mxFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: typedStruct(peerMetadataType, map[string]any{
		"downstream_discovery":   []any{map[string]any{"istio_headers": map[string]any{}}, map[string]any{"workload_discovery": map[string]any{}}},
		"downstream_propagation": []any{map[string]any{"istio_headers": map[string]any{}}},
	})}}
	outboundMXFilter = &hcmv3.HttpFilter{Name: mxFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: typedStruct(peerMetadataType, map[string]any{
		"upstream_discovery":   []any{map[string]any{"istio_headers": map[string]any{}}, map[string]any{"workload_discovery": map[string]any{}}},
		"upstream_propagation": []any{map[string]any{"istio_headers": map[string]any{}}},
	})}}
	tcpMXConfig     = typedStruct(metadataExchType, map[string]any{"protocol": peerExchangeALPN, "enable_discovery": true})
	tcpListenerMX   = &listenerv3.Filter{Name: mxFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: tcpMXConfig}}
	tcpClusterMX    = &clusterv3.Filter{Name: mxFilterName, TypedConfig: tcpMXConfig}
	grpcStatsFilter = &hcmv3.HttpFilter{Name: grpcStatsName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&grpcstatsv3.FilterConfig{
		EmitFilterState:        true,
		PerMethodStatSpecifier: &grpcstatsv3.FilterConfig_StatsForAllMethods{StatsForAllMethods: wrapperspb.Bool(false)},
	})}}
	// alpnFilter makes upstream mTLS carry the HTTP protocol in the ALPN
	// (istio-http/1.0, istio-http/1.1, istio-h2), which the peer's inbound
	// chains match on; "istio" and the plain ALPN keep older and
	// out-of-mesh peers working, as in Istio.
	alpnFilter = &hcmv3.HttpFilter{Name: alpnFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&alpnv2.FilterConfig{
		AlpnOverride: []*alpnv2.FilterConfig_AlpnOverride{
			{UpstreamProtocol: alpnv2.FilterConfig_HTTP10, AlpnOverride: []string{"istio-http/1.0", "istio", "http/1.0"}},
			{UpstreamProtocol: alpnv2.FilterConfig_HTTP11, AlpnOverride: []string{"istio-http/1.1", "istio", "http/1.1"}},
			{UpstreamProtocol: alpnv2.FilterConfig_HTTP2, AlpnOverride: []string{"istio-h2", "istio", "h2"}},
		},
	})}}
)

// listenerTelemetry is what telemetry adds to the listeners of one
// traffic class of one proxy class. It is immutable once built; nil adds
// nothing (proxyless gRPC).
type listenerTelemetry struct {
	class     trafficClass
	httpStats []*hcmv3.HttpFilter
	tcpStats  []*listenerv3.Filter
	// accessLogs go on connection managers and TCP proxies;
	// listenerLogs on listeners (with Istio's filter on NR, no chain
	// matched).
	accessLogs, listenerLogs []*accesslogv3.AccessLog
	// tracing and requestID go on connection managers
	// (telemetry_tracing.go); tracing nil: no tracing.
	tracing   *hcmv3.HttpConnectionManager_Tracing
	requestID *hcmv3.RequestIDExtension
}

// classTelemetry is the telemetry of one proxy class, per traffic class.
type classTelemetry struct {
	// reads are what it was decided from (the MeshConfig and the
	// Telemetry resources): a listener built with it read them too.
	reads   *Reads
	byClass [3]*listenerTelemetry
}

func (ct *classTelemetry) of(c trafficClass) *listenerTelemetry {
	if ct == nil {
		return nil
	}
	return ct.byClass[c]
}

// httpFilters is a connection manager's filter list: metadata exchange,
// rbac, gRPC stats, ALPN (not inbound), then tail (fault, cors), istio.stats
// and the router. Without telemetry: rbac, tail, router.
func (t *listenerTelemetry) httpFilters(rbac []*hcmv3.HttpFilter, tail ...*hcmv3.HttpFilter) []*hcmv3.HttpFilter {
	if t == nil {
		out := make([]*hcmv3.HttpFilter, 0, len(rbac)+len(tail)+1)
		return append(append(append(out, rbac...), tail...), routerFilter())
	}
	out := make([]*hcmv3.HttpFilter, 0, len(rbac)+len(tail)+len(t.httpStats)+4)
	if t.class == classInbound {
		out = append(out, inboundMXFilter)
	} else {
		out = append(out, outboundMXFilter)
	}
	out = append(out, rbac...)
	out = append(out, grpcStatsFilter)
	if t.class != classInbound {
		out = append(out, alpnFilter)
	}
	out = append(append(out, tail...), t.httpStats...)
	return append(out, routerFilter())
}

// manager sets m's filters (see httpFilters), access logs, tracing and
// request ID extension.
func (t *listenerTelemetry) manager(m *hcmv3.HttpConnectionManager, rbac []*hcmv3.HttpFilter, tail ...*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	m.HttpFilters = t.httpFilters(rbac, tail...)
	if t != nil {
		m.AccessLog = t.accessLogs
		m.Tracing = t.tracing
		m.RequestIdExtension = t.requestID
	}
	return m
}

// tcpChain is a TCP chain's filters: metadata exchange when mx, rbac,
// istio.stats, then the TCP proxy to cluster (with the access logs).
func (t *listenerTelemetry) tcpChain(mx bool, rbac []*listenerv3.Filter, statPrefix, cluster string) []*listenerv3.Filter {
	out := make([]*listenerv3.Filter, 0, len(rbac)+4)
	if t != nil && mx {
		out = append(out, tcpListenerMX)
	}
	out = append(out, rbac...)
	if t != nil {
		out = append(out, t.tcpStats...)
		return append(out, tcpProxyFilter(statPrefix, cluster, t.accessLogs))
	}
	return append(out, tcpFilter(statPrefix, cluster))
}

// logs are the access logs of connection managers and TCP proxies.
func (t *listenerTelemetry) logs() []*accesslogv3.AccessLog {
	if t == nil {
		return nil
	}
	return t.accessLogs
}

// tcpProxy is a TCP proxy to cluster with the access logs.
func (t *listenerTelemetry) tcpProxy(statPrefix, cluster string) *listenerv3.Filter {
	if t == nil {
		return tcpFilter(statPrefix, cluster)
	}
	return tcpProxyFilter(statPrefix, cluster, t.accessLogs)
}

// stack is a client-side TCP chain's filters: istio.stats, then proxy.
func (t *listenerTelemetry) stack(proxy *listenerv3.Filter) []*listenerv3.Filter {
	if t == nil || len(t.tcpStats) == 0 {
		return []*listenerv3.Filter{proxy}
	}
	return append(append(make([]*listenerv3.Filter, 0, len(t.tcpStats)+1), t.tcpStats...), proxy)
}

// httpChainFilters are the network filters of an HTTP chain: inbound, the
// TCP metadata exchange before the connection manager, as in Istio.
func (t *listenerTelemetry) httpChainFilters(m *hcmv3.HttpConnectionManager) []*listenerv3.Filter {
	if t != nil && t.class == classInbound {
		return []*listenerv3.Filter{tcpListenerMX, hcmFilter(m)}
	}
	return []*listenerv3.Filter{hcmFilter(m)}
}

// listener adds the listener-level access logs to l.
func (t *listenerTelemetry) listener(l *listenerv3.Listener) *listenerv3.Listener {
	if t != nil && len(t.listenerLogs) > 0 {
		l.AccessLog = t.listenerLogs
	}
	return l
}

// buildListenerTelemetry builds the filters and access logs of traffic
// class c from the decision d (telemetry.go). Providers are visited in
// name order, as Istio does. Provider types discovery cannot configure
// are left out (reportProviders says so).
func buildListenerTelemetry(mc meshLookup, d telemetryDecision, c trafficClass) *listenerTelemetry {
	t := &listenerTelemetry{class: c}
	logs := d.logs[c.mode()]
	names := map[string]bool{}
	for n, spec := range logs {
		if !spec.disabled {
			names[n] = true
		}
	}
	for n := range d.metrics {
		names[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		p := mc.provider(n)
		if _, ok := p.GetProvider().(*meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus); !ok {
			continue
		}
		m, ok := d.metrics[n]
		if !ok {
			continue
		}
		cfg := m.forClass(c)
		if cfg.disabled {
			continue
		}
		a := statsConfig(c, m.reportingInterval, cfg)
		t.httpStats = append(t.httpStats, &hcmv3.HttpFilter{Name: statsFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}})
		t.tcpStats = append(t.tcpStats, &listenerv3.Filter{Name: statsFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}})
	}
	if d.legacy {
		if file := mc.mesh.GetAccessLogFile(); file != "" {
			t.accessLogs = []*accesslogv3.AccessLog{meshFileAccessLog(file, mc.mesh, nil)}
			if !mc.mesh.GetDisableEnvoyListenerLog() {
				t.listenerLogs = []*accesslogv3.AccessLog{meshFileAccessLog(file, mc.mesh, noRouteFilter())}
			}
		}
		return t
	}
	for _, n := range slices.Sorted(maps.Keys(logs)) {
		spec := logs[n]
		if spec.disabled {
			continue
		}
		p := mc.provider(n)
		if p == nil {
			continue
		}
		al := providerAccessLog(mc, p)
		if al == nil {
			continue
		}
		t.accessLogs = append(t.accessLogs, withLogFilter(al, celFilter(spec.filter)))
		if !mc.mesh.GetDisableEnvoyListenerLog() {
			t.listenerLogs = append(t.listenerLogs, withLogFilter(al, andFilters(noRouteFilter(), celFilter(spec.filter))))
		}
	}
	return t
}

// metricToPrometheus maps Istio's metric names to what istio.stats calls
// them (istio_ is the stats prefix).
var metricToPrometheus = map[string]string{
	"REQUEST_COUNT":          "requests_total",
	"REQUEST_DURATION":       "request_duration_milliseconds",
	"REQUEST_SIZE":           "request_bytes",
	"RESPONSE_SIZE":          "response_bytes",
	"TCP_OPENED_CONNECTIONS": "tcp_connections_opened_total",
	"TCP_CLOSED_CONNECTIONS": "tcp_connections_closed_total",
	"TCP_SENT_BYTES":         "tcp_sent_bytes_total",
	"TCP_RECEIVED_BYTES":     "tcp_received_bytes_total",
	"GRPC_REQUEST_MESSAGES":  "request_messages_total",
	"GRPC_RESPONSE_MESSAGES": "response_messages_total",
}

// statsConfig is Istio's generateStatsConfig: the host header is not a
// fallback for the destination service on inbound and gateway listeners
// (it comes from outside the mesh there); overrides become metric
// configs.
func statsConfig(c trafficClass, interval *durationpb.Duration, cfg metricConfig) *anypb.Any {
	pc := &stats.PluginConfig{
		DisableHostHeaderFallback: c == classInbound || c == classGateway,
		TcpReportingDuration:      interval,
	}
	for _, o := range cfg.overrides {
		name, ok := metricToPrometheus[o.name]
		if !ok {
			name = o.name
		}
		m := &stats.MetricConfig{Dimensions: map[string]string{}, Name: name, Drop: o.disabled}
		for _, t := range o.tags {
			if t.remove {
				m.TagsToRemove = append(m.TagsToRemove, t.name)
			} else {
				m.Dimensions[t.name] = t.value
			}
		}
		pc.Metrics = append(pc.Metrics, m)
	}
	return mustAny(pc)
}

// noRouteFilter is Istio's listener access log filter: log connections no
// filter chain took (response flag NR), which no other log sees.
func noRouteFilter() *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
		ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: []string{"NR"}},
	}}
}

// celFilter is a Telemetry accessLogging filter expression as Envoy's CEL
// access log filter; nil without one.
func celFilter(f *tpb.AccessLogging_Filter) *accesslogv3.AccessLogFilter {
	if f == nil {
		return nil
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{
		ExtensionFilter: &accesslogv3.ExtensionFilter{
			Name:       celLogFilterName,
			ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: mustAny(&celv3.ExpressionFilter{Expression: f.GetExpression()})},
		},
	}}
}

// andFilters is Istio's buildAccessLogFilter: nil, the one filter, or all.
func andFilters(fs ...*accesslogv3.AccessLogFilter) *accesslogv3.AccessLogFilter {
	var set []*accesslogv3.AccessLogFilter
	for _, f := range fs {
		if f != nil {
			set = append(set, f)
		}
	}
	switch len(set) {
	case 0:
		return nil
	case 1:
		return set[0]
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: set}}}
}

func withLogFilter(al *accesslogv3.AccessLog, f *accesslogv3.AccessLogFilter) *accesslogv3.AccessLog {
	if f == nil {
		return al
	}
	return &accesslogv3.AccessLog{Name: al.Name, ConfigType: al.ConfigType, Filter: f}
}

// clusterTelemetry adds to an outbound cluster of svc what Istio's
// telemetry reads: the istio metadata naming the service (istio.stats'
// destination_service labels) and the TCP metadata exchange filter (used
// where the upstream negotiates ALPN istio-peer-exchange).
func clusterTelemetry(c *clusterv3.Cluster, svc *model.Service, subset string) {
	setServicesMetadata(c, []*model.Service{svc})
	if subset != "" {
		c.Metadata.FilterMetadata[istioMetadataKey].Fields["subset"] = structpb.NewStringValue(subset)
	}
	c.Filters = append(c.Filters, tcpClusterMX)
}

// setServicesMetadata sets the cluster's istio metadata "services": the
// services it is for, each once by host, as Istio's addTelemetryMetadata
// (an inbound cluster is for every service that selects the pod on its
// port).
func setServicesMetadata(c *clusterv3.Cluster, svcs []*model.Service) {
	if len(svcs) == 0 {
		return
	}
	list := &structpb.ListValue{}
	seen := map[string]bool{}
	for _, s := range svcs {
		if seen[s.Hostname] {
			continue
		}
		seen[s.Hostname] = true
		list.Values = append(list.Values, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"host":      structpb.NewStringValue(s.Hostname),
			"name":      structpb.NewStringValue(s.Name),
			"namespace": structpb.NewStringValue(s.Namespace),
		}}))
	}
	if c.Metadata == nil {
		c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	}
	if c.Metadata.FilterMetadata == nil {
		c.Metadata.FilterMetadata = map[string]*structpb.Struct{}
	}
	im := c.Metadata.FilterMetadata[istioMetadataKey]
	if im == nil {
		im = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		c.Metadata.FilterMetadata[istioMetadataKey] = im
	}
	im.Fields["services"] = structpb.NewListValue(list)
}
