package gen

import (
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	httpwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensions "istio.io/api/extensions/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func wasmYAML(ns, name, created, rv, spec string) string {
	return "\n---\napiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: " + name + ", namespace: " + ns +
		", creationTimestamp: \"" + created + "\", resourceVersion: \"" + rv + "\"}\nspec:\n" + spec
}

func wasmKeyOf(ns, name string) model.Key {
	return model.Key{Kind: model.KindWasmPlugin, Namespace: ns, Name: name}
}

func wasmName(ns, name string) string { return wasmResourcePrefix + ns + "." + name + wasmNameSuffix }

// onlyWasm keeps the WasmPlugin filters of fs, in order, by plugin name.
func onlyWasm(fs []string) []string {
	var out []string
	for _, f := range fs {
		if strings.HasPrefix(f, wasmResourcePrefix) {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(f, wasmResourcePrefix), wasmNameSuffix))
		}
	}
	return out
}

func TestWasmOrderByPhaseThenPriority(t *testing.T) {
	// Lookup order (the proxy's namespace, then root; oldest first) for
	// equal priorities; a higher priority first within a phase; phases in
	// istiod's slots whatever the creation order.
	y := efBase +
		wasmYAML("default", "stats-none", "2026-01-01T00:00:00Z", "1", "  url: oci://x/a:1\n  phase: STATS\n") +
		wasmYAML("default", "stats-10", "2026-01-02T00:00:00Z", "1", "  url: oci://x/b:1\n  phase: STATS\n  priority: 10\n") +
		wasmYAML("istio-system", "root-stats-10", "2025-01-01T00:00:00Z", "1", "  url: oci://x/c:1\n  phase: STATS\n  priority: 10\n") +
		wasmYAML("default", "unspecified", "2025-06-01T00:00:00Z", "1", "  url: oci://x/d:1\n") +
		wasmYAML("default", "authz", "2026-01-03T00:00:00Z", "1", "  url: oci://x/e:1\n  phase: AUTHZ\n  priority: -5\n") +
		wasmYAML("istio-system", "authn", "2026-01-04T00:00:00Z", "1", "  url: oci://x/f:1\n  phase: AUTHN\n")
	w := loadWorld(t, y).World()
	reviews := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	g, _ := efGen(t)
	pc := efGenerate(t, g, w, reviews)
	want := "istio-system.authn,default.authz,default.stats-10,istio-system.root-stats-10,default.stats-none,default.unspecified"
	for _, l := range []string{"0.0.0.0_9080", VirtualInbound} {
		for chain, fs := range hcmChains(t, pc, l) {
			if got := strings.Join(onlyWasm(fs), ","); got != want {
				t.Errorf("%s chain %s: plugins %s, want %s", l, chain, got, want)
			}
		}
	}
}

func TestWasmTrafficSelector(t *testing.T) {
	plugin := func(mode typev1beta1.WorkloadMode, ports ...uint32) *wasmPlugin {
		m := &extensions.WasmPlugin_TrafficSelector{Mode: mode}
		for _, p := range ports {
			m.Ports = append(m.Ports, &typev1beta1.PortSelector{Number: p})
		}
		return &wasmPlugin{spec: &extensions.WasmPlugin{Match: []*extensions.WasmPlugin_TrafficSelector{m}}}
	}
	cases := map[string]struct {
		wp      *wasmPlugin
		traffic wasmTraffic
		want    bool
	}{
		"no match selects inbound traffic":          {&wasmPlugin{spec: &extensions.WasmPlugin{}}, wasmTraffic{server: true, port: 1}, true},
		"no match selects outbound traffic":         {&wasmPlugin{spec: &extensions.WasmPlugin{}}, wasmTraffic{port: 1}, true},
		"SERVER does not select outbound traffic":   {plugin(typev1beta1.WorkloadMode_SERVER), wasmTraffic{port: 80}, false},
		"SERVER selects inbound traffic":            {plugin(typev1beta1.WorkloadMode_SERVER), wasmTraffic{server: true, port: 80}, true},
		"CLIENT does not select inbound traffic":    {plugin(typev1beta1.WorkloadMode_CLIENT), wasmTraffic{server: true, port: 80}, false},
		"CLIENT_AND_SERVER selects both":            {plugin(typev1beta1.WorkloadMode_CLIENT_AND_SERVER), wasmTraffic{server: true, port: 80}, true},
		"a port list selects its ports":             {plugin(typev1beta1.WorkloadMode_UNDEFINED, 80, 443), wasmTraffic{port: 443}, true},
		"a port list leaves other ports":            {plugin(typev1beta1.WorkloadMode_UNDEFINED, 80, 443), wasmTraffic{port: 8080}, false},
		"a port list leaves a portless passthrough": {plugin(typev1beta1.WorkloadMode_SERVER, 80), wasmTraffic{server: true}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.traffic.matches(tc.wp); got != tc.want {
				t.Errorf("matches = %v, want %v", got, tc.want)
			}
		})
	}
	// Two selectors: either one.
	either := &wasmPlugin{spec: &extensions.WasmPlugin{Match: []*extensions.WasmPlugin_TrafficSelector{
		{Mode: typev1beta1.WorkloadMode_SERVER, Ports: []*typev1beta1.PortSelector{{Number: 9080}}},
		{Mode: typev1beta1.WorkloadMode_CLIENT},
	}}}
	for tr, want := range map[wasmTraffic]bool{{server: true, port: 9080}: true, {server: true, port: 1}: false, {port: 1}: true} {
		if got := tr.matches(either); got != want {
			t.Errorf("%+v: matches = %v, want %v", tr, got, want)
		}
	}
}

