package istiovalidate

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	istiomodel "istio.io/istio/pilot/pkg/model"
	xdsfake "istio.io/istio/pilot/test/xds"
	istiomesh "istio.io/istio/pkg/config/mesh"
	kubelib "istio.io/istio/pkg/kube"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// The telemetry filters and access logs compared with istiod's, in
// process (istio.io/istio's FakeDiscoveryServer) on the same input: for
// each kind of chain (outbound or inbound, HTTP or TCP) and for the
// listeners themselves, every telemetry configuration discovery sends is
// one istiod sends in the same place, with the same filter names, typed
// configs and order. Listener layouts differ (discovery has a chain per
// service port and no HTTP passthrough chains), so chains are compared by
// kind, not one by one.

const telemetryKube = `apiVersion: v1
kind: Service
metadata: {name: productpage, namespace: default}
spec:
  clusterIP: 10.96.0.10
  selector: {app: productpage}
  ports:
  - {name: http, port: 9080, targetPort: 9080}
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.11
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, targetPort: 9080}
  - {name: tcp-db, port: 3306, targetPort: 3306}
---
apiVersion: v1
kind: Pod
metadata: {name: productpage-v1-abc, namespace: default, labels: {app: productpage, version: v1, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: productpage, containers: [{name: app, image: productpage}]}
status: {podIP: 10.1.0.5, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Service
metadata: {name: als, namespace: observability}
spec:
  clusterIP: 10.96.9.9
  ports:
  - {name: grpc, port: 9000, targetPort: 9000}
  - {name: grpc-otel, port: 4317, targetPort: 4317}
---
apiVersion: v1
kind: Service
metadata: {name: zipkin, namespace: istio-system}
spec:
  clusterIP: 10.96.9.1
  ports:
  - {name: http, port: 9411, targetPort: 9411}
---
apiVersion: v1
kind: Service
metadata: {name: collector, namespace: observability}
spec:
  clusterIP: 10.96.9.2
  ports:
  - {name: grpc-otlp, port: 4317, targetPort: 4317}
  - {name: http-otlp, port: 4318, targetPort: 4318}
  - {name: tcp-datadog, port: 8126, targetPort: 8126}
  - {name: grpc-skywalking, port: 11800, targetPort: 11800}
`

// tracingProviders are the tracing providers the tracing cases name.
const tracingProviders = `extensionProviders:
- name: zipkin
  zipkin:
    service: zipkin.istio-system.svc.cluster.local
    port: 9411
    maxTagLength: 256
    traceContextOption: USE_B3_WITH_W3C_PROPAGATION
    headers: [{name: x-tenant, value: mesh}]
- name: zipkin-legacy
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411, path: /spans, enable64bitTraceId: true}
- name: otel
  opentelemetry:
    service: observability/collector.observability.svc.cluster.local
    port: 4317
    maxTagLength: 99
    grpc:
      timeout: 3s
      initialMetadata: [{name: authorization, value: token}]
- name: otel-http
  opentelemetry:
    service: collector.observability.svc.cluster.local
    port: 4318
    http:
      path: /v1/traces
      timeout: 2s
      headers: [{name: x-api-key, value: secret}]
    resourceDetectors:
      environment: {}
      dynatrace: {}
    dynatraceSampler: {tenant: abc, clusterId: 123}
- name: datadog
  datadog: {service: collector.observability.svc.cluster.local, port: 8126, maxTagLength: 100}
- name: skywalking
  skywalking: {service: collector.observability.svc.cluster.local, port: 11800}
- name: missing
  zipkin: {service: nowhere.example.com, port: 9411}
- name: als
  envoyHttpAls: {service: als.observability.svc.cluster.local, port: 9000}
`

