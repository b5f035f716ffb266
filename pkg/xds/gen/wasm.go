package gen

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	httpwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	netwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensions "istio.io/api/extensions/v1alpha1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"

	"github.com/meshplane/discovery/pkg/model"
)

// WasmPlugins become Envoy filters whose configuration comes over ECDS,
// as istiod builds them: each plugin that selects a proxy is one
// TypedExtensionConfig (ExtensionConfigType), and the HTTP (or, for type
// NETWORK, network) filter chains whose traffic its match selects carry a
// filter of the same name with config_discovery. The extension names the
// module by URL (vm_config.code.remote.http_uri): Istio's agent
// (pilot-agent, which discovery uses unchanged) fetches it, rewrites the
// config to the local file and forwards it to Envoy; when the fetch fails
// it sends Envoy an RBAC filter instead that denies everything
// (failStrategy FAIL_CLOSE, the default) or allows it (FAIL_OPEN). That is
// why the filters accept the RBAC types too.
//
// Which plugins apply to a proxy is part of its class key (|wasm=), so a
// plugin selecting one workload gives only that workload another class;
// the class's listeners (outbound, gateway) and the proxy's own inbound
// listener are patched after generation (copies: the class keeps what it
// built for reuse), before EnvoyFilters, as istiod builds the filters into
// the listeners EnvoyFilters then patch.
//
// Where discovery differs from istiod (pilot/pkg/model/extensions.go,
// pilot/pkg/networking/core/extension, pilot/pkg/xds/ecds.go at the
// version discovery follows, which translates each WasmPlugin into a
// TrafficExtension):
//   - the filters are placed by the names of discovery's own filters
//     (wasmHTTPSlots), which are istiod's order: AUTHN after metadata
//     exchange and CUSTOM authorization, AUTHZ after jwt_authn, STATS
//     and unspecified after the RBAC filters;
//   - network plugins go on every matching chain of an outbound listener
//     (istiod's outbound listener puts them on its first HTTP chain
//     only, a side effect of popping them from a shared map);
//   - imagePullSecret is not served: the extension carries the pull
//     secret variable empty, which Istio's agent treats as a failed fetch
//     (denied under FAIL_CLOSE, allowed under FAIL_OPEN), as istiod does
//     when the Secret is missing; the field is reported as unsupported;
//   - a plugin istiod would discard (a URL or plugin config it cannot
//     encode) is left out here too only under FAIL_OPEN; otherwise its
//     filters stay and its extension is the deny-all RBAC filter the
//     agent would use (fail closed), with a warning;
//   - proxyless gRPC proxies get no filters (a warning per plugin):
//     gRPC's xDS client has no Wasm runtime, and istiod's gRPC generator
//     ignores WasmPlugins too.

// ExtensionConfigType is the type URL of ECDS resources.
const ExtensionConfigType = resourcev3.ExtensionConfigType

// Names and environment variables istiod and Istio's agent agree on.
const (
	// wasmResourcePrefix and wasmNameSuffix make a WasmPlugin's extension
	// name, as istiod names the TrafficExtension it translates the plugin
	// into: extensions.istio.io/trafficextension/NS.NAME~istio-translated-wasmplugin.
	wasmResourcePrefix = "extensions.istio.io/trafficextension/"
	wasmNameSuffix     = "~istio-translated-wasmplugin"

	wasmSecretEnv  = "ISTIO_META_WASM_IMAGE_PULL_SECRET"
	wasmPolicyEnv  = "ISTIO_META_WASM_IMAGE_PULL_POLICY"
	wasmVersionEnv = "ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION"

	wasmRuntime = "envoy.wasm.runtime.v8"

	wasmHTTPType    = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	wasmNetworkType = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm"
	rbacHTTPType    = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
	rbacNetworkType = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"

	// wasmDenyStatPrefix is the stat prefix of the deny-all stand-in
	// (Istio's agent's DefaultDenyStatPrefix).
	wasmDenyStatPrefix = "wasm-default-deny"
)

// wasmPlugin is one WasmPlugin, compiled once per object.
type wasmPlugin struct {
	cfg     *model.Config
	spec    *extensions.WasmPlugin
	rv      string
	created time.Time
	// name is the extension's (and the filters') name.
	name string
	// network: a NETWORK plugin (network filters), else HTTP.
	network bool
	// ecds is the extension; nil when the plugin is left out (FAIL_OPEN
	// and not encodable).
	ecds *Resource
	// problem says why the extension is the deny-all stand-in or left
	// out; "" when it is the plugin.
	problem string
}