func TestWasmSlotsFollowIstiodFilterOrder(t *testing.T) {
	names := func(ns ...string) []*hcmv3.HttpFilter {
		var out []*hcmv3.HttpFilter
		for _, n := range ns {
			out = append(out, &hcmv3.HttpFilter{Name: n})
		}
		return out
	}
	wp := func(name string, phase extensions.PluginPhase, prio int32) *wasmPlugin {
		return &wasmPlugin{name: name, spec: &extensions.WasmPlugin{Phase: phase, Priority: wrapperspb.Int32(prio)}}
	}
	ph := wasmFor([]*wasmPlugin{
		wp("un", extensions.PluginPhase_UNSPECIFIED_PHASE, 0), wp("st-lo", extensions.PluginPhase_STATS, 1),
		wp("st-hi", extensions.PluginPhase_STATS, 2), wp("az", extensions.PluginPhase_AUTHZ, 0), wp("an", extensions.PluginPhase_AUTHN, 0),
	}, false, wasmTraffic{})
	in := names(mxFilterName, RBACCustomFilter, ExtAuthzFilter, JWTFilter, RBACDenyFilter, RBACAllowFilter, "envoy.filters.http.grpc_stats", FaultFilter, "envoy.filters.http.router")
	var got []string
	for _, f := range wasmHTTPSlots(in, ph) {
		got = append(got, f.GetName())
	}
	want := []string{
		mxFilterName, RBACCustomFilter, ExtAuthzFilter, "an", JWTFilter, "az", RBACDenyFilter, RBACAllowFilter,
		"st-hi", "st-lo", "un", "envoy.filters.http.grpc_stats", FaultFilter, "envoy.filters.http.router",
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("filters\n %v\nwant\n %v", got, want)
	}
	// Without authn or authz filters, the phases still keep their order.
	got = nil
	for _, f := range wasmHTTPSlots(names("envoy.filters.http.router"), ph) {
		got = append(got, f.GetName())
	}
	if s := strings.Join(got, ","); s != "an,az,st-hi,st-lo,un,envoy.filters.http.router" {
		t.Errorf("filters %s", s)
	}
}

func TestWasmPluginSelectingOneWorkloadKeepsOthersClass(t *testing.T) {
	before := loadWorld(t, efBase).World()
	after := loadWorld(t, efBase+wasmYAML("default", "only-reviews", "2026-01-01T00:00:00Z", "4",
		"  selector: {matchLabels: {app: reviews}}\n  url: oci://x/a:1\n")).World()
	product := labelled(t, "sidecar", "default", map[string]string{"app": "productpage"})
	reviews := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	if a, b := ClassKey(after, product), ClassKey(before, product); a != b {
		t.Errorf("an unselected proxy's key changed: %q, was %q", a, b)
	}
	if key := ClassKey(after, reviews); !strings.HasSuffix(key, "|wasm=default/only-reviews@4") {
		t.Errorf("the selected proxy's key %q does not name the plugin and its version", key)
	}
	g, _ := efGen(t)
	sameConfig(t, "unselected proxy", efGenerate(t, g, after, product), efGenerate(t, g, before, product))
	pc := efGenerate(t, g, after, reviews)
	if pc.Len(ExtensionConfigType) != 1 || pc.Get(ExtensionConfigType, wasmName("default", "only-reviews")) == nil {
		t.Errorf("ECDS holds %v, want the plugin's extension", pc.Names(ExtensionConfigType))
	}
	// A change of the plugin touches the proxy it selects, not the other.
	if k := wasmKeyOf("default", "only-reviews"); !pc.Touches(k, after) || efGenerate(t, g, after, product).Touches(k, after) {
		t.Error("a change of the plugin should touch the selected workload only")
	}
	// Regenerating the class from itself changes nothing and keeps the
	// unpatched listeners for reuse.
	first, err := g.Class(after, reviews, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.raw[ListenerType] == nil {
		t.Fatal("the class does not keep its listeners as built")
	}
	next, err := g.Class(after, reviews, first)
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Changed) != 0 {
		t.Errorf("regenerating the same World changed %v", next.Changed)
	}
}