var telemetryCases = map[string]struct{ mesh, istio string }{
	"tracing off":                     {mesh: "enableTracing: false\n"},
	"legacy tracing, defaultConfig":   {mesh: "defaultConfig:\n  tracing:\n    sampling: 150\n    maxPathTagLength: 64\n    customTags:\n      env: {environment: {name: ENV, defaultValue: dev}}\n      ua: {header: {name: user-agent}}\n      lit: {literal: {value: v}}\n"},
	"legacy tracing, no Istio tags":   {mesh: "defaultConfig:\n  tracing:\n    sampling: 7\n    enableIstioTags: false\n"},
	"zipkin by default provider":      {mesh: "defaultProviders: {tracing: [zipkin, otel]}\n" + tracingProviders},
	"opentelemetry http with sampler": {mesh: "defaultProviders: {tracing: [otel-http]}\n" + tracingProviders},
	"datadog":                         {mesh: "defaultProviders: {tracing: [datadog]}\n" + tracingProviders},
	"provider service not found":      {mesh: "defaultProviders: {tracing: [missing]}\n" + tracingProviders},
	"provider that does not trace":    {mesh: "defaultProviders: {tracing: [als]}\n" + tracingProviders},
	"provider the MeshConfig lacks":   {mesh: "defaultProviders: {tracing: [nope]}\n" + tracingProviders},
	"Telemetry tracing merge": {
		mesh: "defaultProviders: {tracing: [zipkin-legacy]}\n" + tracingProviders,
		istio: `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  tracing:
  - providers: [{name: otel}, {name: zipkin}]
    randomSamplingPercentage: 12.5
    useRequestIdForTraceSampling: false
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: ns, namespace: default, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  tracing:
  - customTags:
      team: {literal: {value: bookinfo}}
      pod: {environment: {name: POD_NAME, defaultValue: unknown}}
      user: {header: {name: x-user}}
    enableIstioTags: false
    disableContextPropagation: true
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: productpage, namespace: default, creationTimestamp: "2026-01-03T00:00:00Z"}
spec:
  selector: {matchLabels: {app: productpage}}
  tracing:
  - match: {mode: SERVER}
    disableSpanReporting: true
  - match: {mode: CLIENT}
    providers: [{name: skywalking}]
`,
	},
	"Telemetry tracing, server side only": {
		mesh: tracingProviders,
		istio: `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: productpage, namespace: default}
spec:
  selector: {matchLabels: {app: productpage}}
  tracing:
  - match: {mode: SERVER}
    providers: [{name: zipkin}]
    randomSamplingPercentage: 100
`,
	},
	"prometheus by default provider": {mesh: "defaultProviders:\n  metrics: [prometheus]\n"},
	"MeshConfig access log, text":    {mesh: "accessLogFile: /dev/stdout\n"},
	"MeshConfig access log, JSON":    {mesh: "accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: '{\"code\": \"%RESPONSE_CODE%\", \"path\": \"%REQ_WITHOUT_QUERY(:PATH)%\"}'\n"},
	"Telemetry API providers": {
		mesh: `extensionProviders:
- name: textlog
  envoyFileAccessLog:
    path: /var/log/envoy.log
    logFormat: {text: "%REQ(:AUTHORITY)% %RESPONSE_CODE%"}
- name: httpals
  envoyHttpAls: {service: als.observability.svc.cluster.local, port: 9000}
- name: tcpals
  envoyTcpAls: {service: observability/als.observability.svc.cluster.local, port: 9000}
- name: otel
  envoyOtelAls: {service: als.observability.svc.cluster.local, port: 4317}
`,
		istio: `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  metrics:
  - providers: [{name: prometheus}]
    reportingInterval: 30s
    overrides:
    - match: {metric: REQUEST_SIZE, mode: CLIENT}
      disabled: true
    - tagOverrides:
        request_protocol: {operation: UPSERT, value: request.protocol}
  accessLogging:
  - providers: [{name: envoy}, {name: textlog}, {name: httpals}, {name: tcpals}, {name: otel}]
    filter: {expression: "response.code >= 400"}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: productpage, namespace: default}
spec:
  selector: {matchLabels: {app: productpage}}
  accessLogging:
  - match: {mode: SERVER}
    disabled: true
`,
	},
}