func (wp *wasmPlugin) key() string { return wp.cfg.Key.Namespace + "/" + wp.cfg.Key.Name + "@" + wp.rv }

func (wp *wasmPlugin) priority() int32 {
	if p := wp.spec.GetPriority(); p != nil {
		return p.GetValue()
	}
	return -1 << 31 // istiod's math.MinInt32 for none
}

// wasmIndex holds a World's WasmPlugins by namespace, oldest first.
type wasmIndex struct {
	byNS     map[string][]*wasmPlugin
	compiled map[*model.Config]*wasmPlugin
}

func newWasmIndex(w *view, prev *wasmIndex) *wasmIndex {
	ix := &wasmIndex{byNS: map[string][]*wasmPlugin{}, compiled: map[*model.Config]*wasmPlugin{}}
	for _, c := range w.Configs(model.KindWasmPlugin) {
		o, ok := c.Object.(*extensionsv1alpha1.WasmPlugin)
		if !ok {
			continue
		}
		var wp *wasmPlugin
		if prev != nil {
			wp = prev.compiled[c]
		}
		if wp == nil {
			wp = compileWasm(c, o)
		}
		ix.compiled[c] = wp
		ix.byNS[c.Key.Namespace] = append(ix.byNS[c.Key.Namespace], wp)
	}
	for _, l := range ix.byNS {
		// istiod sorts by creation time, then by name.
		sort.SliceStable(l, func(i, j int) bool {
			if !l[i].created.Equal(l[j].created) {
				return l[i].created.Before(l[j].created)
			}
			return l[i].cfg.Key.Name < l[j].cfg.Key.Name
		})
	}
	return ix
}

func compileWasm(c *model.Config, o *extensionsv1alpha1.WasmPlugin) *wasmPlugin {
	spec := &o.Spec
	wp := &wasmPlugin{
		cfg: c, spec: spec, rv: o.ResourceVersion, created: o.CreationTimestamp.Time,
		name:    wasmResourcePrefix + c.Key.Namespace + "." + c.Key.Name + wasmNameSuffix,
		network: spec.GetType() == extensions.PluginType_NETWORK,
	}
	pc, problem := wasmPluginConfig(c.Key.Namespace, c.Key.Name+wasmNameSuffix, o.ResourceVersion, spec)
	var typed proto.Message
	switch {
	case problem == "" && wp.network:
		typed = &netwasmv3.Wasm{Config: pc}
	case problem == "":
		typed = &httpwasmv3.Wasm{Config: pc}
	case spec.GetFailStrategy() == extensions.FailStrategy_FAIL_OPEN:
		wp.problem = problem + "; FAIL_OPEN: the plugin is left out"
		return wp
	case wp.network:
		wp.problem = problem + "; FAIL_CLOSE: its filters deny every connection"
		typed = &netrbacv3.RBAC{Rules: &rbacv3.RBAC{}, StatPrefix: wasmDenyStatPrefix}
	default:
		wp.problem = problem + "; FAIL_CLOSE: its filters deny every request"
		typed = &httprbacv3.RBAC{Rules: &rbacv3.RBAC{}, RulesStatPrefix: wasmDenyStatPrefix}
	}
	res, err := NewResource(wp.name, ExtensionConfigType, &corev3.TypedExtensionConfig{Name: wp.name, TypedConfig: mustAny(typed)})
	if err != nil {
		wp.problem = err.Error()
		if spec.GetFailStrategy() == extensions.FailStrategy_FAIL_OPEN {
			return wp
		}
		// Cannot happen for the shapes above; the filters then name an
		// extension that never comes, and Envoy does not warm the
		// listener (no traffic: closed).
	}
	wp.ecds = res
	return wp
}