func TestWasmFailStrategyWhenThePluginCannotBeBuilt(t *testing.T) {
	y := efBase +
		wasmYAML("default", "closed", "2026-01-01T00:00:00Z", "1", "  url: \"oci://bad host/x\"\n") +
		wasmYAML("default", "open", "2026-01-02T00:00:00Z", "1", "  url: \"oci://bad host/y\"\n  failStrategy: FAIL_OPEN\n")
	w := loadWorld(t, y).World()
	reviews := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	g, logs := efGen(t)
	pc := efGenerate(t, g, w, reviews)
	if pc.Get(ExtensionConfigType, wasmName("default", "open")) != nil {
		t.Error("a FAIL_OPEN plugin that cannot be built should be left out, as istiod does")
	}
	r := pc.Get(ExtensionConfigType, wasmName("default", "closed"))
	if r == nil {
		t.Fatal("a FAIL_CLOSE plugin that cannot be built has no extension")
	}
	ec := &corev3.TypedExtensionConfig{}
	if err := r.Any.UnmarshalTo(ec); err != nil {
		t.Fatal(err)
	}
	deny := &httprbacv3.RBAC{}
	if err := ec.GetTypedConfig().UnmarshalTo(deny); err != nil {
		t.Fatalf("extension is %s, want the deny-all RBAC filter", ec.GetTypedConfig().GetTypeUrl())
	}
	if deny.GetRules() == nil || len(deny.GetRules().GetPolicies()) != 0 || deny.GetRules().GetAction() != 0 {
		t.Errorf("RBAC %v does not deny everything (ALLOW with no policies)", deny)
	}
	for chain, fs := range hcmChains(t, pc, VirtualInbound) {
		if got := strings.Join(onlyWasm(fs), ","); got != "default.closed" {
			t.Errorf("inbound chain %s: plugins %q, want the closed one only", chain, got)
		}
	}
	if !strings.Contains(logs.String(), "WasmPlugin cannot be built") {
		t.Errorf("no warning:\n%s", logs.String())
	}
	c := w.Config(model.KindWasmPlugin, "default", "closed")
	if got := UnsupportedFields(model.KindWasmPlugin, &c.Object.(*extensionsv1alpha1.WasmPlugin).Spec); strings.Join(got, ",") != "url" {
		t.Errorf("UnsupportedFields = %v, want url", got)
	}
	if n := g.UnsupportedCounts()["WasmPlugin url"]; n != 2 {
		t.Errorf("counted %v resource versions with an unbuildable url, want 2", n)
	}
}

