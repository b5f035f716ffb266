package envoyfilter

import (
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"
)

func TestClusterOperations(t *testing.T) {
	newCluster := func(name string) *cluster.Cluster {
		return &cluster.Cluster{
			Name: name, ConnectTimeout: durationpb.New(10 * time.Second),
			DnsResolvers: []*core.Address{{Address: &core.Address_Pipe{Pipe: &core.Pipe{Path: "/a"}}}},
		}
	}
	tests := map[string]struct {
		spec, name string
		hosts      []string
		ctx        networking.EnvoyFilter_PatchContext
		removed    bool
		timeout    time.Duration
		resolvers  int
		nomatch    bool
	}{
		"MERGE by service and port replaces a duration and appends to a list": {
			spec: "configPatches:\n- applyTo: CLUSTER\n  match: {cluster: {service: reviews.default.svc.cluster.local, portNumber: 9080}}\n" +
				"  patch: {operation: MERGE, value: {connect_timeout: 1.5s, dns_resolvers: [{pipe: {path: /b}}]}}\n",
			name: "outbound|9080||reviews.default.svc.cluster.local", ctx: outbound, timeout: 1500 * time.Millisecond, resolvers: 2,
		},
		"MERGE_AND_REPLACE_LIST replaces the list": {
			spec: "configPatches:\n- applyTo: CLUSTER\n  patch: {operation: MERGE_AND_REPLACE_LIST, value: {dns_resolvers: [{pipe: {path: /b}}]}}\n",
			name: "BlackHoleCluster", ctx: outbound, timeout: 10 * time.Second, resolvers: 1,
		},
		"a subset match needs the subset": {
			spec: "configPatches:\n- applyTo: CLUSTER\n  match: {cluster: {subset: v2}}\n  patch: {operation: REMOVE}\n",
			name: "outbound|9080|v1|reviews.default.svc.cluster.local", ctx: outbound, timeout: 10 * time.Second, resolvers: 1, nomatch: true,
		},
		"REMOVE by subset": {
			spec: "configPatches:\n- applyTo: CLUSTER\n  match: {cluster: {subset: v1}}\n  patch: {operation: REMOVE}\n",
			name: "outbound|9080|v1|reviews.default.svc.cluster.local", ctx: outbound, removed: true,
		},
		"REMOVE by name": {
			spec: "configPatches:\n- applyTo: CLUSTER\n  match: {context: GATEWAY, cluster: {name: BlackHoleCluster}}\n  patch: {operation: REMOVE}\n",
			name: "BlackHoleCluster", ctx: gateway, removed: true,
		},
		"an inbound cluster's service is one of the services selecting the workload": {
			spec: "configPatches:\n- applyTo: CLUSTER\n  match: {context: SIDECAR_INBOUND, cluster: {service: reviews.default.svc.cluster.local}}\n  patch: {operation: REMOVE}\n",
			name: "inbound|9080||", hosts: []string{"reviews.default.svc.cluster.local"}, ctx: inbound, removed: true,
		},
		"the DNS SRV form of a name is parsed": {
			spec: "configPatches:\n- applyTo: CLUSTER\n  match: {context: GATEWAY, cluster: {service: web.default.svc.cluster.local, portNumber: 80}}\n  patch: {operation: REMOVE}\n",
			name: "outbound_.80_._.web.default.svc.cluster.local", ctx: gateway, removed: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ps := patchesOf(t, tc.spec)
			c := newCluster(tc.name)
			if ClusterMatches(tc.ctx, ps, tc.name, tc.hosts) == tc.nomatch {
				t.Errorf("ClusterMatches = %v, want %v", tc.nomatch, !tc.nomatch)
			}
			applied := Applied{}
			kept := PatchCluster(tc.ctx, ps, c, tc.hosts, applied)
			if (len(applied) > 0) == tc.nomatch {
				t.Errorf("applied = %v, want %v", len(applied) > 0, !tc.nomatch)
			}
			if kept == tc.removed {
				t.Fatalf("kept = %v, want %v", kept, !tc.removed)
			}
			if !kept {
				return
			}
			if got := c.GetConnectTimeout().AsDuration(); got != tc.timeout {
				t.Errorf("connect_timeout %v, want %v", got, tc.timeout)
			}
			if got := len(c.GetDnsResolvers()); got != tc.resolvers {
				t.Errorf("%d DNS resolvers, want %d", got, tc.resolvers)
			}
		})
	}
}

