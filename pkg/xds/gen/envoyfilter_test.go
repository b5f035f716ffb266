package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// efBase is a mesh of two workloads (reviews, productpage) without
// EnvoyFilters.
const efBase = `apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.11
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: productpage, namespace: default}
spec:
  clusterIP: 10.96.0.12
  selector: {app: productpage}
  ports: [{name: http, port: 9080}]
`

// efLua is the lua sample of istio.io, for the reviews workload, inbound
// and outbound.
const efLua = `
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, namespace: default, resourceVersion: "7"}
spec:
  workloadSelector: {labels: {app: reviews}}
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: ANY
      listener:
        filterChain:
          filter:
            name: envoy.filters.network.http_connection_manager
            subFilter: {name: envoy.filters.http.router}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.lua
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          inlineCode: "function envoy_on_request(h) h:headers():add('x-lua', 'yes') end"
`

func efGen(t *testing.T) (*Generator, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	return newForTest(slog.New(slog.NewTextHandler(&logs, nil))), &logs
}

func efGenerate(t *testing.T, g *Generator, w *model.World, p *model.Proxy) *ProxyConfig {
	t.Helper()
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g.Proxy(w, p, cc)
}

// sameConfig fails unless a and b hold the same resources, byte for byte.
func sameConfig(t *testing.T, what string, a, b *ProxyConfig) {
	t.Helper()
	for _, typ := range TypeURLs {
		an, bn := a.Names(typ), b.Names(typ)
		if strings.Join(an, ",") != strings.Join(bn, ",") {
			t.Errorf("%s: %s names %v, want %v", what, ShortType(typ), an, bn)
			continue
		}
		for _, n := range an {
			if !bytes.Equal(a.Get(typ, n).Any.GetValue(), b.Get(typ, n).Any.GetValue()) {
				t.Errorf("%s: %s %s differs", what, ShortType(typ), n)
			}
		}
	}
}

func httpFilterNames(t *testing.T, f *listenerv3.Filter) []string {
	t.Helper()
	hc := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range hc.GetHttpFilters() {
		out = append(out, h.GetName())
	}
	return out
}

// hcmChains lists, per filter chain name of listener l, the HTTP filters
// of its connection manager.
func hcmChains(t *testing.T, pc *ProxyConfig, l string) map[string][]string {
	t.Helper()
	r := pc.Get(ListenerType, l)
	if r == nil {
		t.Fatalf("no listener %s", l)
	}
	lis := &listenerv3.Listener{}
	if err := r.Any.UnmarshalTo(lis); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for i, fc := range lis.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() == "envoy.filters.network.http_connection_manager" {
				out[fc.GetName()+"#"+itoa(int32(i))] = httpFilterNames(t, f)
			}
		}
	}
	return out
}

func TestEnvoyFilterChangesOnlyTheProxiesItSelects(t *testing.T) {
	before := loadWorld(t, efBase).World()
	after := loadWorld(t, efBase+efLua).World()
	product := labelled(t, "sidecar", "default", map[string]string{"app": "productpage"})
	reviews := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})

	if a, b := ClassKey(after, product), ClassKey(before, product); a != b {
		t.Errorf("an unselected proxy's key changed: %q, was %q", a, b)
	}
	key := ClassKey(after, reviews)
	if !strings.Contains(key, "|ef=default/lua@7") {
		t.Errorf("the selected proxy's key %q does not name the EnvoyFilter and its version", key)
	}
	g, _ := efGen(t)
	sameConfig(t, "unselected proxy", efGenerate(t, g, after, product), efGenerate(t, g, before, product))
	patched := efGenerate(t, g, after, reviews)
	plain := efGenerate(t, g, before, reviews)

	// Every HTTP connection manager, outbound and inbound, has lua just
	// before the router; the unpatched ones have not.
	for _, l := range []string{"0.0.0.0_9080", VirtualInbound} {
		chains := hcmChains(t, patched, l)
		if len(chains) == 0 {
			t.Fatalf("%s has no HTTP chains", l)
		}
		for name, fs := range chains {
			n := len(fs)
			if n < 2 || fs[n-2] != "envoy.filters.http.lua" || fs[n-1] != "envoy.filters.http.router" {
				t.Errorf("%s chain %s: HTTP filters %v, want lua before the router", l, name, fs)
			}
		}
		for name, fs := range hcmChains(t, plain, l) {
			for _, f := range fs {
				if f == "envoy.filters.http.lua" {
					t.Errorf("without the EnvoyFilter, %s chain %s has lua", l, name)
				}
			}
		}
	}
	// Clusters and routes are not patched: the same bytes.
	for _, typ := range []string{ClusterType, RouteType} {
		for _, n := range plain.Names(typ) {
			if !bytes.Equal(plain.Get(typ, n).Any.GetValue(), patched.Get(typ, n).Any.GetValue()) {
				t.Errorf("%s %s changed, though no patch applies to it", ShortType(typ), n)
			}
		}
	}
}