// wasmPluginConfig is istiod's PluginConfig for a plugin of namespace ns
// and (translated) name; problem is why it cannot be built.
func wasmPluginConfig(ns, name, rv string, spec *extensions.WasmPlugin) (*wasmv3.PluginConfig, string) {
	conf := &anypb.Any{}
	if pc := spec.GetPluginConfig(); pc != nil && len(pc.GetFields()) > 0 {
		// Compact, keys sorted: protojson's output varies on purpose, and
		// the extension's hash must not.
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(pc.AsMap()); err != nil {
			return nil, "pluginConfig cannot be encoded: " + err.Error()
		}
		conf = mustAny(wrapperspb.String(strings.TrimSuffix(b.String(), "\n")))
	}
	u, err := url.Parse(spec.GetUrl())
	if err != nil {
		return nil, "url cannot be parsed: " + err.Error()
	}
	if u.Scheme == "" {
		u.Scheme = "oci" // istiod's default
	}
	var code *corev3.AsyncDataSource
	if u.Scheme == "file" {
		code = &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{Local: &corev3.DataSource{
			Specifier: &corev3.DataSource_Filename{Filename: strings.TrimPrefix(spec.GetUrl(), "file://")},
		}}}
	} else {
		// The agent fetches the module itself: the cluster is a
		// placeholder, and istiod's fixed 30 s timeout is the agent's.
		code = &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Remote{Remote: &corev3.RemoteDataSource{
			HttpUri: &corev3.HttpUri{
				Uri: u.String(), Timeout: durationpb.New(30 * time.Second),
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: "_"},
			},
			Sha256: spec.GetSha256(),
		}}}
	}
	env := map[string]string{wasmVersionEnv: rv}
	if spec.GetImagePullSecret() != "" {
		// Not served (see the top of this file): empty makes the agent
		// fail the fetch, then failStrategy decides.
		env[wasmSecretEnv] = ""
	}
	if p := spec.GetImagePullPolicy(); p != extensions.PullPolicy_UNSPECIFIED_POLICY {
		env[wasmPolicyEnv] = p.String()
	}
	vm := &wasmv3.VmConfig{Runtime: wasmRuntime, Code: code, EnvironmentVariables: &wasmv3.EnvironmentVariables{KeyValues: env}}
	for _, e := range spec.GetVmConfig().GetEnv() {
		switch e.GetValueFrom() {
		case extensions.EnvValueSource_INLINE:
			env[e.GetName()] = e.GetValue()
		case extensions.EnvValueSource_HOST:
			vm.EnvironmentVariables.HostEnvKeys = append(vm.EnvironmentVariables.HostEnvKeys, e.GetName())
		}
	}
	out := &wasmv3.PluginConfig{
		Name: ns + "." + name, RootId: spec.GetPluginName(), Configuration: conf,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: vm},
	}
	switch spec.GetFailStrategy() {
	case extensions.FailStrategy_FAIL_OPEN:
		out.FailurePolicy = wasmv3.FailurePolicy_FAIL_OPEN
	case extensions.FailStrategy_FAIL_CLOSE:
		out.FailurePolicy = wasmv3.FailurePolicy_FAIL_CLOSED
	case extensions.FailStrategy_FAIL_RELOAD:
		out.FailurePolicy = wasmv3.FailurePolicy_FAIL_RELOAD
	}
	return out, ""
}

// wasmSelected returns the WasmPlugins that select p, its namespace's
// first, then the root namespace's (istiod's lookup order), each oldest
// first; the plugins left out (FAIL_OPEN and not encodable) are not
// among them.
func (ix *worldIndex) wasmSelected(p *model.Proxy) []*wasmPlugin {
	if ix.wasm == nil || len(ix.wasm.byNS) == 0 {
		return nil
	}
	nss := []string{p.Namespace}
	if ix.root != p.Namespace {
		nss = append(nss, ix.root)
	}
	var out []*wasmPlugin
	for _, ns := range nss {
		for _, wp := range ix.wasm.byNS[ns] {
			if wp.ecds != nil && wasmAttaches(wp, p) {
				out = append(out, wp)
			}
		}
	}
	return out
}

func wasmAttaches(wp *wasmPlugin, p *model.Proxy) bool {
	s := wp.spec
	return attaches(wp.cfg.Key.Namespace, &security.AuthorizationPolicy{Selector: s.GetSelector(), TargetRef: s.GetTargetRef(), TargetRefs: s.GetTargetRefs()}, p)
}

// wasmKey names, for ClassKey, the WasmPlugins that apply to p
// (namespace/name@resourceVersion, in lookup order); "" for none and for
// proxyless gRPC, which gets none.
func (ix *worldIndex) wasmKey(p *model.Proxy) string {
	if p.IsGRPC() {
		return ""
	}
	wps := ix.wasmSelected(p)
	if len(wps) == 0 {
		return ""
	}
	keys := make([]string, len(wps))
	for i, wp := range wps {
		keys[i] = wp.key()
	}
	return strings.Join(keys, ",")
}

// wasmPluginSelects reports whether the WasmPlugin c of w attaches to p
// (wasmSelected's rule, for one plugin).
func wasmPluginSelects(w *view, c *model.Config, p *model.Proxy) bool {
	if p.IsGRPC() {
		return false
	}
	ix := w.index()
	wp := ix.wasm.compiled[c]
	if wp == nil || (c.Key.Namespace != p.Namespace && c.Key.Namespace != ix.root) {
		return false
	}
	return wasmAttaches(wp, p)
}

