package envoyfilter

import (
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	lua "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"
)

const (
	outbound = networking.EnvoyFilter_SIDECAR_OUTBOUND
	inbound  = networking.EnvoyFilter_SIDECAR_INBOUND
	gateway  = networking.EnvoyFilter_GATEWAY
)

// compile compiles an EnvoyFilter spec written as YAML.
func compile(t *testing.T, ns, name, spec string) *Filter {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	ef := &networking.EnvoyFilter{}
	if err := protojson.Unmarshal(js, ef); err != nil {
		t.Fatal(err)
	}
	return Compile(ns, name, "1", time.Time{}, ef)
}

// patchesOf are the patches of spec for a proxy without version or
// metadata.
func patchesOf(t *testing.T, spec string) Patches {
	t.Helper()
	f := compile(t, "default", "ef", spec)
	if len(f.Problems) > 0 {
		t.Fatalf("problems: %v", f.Problems)
	}
	return For([]*Filter{f}, Workload{Namespace: "default"})
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// httpListener is 0.0.0.0_80 with one chain whose connection manager has
// the HTTP filters named, the last the router.
func httpListener(t *testing.T, filters ...string) *listener.Listener {
	t.Helper()
	hc := &hcm.HttpConnectionManager{StatPrefix: "outbound_80"}
	for _, f := range filters {
		var cfg proto.Message = &lua.Lua{DefaultSourceCode: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: f}}}
		if f == "envoy.filters.http.router" {
			cfg = &router.Router{}
		}
		hc.HttpFilters = append(hc.HttpFilters, &hcm.HttpFilter{Name: f, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(t, cfg)}})
	}
	return &listener.Listener{
		Name:    "0.0.0.0_80",
		Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: "0.0.0.0", PortSpecifier: &core.SocketAddress_PortValue{PortValue: 80}}}},
		FilterChains: []*listener.FilterChain{{
			Name:    "chain",
			Filters: []*listener.Filter{{Name: httpConnectionManager, ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(t, hc)}}},
		}},
	}
}

func hcmOf(t *testing.T, f *listener.Filter) *hcm.HttpConnectionManager {
	t.Helper()
	hc := &hcm.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hc); err != nil {
		t.Fatal(err)
	}
	return hc
}

func httpNames(t *testing.T, l *listener.Listener) string {
	t.Helper()
	var out []string
	for _, h := range hcmOf(t, l.GetFilterChains()[0].GetFilters()[0]).GetHttpFilters() {
		out = append(out, strings.TrimPrefix(h.GetName(), "envoy.filters.http."))
	}
	return strings.Join(out, ",")
}

// httpPatch is one HTTP_FILTER patch of the connection manager, relative
// to sub (none when ""), adding a filter named x.
func httpPatch(ctx, op, sub string) string {
	s := "configPatches:\n- applyTo: HTTP_FILTER\n  match:\n    context: " + ctx + "\n    listener:\n      filterChain:\n        filter:\n          name: envoy.filters.network.http_connection_manager\n"
	if sub != "" {
		s += "          subFilter: {name: " + sub + "}\n"
	}
	return s + "  patch:\n    operation: " + op + "\n    value: {name: x, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {inline_string: new}}}\n"
}

func TestHTTPFilterOperations(t *testing.T) {
	tests := map[string]struct {
		spec    string
		want    string
		applied bool
	}{
		"INSERT_BEFORE puts the filter before the sub-filter":            {httpPatch("SIDECAR_OUTBOUND", "INSERT_BEFORE", "envoy.filters.http.router"), "a,x,router", true},
		"INSERT_AFTER puts it after the sub-filter":                      {httpPatch("SIDECAR_OUTBOUND", "INSERT_AFTER", "a"), "a,x,router", true},
		"INSERT_BEFORE without a sub-filter puts it first":               {httpPatch("SIDECAR_OUTBOUND", "INSERT_BEFORE", ""), "x,a,router", true},
		"INSERT_AFTER without a sub-filter puts it last":                 {httpPatch("SIDECAR_OUTBOUND", "INSERT_AFTER", ""), "a,router,x", true},
		"INSERT_FIRST puts it first":                                     {httpPatch("ANY", "INSERT_FIRST", "a"), "x,a,router", true},
		"ADD appends it":                                                 {httpPatch("SIDECAR_OUTBOUND", "ADD", ""), "a,router,x", true},
		"REPLACE replaces the sub-filter":                                {httpPatch("SIDECAR_OUTBOUND", "REPLACE", "a"), "x,router", true},
		"REMOVE removes the sub-filter":                                  {httpPatch("SIDECAR_OUTBOUND", "REMOVE", "a"), "router", true},
		"INSERT_BEFORE a sub-filter that is not there does nothing":      {httpPatch("SIDECAR_OUTBOUND", "INSERT_BEFORE", "nope"), "a,router", false},
		"REPLACE without a sub-filter does nothing":                      {httpPatch("SIDECAR_OUTBOUND", "REPLACE", ""), "a,router", false},
		"a patch for another context does nothing":                       {httpPatch("SIDECAR_INBOUND", "ADD", ""), "a,router", false},
		"MERGE renames the sub-filter it merges into (the patch's name)": {httpPatch("SIDECAR_OUTBOUND", "MERGE", "a"), "x,router", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := httpListener(t, "a", "envoy.filters.http.router")
			applied := Applied{}
			if !PatchListener(outbound, patchesOf(t, tc.spec), l, applied) {
				t.Fatal("listener removed")
			}
			if got := httpNames(t, l); got != tc.want {
				t.Errorf("HTTP filters %s, want %s", got, tc.want)
			}
			if (len(applied) > 0) != tc.applied {
				t.Errorf("applied = %v, want %v", len(applied) > 0, tc.applied)
			}
		})
	}
}