func TestWasmExtensionIsWhatTheAgentRewrites(t *testing.T) {
	y := efBase + wasmYAML("default", "p", "2026-01-01T00:00:00Z", "9",
		"  url: ghcr.io/example/p:1\n  imagePullSecret: creds\n  imagePullPolicy: Always\n  pluginName: root\n  pluginConfig: {b: 2, a: \"<x>\"}\n")
	w := loadWorld(t, y).World()
	reviews := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	g, logs := efGen(t)
	pc := efGenerate(t, g, w, reviews)
	r := pc.Get(ExtensionConfigType, wasmName("default", "p"))
	if r == nil {
		t.Fatal("no extension")
	}
	ec := &corev3.TypedExtensionConfig{}
	if err := r.Any.UnmarshalTo(ec); err != nil {
		t.Fatal(err)
	}
	hw := &httpwasmv3.Wasm{}
	if err := ec.GetTypedConfig().UnmarshalTo(hw); err != nil {
		t.Fatal(err)
	}
	vm := hw.GetConfig().GetVmConfig()
	remote := vm.GetCode().GetRemote()
	if remote.GetHttpUri().GetUri() != "oci://ghcr.io/example/p:1" || remote.GetHttpUri().GetCluster() != "_" {
		t.Errorf("remote %v: want oci:// added and the placeholder cluster", remote)
	}
	env := vm.GetEnvironmentVariables().GetKeyValues()
	if v, ok := env[wasmSecretEnv]; !ok || v != "" {
		t.Errorf("pull secret variable %q (set %v), want present and empty (the agent then fails the fetch)", v, ok)
	}
	if env[wasmPolicyEnv] != "Always" || env[wasmVersionEnv] != "9" {
		t.Errorf("env %v", env)
	}
	conf := &wrapperspb.StringValue{}
	if err := hw.GetConfig().GetConfiguration().UnmarshalTo(conf); err != nil || conf.GetValue() != `{"a":"<x>","b":2}` {
		t.Errorf("configuration %q (%v), want compact sorted JSON", conf.GetValue(), err)
	}
	if hw.GetConfig().GetRootId() != "root" || hw.GetConfig().GetName() != "default.p"+wasmNameSuffix {
		t.Errorf("plugin config %v", hw.GetConfig())
	}
	c := w.Config(model.KindWasmPlugin, "default", "p")
	if got := UnsupportedFields(model.KindWasmPlugin, &c.Object.(*extensionsv1alpha1.WasmPlugin).Spec); strings.Join(got, ",") != "imagePullSecret" {
		t.Errorf("UnsupportedFields = %v, want imagePullSecret", got)
	}
	if !strings.Contains(logs.String(), "imagePullSecret is not served") {
		t.Errorf("no warning about the pull secret:\n%s", logs.String())
	}
}

func TestWasmNotForProxylessGRPC(t *testing.T) {
	w := loadWorld(t, efBase+wasmYAML("default", "all", "2026-01-01T00:00:00Z", "1", "  url: oci://x/a:1\n")).World()
	p := grpcProxy(t, "default")
	if key := ClassKey(w, p); strings.Contains(key, "|wasm=") {
		t.Errorf("a gRPC class key names plugins: %q", key)
	}
	g, logs := efGen(t)
	pc := efGenerate(t, g, w, p)
	if pc.Len(ExtensionConfigType) != 0 {
		t.Errorf("a proxyless gRPC proxy gets extensions %v", pc.Names(ExtensionConfigType))
	}
	if !strings.Contains(logs.String(), "not supported on proxyless gRPC") {
		t.Errorf("no warning:\n%s", logs.String())
	}
}

// BenchmarkClassAfterVirtualServiceEditWithWasm is
// BenchmarkClassAfterVirtualServiceEdit with a root WasmPlugin on every
// HTTP chain: what the plugin's filters add to an edit.
func BenchmarkClassAfterVirtualServiceEditWithWasm(b *testing.B) {
	store := world1000(b)
	evs, err := worldtest.Decode([]byte(wasmYAML("istio-system", "all", "2026-01-01T00:00:00Z", "1", "  url: oci://x/a:1\n")))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		b.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(b, "ns-0")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := store.Apply(vsEvent("ns-3", "svc-3", "svc-3", fmt.Sprint(i), int32(1+i%99), int32(99-i%99))); err != nil {
			b.Fatal(err)
		}
		if prev, err = g.Class(store.World(), p, prev); err != nil {
			b.Fatal(err)
		}
	}
}

// A class regenerated after an edit, reusing its patched listeners, is
// what a generation from scratch gives.
func TestWasmReusedListenersAreFreshOnes(t *testing.T) {
	store := loadWorld(t, efBase+wasmYAML("istio-system", "all", "2026-01-01T00:00:00Z", "1", "  url: oci://x/a:1\n"))
	reviews := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	g, _ := efGen(t)
	prev, err := g.Class(store.World(), reviews, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(vsEvent("default", "reviews", "reviews", "2", 30, 70)); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	reused, err := g.Class(w, reviews, prev)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := g.Class(w, reviews, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameConfig(t, "reused vs fresh", &ProxyConfig{Class: reused}, &ProxyConfig{Class: fresh})
	for chain, fs := range hcmChains(t, &ProxyConfig{Class: reused}, "0.0.0.0_9080") {
		if strings.Join(onlyWasm(fs), ",") != "istio-system.all" {
			t.Errorf("chain %s lost the plugin: %v", chain, fs)
		}
	}
}