func TestClusterTransportSocketMergeAndAdd(t *testing.T) {
	c := &cluster.Cluster{Name: "outbound|443||ext.example.com", TransportSocket: &core.TransportSocket{
		Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(t, &tlsv3.UpstreamTlsContext{Sni: "ext.example.com"})},
	}}
	ps := patchesOf(t, `configPatches:
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND, cluster: {service: ext.example.com}}
  patch:
    operation: MERGE
    value:
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config: {'@type': type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext, allow_renegotiation: true}
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND}
  patch: {operation: ADD, value: {name: added, type: STATIC, connect_timeout: 1s}}
`)
	PatchCluster(outbound, ps, c, nil, Applied{})
	tc := &tlsv3.UpstreamTlsContext{}
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(tc); err != nil {
		t.Fatal(err)
	}
	if tc.GetSni() != "ext.example.com" || !tc.GetAllowRenegotiation() {
		t.Errorf("the TLS context was not merged into: %v", tc)
	}
	added := AddedClusters(outbound, ps, Applied{})
	if len(added) != 1 || added[0].GetName() != "added" {
		t.Errorf("added clusters %v", added)
	}
	if len(AddedClusters(inbound, ps, Applied{})) != 0 {
		t.Error("an outbound ADD added an inbound cluster")
	}
}

func routeConfig(name string, vhosts ...string) *route.RouteConfiguration {
	rc := &route.RouteConfiguration{Name: name}
	for _, vh := range vhosts {
		rc.VirtualHosts = append(rc.VirtualHosts, &route.VirtualHost{
			Name: vh, Domains: []string{vh},
			Routes: []*route.Route{{
				Name: "default", Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "c"}}},
			}},
		})
	}
	return rc
}

func routesOf(rc *route.RouteConfiguration) string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		var rs []string
		for _, r := range vh.GetRoutes() {
			rs = append(rs, r.GetName())
		}
		out = append(out, vh.GetName()+"["+strings.Join(rs, " ")+"]")
	}
	return strings.Join(out, ",")
}