func TestHTTPFilterMergeMergesTypedConfig(t *testing.T) {
	l := httpListener(t, "a", "envoy.filters.http.router")
	ps := patchesOf(t, `configPatches:
- applyTo: HTTP_FILTER
  match: {listener: {portNumber: 80, filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}}
  patch:
    operation: MERGE
    value: {typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router, suppress_envoy_headers: true}}
`)
	PatchListener(outbound, ps, l, Applied{})
	hc := hcmOf(t, l.GetFilterChains()[0].GetFilters()[0])
	r := &router.Router{}
	if err := hc.GetHttpFilters()[1].GetTypedConfig().UnmarshalTo(r); err != nil {
		t.Fatal(err)
	}
	if !r.GetSuppressEnvoyHeaders() || hc.GetHttpFilters()[1].GetName() != "envoy.filters.http.router" {
		t.Errorf("router after MERGE: %v named %s", r, hc.GetHttpFilters()[1].GetName())
	}
	if hc.GetStatPrefix() != "outbound_80" {
		t.Errorf("the connection manager lost its own settings: %v", hc)
	}
	// A port the listener does not have: nothing.
	l2 := httpListener(t, "a", "envoy.filters.http.router")
	ps2 := patchesOf(t, strings.Replace(httpPatch("ANY", "ADD", ""), "listener:\n", "listener:\n      portNumber: 81\n", 1))
	if PatchListener(outbound, ps2, l2, Applied{}); httpNames(t, l2) != "a,router" {
		t.Errorf("a patch for port 81 changed 0.0.0.0_80: %s", httpNames(t, l2))
	}
}

func tcpChain(t *testing.T, name string, port uint32) *listener.FilterChain {
	t.Helper()
	return &listener.FilterChain{
		Name:             name,
		FilterChainMatch: &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port)},
		Filters: []*listener.Filter{{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listener.Filter_TypedConfig{
			TypedConfig: mustAny(t, &tcp.TcpProxy{StatPrefix: name, ClusterSpecifier: &tcp.TcpProxy_Cluster{Cluster: name}}),
		}}},
	}
}

func chainNames(l *listener.Listener) string {
	var out []string
	for _, fc := range l.GetFilterChains() {
		var fs []string
		for _, f := range fc.GetFilters() {
			fs = append(fs, f.GetName())
		}
		out = append(out, fc.GetName()+"["+strings.Join(fs, " ")+"]")
	}
	return strings.Join(out, ",")
}