// wasmTraffic is what a plugin's match is tested against: a chain's
// traffic direction (istiod's listener class) and port.
type wasmTraffic struct {
	server bool // sidecar inbound; outbound and gateways are clients
	port   uint32
}

// matches is istiod's matchTrafficSelectors: no match selects all
// traffic; otherwise some selector's mode and ports must select it.
func (t wasmTraffic) matches(wp *wasmPlugin) bool {
	ms := wp.spec.GetMatch()
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if wasmModeMatches(m.GetMode(), t.server) && wasmPortsMatch(m.GetPorts(), t.port) {
			return true
		}
	}
	return false
}

func wasmModeMatches(mode typev1beta1.WorkloadMode, server bool) bool {
	switch mode {
	case typev1beta1.WorkloadMode_CLIENT:
		return !server
	case typev1beta1.WorkloadMode_SERVER:
		return server
	}
	return true // UNDEFINED, CLIENT_AND_SERVER
}

func wasmPortsMatch(ports []*typev1beta1.PortSelector, port uint32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, ps := range ports {
		if ps.GetNumber() != 0 && ps.GetNumber() == port {
			return true
		}
	}
	return false
}

// wasmPhases are the plugins of one chain by phase, each phase by
// priority (highest first; equal priorities keep lookup order).
type wasmPhases map[extensions.PluginPhase][]*wasmPlugin

// wasmFor selects, of wps, the plugins of kind network (or HTTP) whose
// match selects t, by phase.
func wasmFor(wps []*wasmPlugin, network bool, t wasmTraffic) wasmPhases {
	var out wasmPhases
	for _, wp := range wps {
		if wp.network != network || !t.matches(wp) {
			continue
		}
		if out == nil {
			out = wasmPhases{}
		}
		out[wp.spec.GetPhase()] = append(out[wp.spec.GetPhase()], wp)
	}
	for ph, l := range out {
		l = slices.Clone(l)
		sort.SliceStable(l, func(i, j int) bool { return l[i].priority() > l[j].priority() })
		out[ph] = l
	}
	return out
}

// wasmFields: generation acts on every field of a WasmPlugin but the
// image pull secret (not served: see above) and verificationKey (which
// istiod does not read either).
var wasmFields = newFieldSet("selector", "targetRef", "targetRefs", "url", "sha256", "imagePullPolicy",
	"pluginConfig", "pluginName", "phase", "priority", "failStrategy", "vmConfig", "match", "type")

// warnWasm reports, once per plugin version, the unsupported fields of
// the plugins that select p, why one is denied or left out, and that
// proxyless gRPC proxies get none.
func (g *Generator) warnWasm(w *view, p *model.Proxy) {
	ix := w.index()
	if ix.wasm == nil {
		return
	}
	nss := []string{p.Namespace}
	if ix.root != p.Namespace {
		nss = append(nss, ix.root)
	}
	for _, ns := range nss {
		for _, wp := range ix.wasm.byNS[ns] {
			if !wasmAttaches(wp, p) {
				continue
			}
			g.warn(wp.cfg, wp.rv, wp.spec, wasmFields)
			if wp.problem != "" {
				g.warnOnce(wp.cfg, wp.rv, "wasm", "WasmPlugin cannot be built as istiod would", "problem", wp.problem)
			}
			if wp.spec.GetImagePullSecret() != "" {
				g.warnOnce(wp.cfg, wp.rv, "wasm-secret",
					"WasmPlugin imagePullSecret is not served: Istio's agent fails the fetch; failStrategy decides (FAIL_CLOSE: deny)",
					"failStrategy", wp.spec.GetFailStrategy().String())
			}
			if p.IsGRPC() {
				g.warnOnce(wp.cfg, wp.rv, "grpc:"+p.Namespace, "WasmPlugin is not supported on proxyless gRPC: not applied", "namespace", p.Namespace)
			}
		}
	}
}

// wasmUnsupportedValues names the fields that keep a plugin from being
// built as istiod would (url, pluginConfig): reported like unsupported
// fields, so the status condition and the gauge say why it denies (or,
// FAIL_OPEN, is left out).
func wasmUnsupportedValues(spec proto.Message) []string {
	wp, ok := spec.(*extensions.WasmPlugin)
	if !ok {
		return nil
	}
	_, problem := wasmPluginConfig("", "", "", wp)
	switch {
	case problem == "":
		return nil
	case strings.HasPrefix(problem, "url"):
		return []string{"url"}
	}
	return []string{"pluginConfig"}
}