func TestRouteOperations(t *testing.T) {
	tests := map[string]struct {
		ctx        networking.EnvoyFilter_PatchContext
		rc         *route.RouteConfiguration
		spec, want string
		untouched  bool
	}{
		"istiod's route name PORT matches discovery's HOST:PORT": {
			ctx: outbound, rc: routeConfig("reviews:9080", "reviews:9080"),
			spec: "configPatches:\n- applyTo: HTTP_ROUTE\n  match: {routeConfiguration: {name: '9080'}}\n  patch: {operation: INSERT_FIRST, value: {name: first, match: {prefix: /}, direct_response: {status: 200}}}\n",
			want: "reviews:9080[first default]",
		},
		"another port's name does not": {
			ctx: outbound, rc: routeConfig("reviews:9080", "reviews:9080"),
			spec:      "configPatches:\n- applyTo: HTTP_ROUTE\n  match: {routeConfiguration: {name: '80'}}\n  patch: {operation: INSERT_FIRST, value: {name: first, match: {prefix: /}, direct_response: {status: 200}}}\n",
			want:      "reviews:9080[default]",
			untouched: true,
		},
		"INSERT_AFTER a named route, by port number": {
			ctx: outbound, rc: routeConfig("9080", "a:9080"),
			spec: "configPatches:\n- applyTo: HTTP_ROUTE\n  match: {routeConfiguration: {portNumber: 9080, vhost: {route: {name: default}}}}\n  patch: {operation: INSERT_AFTER, value: {name: after, match: {prefix: /}, direct_response: {status: 200}}}\n",
			want: "a:9080[default after]",
		},
		"REMOVE of a route by action": {
			ctx: outbound, rc: routeConfig("9080", "a:9080"),
			spec: "configPatches:\n- applyTo: HTTP_ROUTE\n  match: {routeConfiguration: {vhost: {route: {action: ROUTE}}}}\n  patch: {operation: REMOVE}\n",
			want: "a:9080[]",
		},
		"REMOVE of a route by another action keeps it": {
			ctx: outbound, rc: routeConfig("9080", "a:9080"),
			spec:      "configPatches:\n- applyTo: HTTP_ROUTE\n  match: {routeConfiguration: {vhost: {route: {action: REDIRECT}}}}\n  patch: {operation: REMOVE}\n",
			want:      "a:9080[default]",
			untouched: true,
		},
		"VIRTUAL_HOST REMOVE by domain, then ADD": {
			ctx: outbound, rc: routeConfig("9080", "a:9080", "b:9080"),
			spec: "configPatches:\n- applyTo: VIRTUAL_HOST\n  match: {routeConfiguration: {vhost: {domainName: 'a:9080'}}}\n  patch: {operation: REMOVE}\n" +
				"- applyTo: VIRTUAL_HOST\n  match: {routeConfiguration: {portNumber: 9080}}\n  patch: {operation: ADD, value: {name: c, domains: [c]}}\n",
			want: "b:9080[default],c[]",
		},
		"VIRTUAL_HOST REPLACE": {
			ctx: outbound, rc: routeConfig("9080", "a:9080"),
			spec: "configPatches:\n- applyTo: VIRTUAL_HOST\n  match: {routeConfiguration: {vhost: {name: 'a:9080'}}}\n  patch: {operation: REPLACE, value: {name: z, domains: ['*']}}\n",
			want: "z[]",
		},
		"a gateway's route by port name and gateway": {
			ctx: gateway, rc: routeConfig("https.443.https.public.istio-system", "example.com"),
			spec: "configPatches:\n- applyTo: HTTP_ROUTE\n  match: {context: GATEWAY, routeConfiguration: {portNumber: 443, portName: https, gateway: istio-system/public}}\n  patch: {operation: ADD, value: {name: added, match: {prefix: /}, direct_response: {status: 200}}}\n",
			want: "example.com[default added]",
		},
		"a gateway's route for another gateway is not patched": {
			ctx: gateway, rc: routeConfig("https.443.https.public.istio-system", "example.com"),
			spec:      "configPatches:\n- applyTo: HTTP_ROUTE\n  match: {context: GATEWAY, routeConfiguration: {gateway: istio-system/other}}\n  patch: {operation: ADD, value: {name: added, match: {prefix: /}, direct_response: {status: 200}}}\n",
			want:      "example.com[default]",
			untouched: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ps := patchesOf(t, tc.spec)
			applied := Applied{}
			PatchRouteConfiguration(tc.ctx, ps, tc.rc, applied)
			if got := routesOf(tc.rc); got != tc.want {
				t.Errorf("routes %s, want %s", got, tc.want)
			}
			if (len(applied) == 0) != tc.untouched {
				t.Errorf("applied = %v, want %v", len(applied) > 0, !tc.untouched)
			}
		})
	}
}

func TestRouteConfigurationMerge(t *testing.T) {
	rc := routeConfig("inbound|8080||", "inbound|http|8080")
	ps := patchesOf(t, "configPatches:\n- applyTo: ROUTE_CONFIGURATION\n  match: {context: SIDECAR_INBOUND, routeConfiguration: {portNumber: 8080}}\n  patch: {operation: MERGE, value: {max_direct_response_body_size_bytes: 10}}\n")
	if !RouteMatches(inbound, ps, rc.GetName()) {
		t.Fatal("RouteMatches: no")
	}
	applied := Applied{}
	PatchRouteConfiguration(inbound, ps, rc, applied)
	if rc.GetMaxDirectResponseBodySizeBytes().GetValue() != 10 || len(applied) != 1 {
		t.Errorf("inbound route configuration not merged: %v", rc)
	}
}

