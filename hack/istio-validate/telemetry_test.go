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
`

var telemetryCases = map[string]struct{ mesh, istio string }{
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
					detail += " http[" + strings.Join(hs, ", ") + "] logs " + canonLogs(m.GetAccessLog())
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
		Labels: map[string]string{"app": "productpage", "version": "v1", "security.istio.io/tlsMode": "istio"},
		Metadata: &istiomodel.NodeMetadata{Namespace: "default", IstioVersion: "1.32.0",
			Labels: map[string]string{"app": "productpage", "version": "v1", "security.istio.io/tlsMode": "istio"}},
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
		map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "productpage", "version": "v1", "security.istio.io/tlsMode": "istio"}})
	if err != nil {
		t.Fatal(err)
	}
	g := gen.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
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