func TestTelemetryAsIstiodConfiguresIt(t *testing.T) {
	for name, tc := range telemetryCases {
		t.Run(name, func(t *testing.T) {
			want := signatures(istiodListeners(t, tc.mesh, tc.istio))
			got := signatures(discoveryListeners(t, tc.mesh, tc.istio))
			for kind, sigs := range got {
				for _, s := range sigs {
					if !slices.Contains(want[kind], s) {
						t.Errorf("%s: discovery sends\n  %s\nwhich istiod does not; istiod sends\n  %s", kind, s, strings.Join(want[kind], "\n  "))
					}
				}
			}
			for _, kind := range []string{"outbound http", "inbound http", "outbound tcp", "inbound tcp", "listener OUTBOUND", "listener INBOUND"} {
				if len(got[kind]) == 0 && len(want[kind]) > 0 {
					t.Errorf("%s: discovery sends nothing, istiod sends\n  %s", kind, strings.Join(want[kind], "\n  "))
				}
			}
		})
	}
}

// telemetryFilters are the filters compared, in their order; others
// (RBAC, the router's config) are not telemetry.
var telemetryFilters = map[string]bool{
	"istio.metadata_exchange": true, "envoy.filters.http.grpc_stats": true, "istio.alpn": true,
	"envoy.filters.http.fault": true, "envoy.filters.http.cors": true, "istio.stats": true,
	"envoy.filters.http.router": true, "envoy.filters.network.tcp_proxy": true,
	"envoy.filters.network.http_connection_manager": true,
}