func TestSelectionOrderAndProxyMatch(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	mk := func(ns, name string, prio int32, created int) *Filter {
		return &Filter{Namespace: ns, Name: name, Priority: prio, Created: at(created)}
	}
	fs := []*Filter{mk("default", "young", 0, 2), mk("istio-system", "root-young", 0, 3), mk("default", "old", 0, 1), mk("default", "first", -1, 9), mk("default", "b", 0, 1)}
	Order(fs, "istio-system")
	var got []string
	for _, f := range fs {
		got = append(got, f.Name)
	}
	if want := "first,root-young,b,old,young"; strings.Join(got, ",") != want {
		t.Errorf("order %v, want %s (priority, then root namespace, then oldest, then name)", got, want)
	}

	sel := &Filter{Namespace: "default", Selector: map[string]string{"app": "a"}}
	gw := &Filter{Namespace: "default", TargetRefs: []*typev1beta1.PolicyTargetReference{{Group: "gateway.networking.k8s.io", Kind: "Gateway", Name: "gw"}}}
	w := func(labels map[string]string) Workload { return Workload{Namespace: "default", Labels: labels} }
	cases := []struct {
		f    *Filter
		w    Workload
		want bool
	}{
		{sel, w(map[string]string{"app": "a", "v": "1"}), true},
		{sel, w(map[string]string{"app": "b"}), false},
		{&Filter{Namespace: "default"}, w(nil), true},
		{gw, w(map[string]string{"app": "a"}), false},
		{gw, w(map[string]string{gatewayNameLabel: "gw"}), true},
		{gw, w(map[string]string{gatewayNameLabel: "other"}), false},
		{sel, w(map[string]string{gatewayNameLabel: "gw", "app": "a"}), true},
	}
	for i, c := range cases {
		if got := Selects(c.f, c.w); got != c.want {
			t.Errorf("case %d: Selects = %v, want %v", i, got, c.want)
		}
	}

	f := compile(t, "default", "v", `configPatches:
- applyTo: CLUSTER
  match: {proxy: {proxyVersion: '^1\.2[0-9].*'}}
  patch: {operation: REMOVE}
- applyTo: CLUSTER
  match: {proxy: {proxyVersion: '^1\.20.*', metadata: {FOO: bar}}}
  patch: {operation: REMOVE}
`)
	for _, c := range []struct {
		w    Workload
		want string
	}{
		{Workload{Version: "1.24.1"}, "10"},
		{Workload{Version: "1.20.0", Metadata: map[string]string{"FOO": "bar"}}, "11"},
		{Workload{Version: "1.20.0"}, "10"},
		{Workload{}, "00"},
	} {
		if got := ProxyDigest([]*Filter{f}, c.w); got != c.want {
			t.Errorf("%+v: digest %s, want %s", c.w, got, c.want)
		}
	}
}

func TestCompileReportsWhatItDoesNotApply(t *testing.T) {
	f := compile(t, "default", "x", `configPatches:
- applyTo: BOOTSTRAP
  patch: {operation: MERGE, value: {stats_flush_interval: 5s}}
- applyTo: EXTENSION_CONFIG
  patch: {operation: ADD, value: {name: e}}
- applyTo: CLUSTER
  match: {context: WAYPOINT}
  patch: {operation: REMOVE}
- applyTo: HTTP_FILTER
  patch: {operation: INSERT_FIRST, value: {name: ok}}
- applyTo: CLUSTER
  patch: {operation: INSERT_FIRST, value: {name: becomes-add}}
`)
	if len(f.Problems) != 3 || len(f.Patches) != 2 {
		t.Fatalf("problems %v, %d patches", f.Problems, len(f.Patches))
	}
	if f.Patches[1].Operation != networking.EnvoyFilter_Patch_ADD {
		t.Errorf("INSERT_FIRST of a CLUSTER is %v, want ADD as in istiod", f.Patches[1].Operation)
	}
}