func TestEnvoyFilterClassIsReusedAndKeptUnpatched(t *testing.T) {
	w := loadWorld(t, efBase+efLua).World()
	reviews := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	g, _ := efGen(t)
	first, err := g.Class(w, reviews, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.raw[ListenerType] == nil || first.raw[ListenerType] == first.Sets[ListenerType] {
		t.Fatal("the class does not keep its listeners as built beside the patched ones")
	}
	next, err := g.Class(w, reviews, first)
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Changed) != 0 {
		t.Errorf("regenerating the same World changed %v", next.Changed)
	}
	if next.Sets[ListenerType].Version != first.Sets[ListenerType].Version {
		t.Error("the patched listeners differ from one generation to the next")
	}
}

// efBroken merges a connect timeout Envoy refuses into reviews' cluster
// and a valid one into productpage's.
const efBroken = `
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: broken, namespace: istio-system, resourceVersion: "3"}
spec:
  configPatches:
  - applyTo: CLUSTER
    match: {context: SIDECAR_OUTBOUND, cluster: {service: reviews.default.svc.cluster.local}}
    patch: {operation: MERGE, value: {connect_timeout: -1s}}
  - applyTo: CLUSTER
    match: {context: SIDECAR_OUTBOUND, cluster: {service: productpage.default.svc.cluster.local, portNumber: 9080}}
    patch: {operation: MERGE, value: {connect_timeout: 7s}}
`

func TestEnvoyFilterPatchThatBreaksEnvoysRulesLeavesTheResourceUnpatched(t *testing.T) {
	before := loadWorld(t, efBase).World()
	after := loadWorld(t, efBase+efBroken).World()
	p := labelled(t, "sidecar", "default", map[string]string{"app": "other"})
	g, logs := efGen(t)
	patched, plain := efGenerate(t, g, after, p), efGenerate(t, g, before, p)
	const bad, good = "outbound|9080||reviews.default.svc.cluster.local", "outbound|9080||productpage.default.svc.cluster.local"
	if !bytes.Equal(patched.Get(ClusterType, bad).Any.GetValue(), plain.Get(ClusterType, bad).Any.GetValue()) {
		t.Error("the cluster whose patch is invalid was not sent as generated")
	}
	c := &clusterv3.Cluster{}
	if err := patched.Get(ClusterType, good).Any.UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	if c.GetConnectTimeout().AsDuration().Seconds() != 7 {
		t.Errorf("the valid patch was not applied: connect_timeout %v", c.GetConnectTimeout())
	}
	refused := g.EnvoyFilterRefusals()
	if msg := refused["istio-system/broken@3"]; !strings.Contains(msg, bad) {
		t.Errorf("refusals %v do not name the EnvoyFilter and the cluster", refused)
	}
	if !strings.Contains(logs.String(), "EnvoyFilter patch refused") {
		t.Errorf("no log of the refusal: %s", logs)
	}
}

// efRoutes are route patches written for istiod's names: route
// configuration "9080", virtual host reviews...:9080.
const efRoutes = `
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: routes, namespace: default}
spec:
  configPatches:
  - applyTo: VIRTUAL_HOST
    match:
      context: SIDECAR_OUTBOUND
      routeConfiguration: {name: "9080", vhost: {name: "reviews.default.svc.cluster.local:9080"}}
    patch: {operation: MERGE, value: {include_request_attempt_count: true}}
  - applyTo: HTTP_ROUTE
    match:
      context: SIDECAR_OUTBOUND
      routeConfiguration: {portNumber: 9080, vhost: {name: "productpage.default.svc.cluster.local:9080"}}
    patch:
      operation: INSERT_FIRST
      value: {name: health, match: {prefix: /healthz}, direct_response: {status: 200}}
`

