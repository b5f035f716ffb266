package gen

import (
	"maps"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	extensions "istio.io/api/extensions/v1alpha1"

	"github.com/meshplane/discovery/pkg/model"
)

// hcmName is the connection manager's network filter name.
const hcmName = "envoy.filters.network.http_connection_manager"

// wasmExtensions adds the extensions of the WasmPlugins of sc's class to
// its ECDS builder (nothing for proxyless gRPC, which is warned).
func (g *Generator) wasmExtensions(sc *Scope, b *builder) {
	g.warnWasm(sc.w, sc.Proxy)
	if sc.Proxy.IsGRPC() {
		return
	}
	for _, wp := range sc.w.wasmSelected(sc.Proxy) {
		b.reuse(wp.ecds)
	}
}

// wasmClass puts the filters of the WasmPlugins of p's class on the
// class's listeners (copies; cc.raw keeps the listeners as built), and
// names what changed since prev.
func (g *Generator) wasmClass(w *view, p *model.Proxy, cc, prev *ClassConfig) {
	if p.IsGRPC() {
		return
	}
	wps := w.wasmSelected(p)
	if len(wps) == 0 {
		return
	}
	skip := func(name string) bool { return name == VirtualOutbound }
	built := cc.Sets[ListenerType]
	key := w.wasmKey(p)
	var reuse func(name string, r *Resource) *Resource
	if prev != nil && prev.wasm != nil && prev.wasmKey == key {
		// The same plugins: a listener built as before gets the filters
		// it got before (decoding and encoding every chain of a large
		// port listener is most of an edit's cost otherwise).
		base := prev.baseSet(ListenerType)
		reuse = func(name string, r *Resource) *Resource {
			if old := base.Get(name); old != nil && old.Hash == r.Hash {
				return prev.wasm.Get(name)
			}
			return nil
		}
	}
	patched := g.wasmListeners(built, wps, false, skip, cc.Class, reuse)
	cc.wasm, cc.wasmKey = patched, key
	if patched == built {
		return
	}
	sets := maps.Clone(cc.Sets)
	sets[ListenerType] = patched
	if cc.raw == nil {
		cc.raw = map[string]*Set{}
	}
	cc.raw[ListenerType] = built
	cc.Sets = sets
	if prev != nil {
		cc.Changed = map[string][]string{}
		for t, set := range cc.Sets {
			if c := diffNames(prev.Sets[t], set); len(c) > 0 {
				cc.Changed[t] = c
			}
		}
	}
}

// wasmOwn puts the filters of p's WasmPlugins on its own inbound
// listener (traffic it serves: match mode SERVER).
func (g *Generator) wasmOwn(w *view, p *model.Proxy, pc *ProxyConfig) {
	wps := w.wasmSelected(p)
	if len(wps) == 0 || pc.Own[ListenerType] == nil {
		return
	}
	pc.Own[ListenerType] = g.wasmListeners(pc.Own[ListenerType], wps, true, func(string) bool { return false }, p.ID, nil)
}

// wasmListeners returns s with the plugins' filters on every chain of
// its listeners but those skip names; s itself when none changed.
// server says the listeners receive (inbound), where a chain's port is
// its destination port; otherwise it is the listener's. reuse, when not
// nil, gives the patched form of a listener patched before (nil: patch
// it).
func (g *Generator) wasmListeners(s *Set, wps []*wasmPlugin, server bool, skip func(string) bool, where string,
	reuse func(string, *Resource) *Resource,
) *Set {
	var out map[string]*Resource
	for _, name := range namesOf(s) {
		if skip(name) {
			continue
		}
		if reuse != nil {
			if r := reuse(name, s.at(name)); r != nil {
				if r != s.at(name) {
					if out == nil {
						out = s.asMap()
					}
					out[name] = r
				}
				continue
			}
		}
		l := &listenerv3.Listener{}
		if err := proto.Unmarshal(s.at(name).Wire().GetValue(), l); err != nil {
			continue
		}
		port := l.GetAddress().GetSocketAddress().GetPortValue()
		changed := false
		chains := l.GetFilterChains()
		if d := l.GetDefaultFilterChain(); d != nil {
			chains = append(chains[:len(chains):len(chains)], d)
		}
		for _, fc := range chains {
			t := wasmTraffic{server: server, port: port}
			if server {
				t.port = fc.GetFilterChainMatch().GetDestinationPort().GetValue()
			}
			if wasmChain(fc, wps, t) {
				changed = true
			}
		}
		if !changed {
			continue
		}
		r, err := NewResource(name, ListenerType, l)
		if err != nil {
			// The filters are well formed; should Envoy's rules refuse
			// the listener, it is sent as built and the plugin is not
			// applied there.
			g.log.Error("listener with WasmPlugin filters refused; sent without them", "where", where, "listener", name, "error", err)
			continue
		}
		if out == nil {
			out = s.asMap()
		}
		out[name] = r
	}
	if out == nil {
		return s
	}
	return NewSet(ListenerType, out)
}