func TestFilterChainAndNetworkFilterOperations(t *testing.T) {
	virtual := func() *listener.Listener {
		return &listener.Listener{Name: "virtualInbound", FilterChains: []*listener.FilterChain{tcpChain(t, "inbound|8080||", 8080), tcpChain(t, "inbound|9090||", 9090)}}
	}
	tests := map[string]struct {
		spec, want string
		removed    bool
	}{
		"REMOVE of a filter chain by the port of the virtual listener": {
			spec: "configPatches:\n- applyTo: FILTER_CHAIN\n  match: {context: SIDECAR_INBOUND, listener: {portNumber: 8080}}\n  patch: {operation: REMOVE}\n",
			want: "inbound|9090||[envoy.filters.network.tcp_proxy]",
		},
		"ADD of a filter chain appends it": {
			spec: "configPatches:\n- applyTo: FILTER_CHAIN\n  match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound}}\n  patch: {operation: ADD, value: {name: extra, filters: [{name: envoy.filters.network.echo}]}}\n",
			want: "inbound|8080||[envoy.filters.network.tcp_proxy],inbound|9090||[envoy.filters.network.tcp_proxy],extra[envoy.filters.network.echo]",
		},
		"INSERT_BEFORE of a network filter in the named chain": {
			spec: "configPatches:\n- applyTo: NETWORK_FILTER\n  match: {context: SIDECAR_INBOUND, listener: {filterChain: {name: 'inbound|9090||', filter: {name: envoy.filters.network.tcp_proxy}}}}\n  patch: {operation: INSERT_BEFORE, value: {name: envoy.filters.network.echo}}\n",
			want: "inbound|8080||[envoy.filters.network.tcp_proxy],inbound|9090||[envoy.filters.network.echo envoy.filters.network.tcp_proxy]",
		},
		"REPLACE of a network filter": {
			spec: "configPatches:\n- applyTo: NETWORK_FILTER\n  match: {listener: {portNumber: 8080, filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}\n  patch: {operation: REPLACE, value: {name: envoy.filters.network.echo}}\n",
			want: "inbound|8080||[envoy.filters.network.echo],inbound|9090||[envoy.filters.network.tcp_proxy]",
		},
		"REMOVE of a network filter leaves its chain": {
			spec: "configPatches:\n- applyTo: NETWORK_FILTER\n  match: {listener: {filterChain: {destinationPort: 9090, filter: {name: envoy.filters.network.tcp_proxy}}}}\n  patch: {operation: REMOVE}\n",
			want: "inbound|8080||[envoy.filters.network.tcp_proxy],inbound|9090||[]",
		},
		"REMOVE of the listener": {
			spec:    "configPatches:\n- applyTo: LISTENER\n  match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound}}\n  patch: {operation: REMOVE}\n",
			removed: true,
		},
		"a LISTENER match by port does not match a virtual listener without one": {
			spec: "configPatches:\n- applyTo: LISTENER\n  match: {listener: {portNumber: 8080}}\n  patch: {operation: REMOVE}\n",
			want: "inbound|8080||[envoy.filters.network.tcp_proxy],inbound|9090||[envoy.filters.network.tcp_proxy]",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := virtual()
			kept := PatchListener(inbound, patchesOf(t, tc.spec), l, Applied{})
			if kept == tc.removed {
				t.Fatalf("kept = %v, want %v", kept, !tc.removed)
			}
			if kept && chainNames(l) != tc.want {
				t.Errorf("chains %s\nwant   %s", chainNames(l), tc.want)
			}
		})
	}
}

func TestNetworkFilterMergeAndListenerMerge(t *testing.T) {
	l := &listener.Listener{Name: "virtualInbound", FilterChains: []*listener.FilterChain{tcpChain(t, "inbound|8080||", 8080)}}
	ps := patchesOf(t, `configPatches:
- applyTo: NETWORK_FILTER
  match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy}}}}
  patch: {operation: MERGE, value: {typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, idle_timeout: 5s}}}
- applyTo: LISTENER
  match: {context: SIDECAR_INBOUND}
  patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 1024, listener_filters: [{name: envoy.filters.listener.tls_inspector}]}}
- applyTo: LISTENER_FILTER
  match: {listener: {name: virtualInbound}}
  patch: {operation: INSERT_FIRST, value: {name: envoy.filters.listener.original_dst}}
`)
	PatchListener(inbound, ps, l, Applied{})
	tp := &tcp.TcpProxy{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	if tp.GetIdleTimeout().AsDuration() != 5*time.Second || tp.GetStatPrefix() != "inbound|8080||" {
		t.Errorf("tcp_proxy after MERGE: %v", tp)
	}
	if l.GetPerConnectionBufferLimitBytes().GetValue() != 1024 {
		t.Error("LISTENER MERGE not applied")
	}
	var lf []string
	for _, f := range l.GetListenerFilters() {
		lf = append(lf, f.GetName())
	}
	if strings.Join(lf, ",") != "envoy.filters.listener.original_dst,envoy.filters.listener.tls_inspector" {
		t.Errorf("listener filters %v", lf)
	}
}

func TestAddedListenersFollowIstiodsContextRule(t *testing.T) {
	ps := patchesOf(t, "configPatches:\n- applyTo: LISTENER\n  patch: {operation: ADD, value: {name: extra}}\n")
	if n := len(AddedListeners(outbound, ps, Applied{})); n != 1 {
		t.Errorf("ANY adds %d outbound listeners, want 1", n)
	}
	if n := len(AddedListeners(inbound, ps, Applied{})); n != 0 {
		t.Errorf("ANY adds %d inbound listeners, want 0 (istiod adds ANY to outbound and gateways only)", n)
	}
	ps = patchesOf(t, "configPatches:\n- applyTo: LISTENER\n  match: {context: SIDECAR_INBOUND}\n  patch: {operation: ADD, value: {name: extra}}\n")
	if n := len(AddedListeners(inbound, ps, Applied{})); n != 1 {
		t.Errorf("SIDECAR_INBOUND adds %d inbound listeners, want 1", n)
	}
	a, b := AddedListeners(inbound, ps, Applied{}), AddedListeners(inbound, ps, Applied{})
	if a[0] == b[0] || a[0] == ps[networking.EnvoyFilter_LISTENER][0].Value {
		t.Error("added listeners share the patch's value: a later change to one would change the others")
	}
}