func TestEnvoyFilterRouteMatchesUseIstiodsNames(t *testing.T) {
	w := loadWorld(t, efBase+efRoutes).World()
	p := labelled(t, "sidecar", "default", map[string]string{"app": "other"})
	g, _ := efGen(t)
	pc := efGenerate(t, g, w, p)
	rc := func(name string) *routev3.RouteConfiguration {
		t.Helper()
		r := pc.Get(RouteType, name)
		if r == nil {
			t.Fatalf("no route configuration %s among %v", name, pc.Names(RouteType))
		}
		out := &routev3.RouteConfiguration{}
		if err := r.Any.UnmarshalTo(out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	reviews := rc("reviews.default.svc.cluster.local:9080")
	if !reviews.GetVirtualHosts()[0].GetIncludeRequestAttemptCount() {
		t.Error("the virtual host matched by istiod's route name 9080 and vhost name was not merged")
	}
	product := rc("productpage.default.svc.cluster.local:9080")
	if rs := product.GetVirtualHosts()[0].GetRoutes(); len(rs) < 2 || rs[0].GetName() != "health" {
		t.Errorf("routes %v: want the inserted route first", rs)
	}
	if product.GetVirtualHosts()[0].GetIncludeRequestAttemptCount() {
		t.Error("the vhost patch reached another virtual host")
	}
}

// efProxyMatch applies only to proxies with FOO=bar in their metadata.
const efProxyMatch = `
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: meta, namespace: istio-system}
spec:
  configPatches:
  - applyTo: CLUSTER
    match: {proxy: {metadata: {FOO: bar}}, cluster: {name: BlackHoleCluster}}
    patch: {operation: MERGE, value: {connect_timeout: 3s}}
`

func TestEnvoyFilterProxyMetadataMatchSplitsTheClass(t *testing.T) {
	w := loadWorld(t, efBase+efProxyMatch).World()
	parse := func(meta map[string]any) *model.Proxy {
		p, err := model.ParseProxy("sidecar~10.9.0.1~pod.default~default.svc.cluster.local", meta)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	with := parse(map[string]any{"FOO": "bar", model.MetaIstioVersion: "1.32.0"})
	without := parse(map[string]any{model.MetaIstioVersion: "1.32.0"})
	if ClassKey(w, with) == ClassKey(w, without) {
		t.Fatalf("the same key %q for proxies a patch's metadata match tells apart", ClassKey(w, with))
	}
	g, _ := efGen(t)
	timeout := func(p *model.Proxy) float64 {
		c := &clusterv3.Cluster{}
		if err := efGenerate(t, g, w, p).Get(ClusterType, BlackHoleCluster).Any.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		return c.GetConnectTimeout().AsDuration().Seconds()
	}
	if a, b := timeout(with), timeout(without); a != 3 || b == 3 {
		t.Errorf("connect timeouts %v (FOO=bar) and %v (no metadata): want 3 for the first only", a, b)
	}
}

// A NACK of a patched resource names the EnvoyFilters that may have
// changed it; a proxy they do not select names none.
func TestEnvoyFilterProvenance(t *testing.T) {
	w := loadWorld(t, efBase+efLua).World()
	g, _ := efGen(t)
	reviews := efGenerate(t, g, w, labelled(t, "sidecar", "default", map[string]string{"app": "reviews"}))
	product := efGenerate(t, g, w, labelled(t, "sidecar", "default", map[string]string{"app": "productpage"}))
	has := func(pc *ProxyConfig, typ, name string) bool {
		for _, r := range pc.Sources(typ, name) {
			if r.Key.Kind == model.KindEnvoyFilter && r.Key.Name == "lua" {
				return true
			}
		}
		return false
	}
	if !has(reviews, ListenerType, "0.0.0.0_9080") || !has(reviews, ListenerType, VirtualInbound) {
		t.Error("the patched listeners of reviews do not name the EnvoyFilter")
	}
	if has(reviews, ClusterType, "outbound|9080||productpage.default.svc.cluster.local") {
		t.Error("a cluster no patch touches names the EnvoyFilter")
	}
	if has(product, ListenerType, "0.0.0.0_9080") {
		t.Error("an unselected proxy's listener names the EnvoyFilter")
	}
}

// A patch whose whole value breaks Envoy's rules is refused at the door
// (EnvoyRefusals: the webhook, the Refused condition); what discovery
// does not apply is reported as unsupported values.
func TestEnvoyFilterRefusalsAndUnsupportedValues(t *testing.T) {
	evs, err := worldtest.Decode([]byte(`apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: e, namespace: default}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    patch: {operation: INSERT_FIRST, value: {typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}}
  - applyTo: CLUSTER
    patch: {operation: MERGE, value: {connect_timeout: -1s}}
  - applyTo: BOOTSTRAP
    patch: {operation: MERGE, value: {stats_flush_interval: 5s}}
  - applyTo: HTTP_FILTER
    patch: {operation: ADD, value: {name: envoy.filters.http.cors}}
`))
	if err != nil {
		t.Fatal(err)
	}
	spec := &evs[0].Object.(*networkingv1alpha3.EnvoyFilter).Spec
	refused := EnvoyRefusals(model.KindEnvoyFilter, spec)
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "spec.configPatches[0].patch.value: ") {
		t.Errorf("refusals %v: want the nameless HTTP filter only (a MERGE value is judged on the merged resource)", refused)
	}
	if got := UnsupportedFields(model.KindEnvoyFilter, spec); strings.Join(got, ",") != "configPatches[].applyTo" {
		t.Errorf("unsupported %v, want the BOOTSTRAP patch's applyTo", got)
	}
	if !ReadsKind(model.KindEnvoyFilter) || UnreadKindNote(model.KindEnvoyFilter) != "" {
		t.Error("EnvoyFilter is reported as a kind generation does not read")
	}
}