// wasmChain puts the plugins that select t on fc: NETWORK plugins among
// its network filters, HTTP plugins in its connection manager.
func wasmChain(fc *listenerv3.FilterChain, wps []*wasmPlugin, t wasmTraffic) bool {
	changed := false
	if np := wasmFor(wps, true, t); len(np) > 0 {
		fc.Filters = wasmNetworkSlots(fc.GetFilters(), np)
		changed = true
	}
	hp := wasmFor(wps, false, t)
	if len(hp) == 0 {
		return changed
	}
	for _, f := range fc.GetFilters() {
		if f.GetName() != hcmName || f.GetTypedConfig() == nil {
			continue
		}
		m := &hcmv3.HttpConnectionManager{}
		if f.GetTypedConfig().UnmarshalTo(m) != nil {
			continue
		}
		m.HttpFilters = wasmHTTPSlots(m.GetHttpFilters(), hp)
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(m)}
		changed = true
	}
	return changed
}

// wasmHTTPSlots inserts the plugins by phase among a connection manager's
// filters, where istiod's listener builder appends them: AUTHN after
// metadata exchange and the CUSTOM authorization filters, AUTHZ after the
// JWT filter, STATS then unspecified after the RBAC filters (before gRPC
// stats, fault, CORS, istio.stats and the router).
func wasmHTTPSlots(fs []*hcmv3.HttpFilter, ph wasmPhases) []*hcmv3.HttpFilter {
	i := 0
	for i < len(fs) && (fs[i].GetName() == mxFilterName || fs[i].GetName() == RBACCustomFilter || fs[i].GetName() == ExtAuthzFilter) {
		i++
	}
	a := i
	for i < len(fs) && fs[i].GetName() == JWTFilter {
		i++
	}
	b := i
	for i < len(fs) && strings.HasPrefix(fs[i].GetName(), RBACAllowFilter) {
		i++
	}
	c := i
	out := make([]*hcmv3.HttpFilter, 0, len(fs)+4)
	out = append(out, fs[:a]...)
	out = appendHTTPWasm(out, ph[extensions.PluginPhase_AUTHN])
	out = append(out, fs[a:b]...)
	out = appendHTTPWasm(out, ph[extensions.PluginPhase_AUTHZ])
	out = append(out, fs[b:c]...)
	out = appendHTTPWasm(out, ph[extensions.PluginPhase_STATS])
	out = appendHTTPWasm(out, ph[extensions.PluginPhase_UNSPECIFIED_PHASE])
	return append(out, fs[c:]...)
}

// wasmNetworkSlots inserts NETWORK plugins among a chain's network
// filters as istiod does: AUTHN and AUTHZ after metadata exchange and
// CUSTOM authorization (ext_authz), before the RBAC filters; STATS and
// unspecified after them (before istio.stats, the TCP proxy or the
// connection manager).
func wasmNetworkSlots(fs []*listenerv3.Filter, ph wasmPhases) []*listenerv3.Filter {
	a := 0
	for a < len(fs) && fs[a].GetName() == mxFilterName {
		a++
	}
	for i := a; i < len(fs); i++ {
		if fs[i].GetName() == netExtAuthzName {
			a = i + 1
		}
	}
	c := a
	for c < len(fs) && fs[c].GetName() == netRBACName {
		c++
	}
	out := make([]*listenerv3.Filter, 0, len(fs)+4)
	out = append(out, fs[:a]...)
	out = appendNetWasm(out, ph[extensions.PluginPhase_AUTHN])
	out = appendNetWasm(out, ph[extensions.PluginPhase_AUTHZ])
	out = append(out, fs[a:c]...)
	out = appendNetWasm(out, ph[extensions.PluginPhase_STATS])
	out = appendNetWasm(out, ph[extensions.PluginPhase_UNSPECIFIED_PHASE])
	return append(out, fs[c:]...)
}

// ecdsSource is ADS with no initial fetch timeout: as istiod, a listener
// waits for its extensions (they may be security filters).
func ecdsSource(typeURLs ...string) *corev3.ExtensionConfigSource {
	return &corev3.ExtensionConfigSource{
		ConfigSource: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			ResourceApiVersion:    corev3.ApiVersion_V3,
			InitialFetchTimeout:   durationpb.New(0),
		},
		TypeUrls: typeURLs,
	}
}

func appendHTTPWasm(out []*hcmv3.HttpFilter, wps []*wasmPlugin) []*hcmv3.HttpFilter {
	for _, wp := range wps {
		out = append(out, &hcmv3.HttpFilter{Name: wp.name, ConfigType: &hcmv3.HttpFilter_ConfigDiscovery{
			ConfigDiscovery: ecdsSource(wasmHTTPType, rbacHTTPType),
		}})
	}
	return out
}

func appendNetWasm(out []*listenerv3.Filter, wps []*wasmPlugin) []*listenerv3.Filter {
	for _, wp := range wps {
		out = append(out, &listenerv3.Filter{Name: wp.name, ConfigType: &listenerv3.Filter_ConfigDiscovery{
			ConfigDiscovery: ecdsSource(wasmNetworkType, rbacNetworkType),
		}})
	}
	return out
}