// signatures describes each chain's telemetry: filter names in order,
// telemetry filters' configs, access logs; by chain kind.
func signatures(ls []*listenerv3.Listener) map[string][]string {
	out := map[string][]string{}
	add := func(kind, s string) {
		if !slices.Contains(out[kind], s) {
			out[kind] = append(out[kind], s)
		}
	}
	for _, l := range ls {
		dir := "outbound"
		if l.GetTrafficDirection().String() == "INBOUND" {
			dir = "inbound"
		}
		add("listener "+l.GetTrafficDirection().String(), "access logs "+canonLogs(l.GetAccessLog()))
		chains := append([]*listenerv3.FilterChain{}, l.GetFilterChains()...)
		if l.GetDefaultFilterChain() != nil {
			chains = append(chains, l.GetDefaultFilterChain())
		}
		for _, fc := range chains {
			var names []string
			kind := dir + " tcp"
			detail := ""
			for _, f := range fc.GetFilters() {
				if !telemetryFilters[f.GetName()] {
					continue
				}
				names = append(names, f.GetName())
				switch f.GetName() {
				case "envoy.filters.network.http_connection_manager":
					kind = dir + " http"
					m := &hcmv3.HttpConnectionManager{}
					_ = f.GetTypedConfig().UnmarshalTo(m)
					var hs []string
					for _, h := range m.GetHttpFilters() {
						if !telemetryFilters[h.GetName()] {
							continue
						}
						if h.GetName() == "envoy.filters.http.router" || h.GetName() == "envoy.filters.http.fault" || h.GetName() == "envoy.filters.http.cors" {
							hs = append(hs, h.GetName())
						} else {
							hs = append(hs, h.GetName()+"="+canonAny(h.GetTypedConfig()))
						}
					}
					detail += " http[" + strings.Join(hs, ", ") + "] logs " + canonLogs(m.GetAccessLog()) +
						" tracing " + canonMessage(m.GetTracing()) + " requestID " + canonMessage(m.GetRequestIdExtension())
				case "envoy.filters.network.tcp_proxy":
					p := &tcpv3.TcpProxy{}
					_ = f.GetTypedConfig().UnmarshalTo(p)
					detail += " tcp logs " + canonLogs(p.GetAccessLog())
				default:
					detail += " " + f.GetName() + "=" + canonAny(f.GetTypedConfig())
				}
			}
			if strings.Contains(detail, "BlackHole") {
				continue
			}
			add(kind, strings.Join(names, ",")+" |"+detail)
		}
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

// canonLogs renders access logs with their typed configs decoded, as
// canonical JSON (protobuf's own encoding of maps is not ordered).
func canonLogs(als []*accesslogv3.AccessLog) string {
	var parts []string
	for _, al := range als {
		b, err := protojson.Marshal(al)
		if err != nil {
			parts = append(parts, fmt.Sprint(al))
			continue
		}
		var v any
		_ = json.Unmarshal(b, &v)
		c, _ := json.Marshal(v)
		parts = append(parts, string(c))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// canonMessage renders m as canonical JSON, Any fields decoded; "null"
// for none.
func canonMessage(m proto.Message) string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return "null"
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Sprint(m)
	}
	var v any
	_ = json.Unmarshal(b, &v)
	c, _ := json.Marshal(v)
	return string(c)
}

func canonAny(a *anypb.Any) string {
	m, err := a.UnmarshalNew()
	if err != nil {
		return a.GetTypeUrl()
	}
	b, _ := protojson.Marshal(m)
	var v any
	_ = json.Unmarshal(b, &v)
	c, _ := json.Marshal(v)
	return a.GetTypeUrl() + string(c)
}

func istiodListeners(t *testing.T, meshText, istio string) []*listenerv3.Listener {
	t.Helper()
	mc, err := istiomesh.ApplyMeshConfigDefaults(meshText)
	if err != nil {
		t.Fatal(err)
	}
	var kube []runtime.Object
	dec := kubelib.IstioCodec.UniversalDeserializer()
	for _, doc := range strings.Split(telemetryKube, "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := dec.Decode(js, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		kube = append(kube, obj)
	}
	fake := xdsfake.NewFakeDiscoveryServer(t, xdsfake.FakeOptions{KubernetesObjects: kube, ConfigString: istio, MeshConfig: mc})
	// istiod caches the MeshConfig access log process-wide until its mesh
	// handler resets it; cases run in one process.
	fake.ConfigGen.MeshConfigChanged(mc)
	p := fake.SetupProxy(&istiomodel.Proxy{
		ID: "productpage-v1-abc.default", ConfigNamespace: "default", IPAddresses: []string{"10.1.0.5"},
		Labels: proxyLabels(),
		Metadata: &istiomodel.NodeMetadata{Namespace: "default", IstioVersion: "1.32.0", MeshID: "mesh1", ClusterID: "Kubernetes",
			Labels: proxyLabels()},
	})
	return fake.Listeners(p)
}

func discoveryListeners(t *testing.T, meshText, istio string) []*listenerv3.Listener {
	t.Helper()
	objs, errs := file.Parse("input.yaml", []byte(telemetryKube+"\n---\n"+istio))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var evs []model.Event
	for _, o := range objs {
		evs = append(evs, model.Event{Op: model.OpUpsert, Key: o.Key, Object: o.Object})
	}
	cfg, err := mesh.Parse(meshText)
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.MeshKey, Object: &model.MeshObject{Config: cfg}})
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.1.0.5~productpage-v1-abc.default~default.svc.cluster.local",
		map[string]any{"NAMESPACE": "default", "ISTIO_VERSION": "1.32.0", "MESH_ID": "mesh1", "CLUSTER_ID": "Kubernetes", "LABELS": labelsAny(proxyLabels())})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gen.New(gen.DefaultOptions(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(store.World(), p, cc)
	var out []*listenerv3.Listener
	for _, n := range pc.Names(gen.ListenerType) {
		l := &listenerv3.Listener{}
		if err := pc.Get(gen.ListenerType, n).Any.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// proxyLabels are the compared proxy's labels: its app, and the canonical
// service and revision Istio's tracing tags name.
func proxyLabels() map[string]string {
	return map[string]string{
		"app": "productpage", "version": "v1", "security.istio.io/tlsMode": "istio",
		"service.istio.io/canonical-name": "productpage", "service.istio.io/canonical-revision": "v1",
	}
}

func labelsAny(l map[string]string) map[string]any {
	out := make(map[string]any, len(l))
	for k, v := range l {
		out[k] = v
	}
	return out
}
