package gen

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/meshplane/discovery/pkg/model"
)

// sniffWorld has, for a sidecar in default: a ServiceEntry port without
// protocol on an address (8080), sharing its port with a TLS host
// without address (whose SNI chain needs the TLS inspector); a
// Kubernetes Service port without name (9000); one without name on
// MySQL's port (3306, TCP: Istio does not sniff it); a ServiceEntry port
// without protocol and without address (7000); a headless Service port
// without name with two endpoints (7100).
const sniffWorld = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: default, resourceVersion: "1"}
spec:
  hosts: [api.example.com]
  addresses: [240.0.0.5]
  resolution: DNS
  ports: [{number: 8080, name: http}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: secure, namespace: default, resourceVersion: "1"}
spec:
  hosts: [secure.example.com]
  resolution: DNS
  ports: [{number: 8080, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: default, resourceVersion: "1"}
spec:
  hosts: [ext.example.com]
  resolution: DNS
  ports: [{number: 7000, name: x}]
---
apiVersion: v1
kind: Service
metadata: {name: legacy, namespace: default, resourceVersion: "1"}
spec:
  clusterIP: 10.96.0.30
  selector: {app: legacy}
  ports: [{port: 9000}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: default, resourceVersion: "1"}
spec:
  clusterIP: 10.96.0.31
  ports: [{port: 3306}]
---
apiVersion: v1
kind: Service
metadata: {name: peers, namespace: default, resourceVersion: "1"}
spec:
  clusterIP: None
  ports: [{port: 7100}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: peers-1
  namespace: default
  labels: {kubernetes.io/service-name: peers}
addressType: IPv4
ports: [{port: 7100}]
endpoints:
- addresses: [10.1.0.7]
- addresses: [10.1.0.8]
`

// chainShape is what a filter chain matches and where it sends traffic:
// "hcm RDS" or "tcp CLUSTER".
func chainShape(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	m := fc.GetFilterChainMatch()
	var match []string
	for _, r := range m.GetPrefixRanges() {
		match = append(match, fmt.Sprintf("%s/%d", r.GetAddressPrefix(), r.GetPrefixLen().GetValue()))
	}
	if sni := m.GetServerNames(); len(sni) > 0 {
		match = append(match, "sni="+strings.Join(sni, ","))
	}
	if p := m.GetDestinationPort(); p != nil {
		match = append(match, fmt.Sprintf("port=%d", p.GetValue()))
	}
	if tp := m.GetTransportProtocol(); tp != "" {
		match = append(match, tp)
	}
	if alpn := m.GetApplicationProtocols(); len(alpn) > 0 {
		match = append(match, "alpn="+strings.Join(alpn, ","))
	}
	return fc.GetName() + " [" + strings.Join(match, " ") + "] " + chainTarget(t, fc)
}

// chainTarget is "hcm RDS" or "tcp CLUSTER" for a chain's last filter,
// with "+mtls" when it terminates TLS.
func chainTarget(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	if len(fc.GetFilters()) == 0 {
		return "none"
	}
	f := fc.GetFilters()[len(fc.GetFilters())-1]
	out := "?"
	switch f.GetName() {
	case "envoy.filters.network.http_connection_manager":
		m := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		out = "hcm " + m.GetRds().GetRouteConfigName()
		if m.GetRouteConfig() != nil {
			out = "hcm inline " + m.GetRouteConfig().GetName()
		}
	case "envoy.filters.network.tcp_proxy":
		p := &tcpv3.TcpProxy{}
		if err := f.GetTypedConfig().UnmarshalTo(p); err != nil {
			t.Fatal(err)
		}
		out = "tcp " + p.GetCluster()
	}
	if fc.GetTransportSocket() != nil {
		out += " +tls"
	}
	return out
}

func classListener(t *testing.T, set *Set, name string) *listenerv3.Listener {
	t.Helper()
	r := set.Get(name)
	if r == nil {
		t.Fatalf("no listener %s: %v", name, set.Names)
	}
	l := &listenerv3.Listener{}
	if err := r.Any.UnmarshalTo(l); err != nil {
		t.Fatal(err)
	}
	return l
}

func listenerFilterNames(l *listenerv3.Listener) []string {
	var out []string
	for _, f := range l.GetListenerFilters() {
		out = append(out, f.GetName())
	}
	return out
}

// rdsNames lists the routes the listeners of set fetch over RDS.
func rdsNames(t *testing.T, set *Set) []string {
	t.Helper()
	var out []string
	for _, n := range set.Names {
		l := classListener(t, set, n)
		chains := append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain())
		if l.GetApiListener() != nil {
			m := &hcmv3.HttpConnectionManager{}
			if err := l.GetApiListener().GetApiListener().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m.GetRds().GetRouteConfigName())
		}
		for _, fc := range chains {
			if s := chainTarget(t, fc); strings.HasPrefix(s, "hcm ") && !strings.HasPrefix(s, "hcm inline") {
				out = append(out, strings.Fields(s)[1])
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

const (
	sniffHTTPInspector = "envoy.filters.listener.http_inspector"
	sniffTLSInspector  = "envoy.filters.listener.tls_inspector"
)

// TestSniffedOutboundListeners: a sidecar's listener of a port without
// protocol has, for each service address, a chain that takes what the
// HTTP inspector finds to be HTTP (application_protocols http/1.1, h2c,
// raw_buffer) to an HttpConnectionManager with the service port's route,
// and a TCP chain for the rest, as istiod's buildSidecarOutboundListener
// builds for ListenerProtocolAuto; the inspectors come TLS first.
func TestSniffedOutboundListeners(t *testing.T) {
	w := loadWorld(t, sniffWorld).World()
	cc, err := newForTest(quietLog()).Class(w, sidecar(t, "default"), nil)
	if err != nil {
		t.Fatal(err)
	}
	lds := cc.Sets[ListenerType]
	const (
		api    = "api.example.com:8080"
		legacy = "legacy.default.svc.cluster.local:9000"
		peers  = "peers.default.svc.cluster.local:7100"
	)
	tests := map[string]struct {
		listener string
		filters  []string
		chains   []string
		dflt     string
	}{
		"a ServiceEntry port without protocol, beside a TLS host that needs the TLS inspector": {
			listener: "0.0.0.0_8080", filters: []string{sniffTLSInspector, sniffHTTPInspector},
			chains: []string{
				api + " [240.0.0.5/32 raw_buffer] tcp outbound|8080||api.example.com",
				api + "|http [240.0.0.5/32 raw_buffer alpn=http/1.1,h2c] hcm " + api,
				api + "|tls [240.0.0.5/32 tls] tcp outbound|8080||api.example.com",
				"secure.example.com:8080 [sni=secure.example.com] tcp outbound|8080||secure.example.com",
			},
			dflt: "PassthroughFilterChain [] tcp PassthroughCluster",
		},
		"a Kubernetes Service port without name": {
			listener: "0.0.0.0_9000", filters: []string{sniffHTTPInspector},
			chains: []string{
				legacy + " [10.96.0.30/32 raw_buffer] tcp outbound|9000||legacy.default.svc.cluster.local",
				legacy + "|http [10.96.0.30/32 raw_buffer alpn=http/1.1,h2c] hcm " + legacy,
			},
			dflt: "PassthroughFilterChain [] tcp PassthroughCluster",
		},
		"a port without name on MySQL's port is TCP": {
			listener: "0.0.0.0_3306",
			chains:   []string{"db.default.svc.cluster.local:3306 [10.96.0.31/32] tcp outbound|3306||db.default.svc.cluster.local"},
			dflt:     "PassthroughFilterChain [] tcp PassthroughCluster",
		},
		"a port without protocol nor address: HTTP by the port's route, the rest to the service": {
			listener: "0.0.0.0_7000", filters: []string{sniffHTTPInspector},
			chains: []string{"addressless [raw_buffer alpn=http/1.1,h2c] hcm 7000"},
			dflt:   "ext.example.com:7000 [] tcp outbound|7000||ext.example.com",
		},
		"a headless port without name: both chains per endpoint": {
			listener: "0.0.0.0_7100", filters: []string{sniffHTTPInspector},
			chains: []string{
				peers + "|10.1.0.7 [10.1.0.7/32 raw_buffer] tcp outbound|7100||peers.default.svc.cluster.local",
				peers + "|10.1.0.7|http [10.1.0.7/32 raw_buffer alpn=http/1.1,h2c] hcm " + peers,
				peers + "|10.1.0.8 [10.1.0.8/32 raw_buffer] tcp outbound|7100||peers.default.svc.cluster.local",
				peers + "|10.1.0.8|http [10.1.0.8/32 raw_buffer alpn=http/1.1,h2c] hcm " + peers,
			},
			dflt: "PassthroughFilterChain [] tcp PassthroughCluster",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := classListener(t, lds, tc.listener)
			if got := listenerFilterNames(l); !slices.Equal(got, tc.filters) {
				t.Errorf("listener filters %v, want %v", got, tc.filters)
			}
			var got []string
			for _, fc := range l.GetFilterChains() {
				got = append(got, chainShape(t, fc))
			}
			if !slices.Equal(got, tc.chains) {
				t.Errorf("chains\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.chains, "\n  "))
			}
			if got := chainShape(t, l.GetDefaultFilterChain()); got != tc.dflt {
				t.Errorf("default chain %s, want %s", got, tc.dflt)
			}
			// Istio's: no timeout for the inspectors of a sniffing listener
			// (the mesh's protocolDetectionTimeout, 0s), and go on when one
			// expires.
			sniffs := slices.Contains(tc.filters, sniffHTTPInspector)
			if to := l.GetListenerFiltersTimeout(); sniffs && (to == nil || to.AsDuration() != 0) {
				t.Errorf("listener_filters_timeout %v, want 0s", to)
			}
			if l.GetContinueOnListenerFiltersTimeout() != sniffs {
				t.Errorf("continue_on_listener_filters_timeout %v, want %v", l.GetContinueOnListenerFiltersTimeout(), sniffs)
			}
		})
	}
	// Every route a listener names exists, and only those are sent.
	if got, want := rdsNames(t, lds), cc.Sets[RouteType].Names; !slices.Equal(got, want) {
		t.Errorf("listeners use routes %v; the class has %v", got, want)
	}
	for _, n := range []string{api, legacy, peers, "7000"} {
		if cc.Sets[RouteType].Get(n) == nil {
			t.Errorf("no route %s for a sniffed port's HTTP chain", n)
		}
	}
}

// TestSniffingIsForSidecarsOnly: gateways and proxyless gRPC clients do
// not sniff (Istio's neither do): no HTTP inspector, and the gRPC
// client's API listeners are those of any port.
func TestSniffingIsForSidecarsOnly(t *testing.T) {
	w := loadWorld(t, sniffWorld).World()
	g := newForTest(quietLog())
	gw, err := g.Class(w, labelled(t, "router", "default", map[string]string{"istio": "ingressgateway"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range gw.Sets[ListenerType].Names {
		if l := classListener(t, gw.Sets[ListenerType], n); slices.Contains(listenerFilterNames(l), sniffHTTPInspector) {
			t.Errorf("gateway listener %s sniffs", n)
		}
	}
	grpc, err := g.Class(w, grpcProxy(t, "default"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"api.example.com:8080", "legacy.default.svc.cluster.local:9000"} {
		l := classListener(t, grpc.Sets[ListenerType], n)
		if l.GetApiListener() == nil {
			t.Errorf("gRPC listener %s is not an API listener", n)
		}
	}
	if got, want := rdsNames(t, grpc.Sets[ListenerType]), grpc.Sets[RouteType].Names; !slices.Equal(got, want) {
		t.Errorf("gRPC listeners use routes %v; the class has %v", got, want)
	}
}

// sniffInboundWorld: a workload whose Service has three ports without
// name, in PERMISSIVE (9000), STRICT (9001) and DISABLE (9002), an HTTP
// port (9080), and an ALLOW policy (RBAC on every chain).
const sniffInboundWorld = `apiVersion: v1
kind: Service
metadata: {name: legacy, namespace: default, resourceVersion: "1"}
spec:
  clusterIP: 10.96.0.30
  selector: {app: legacy}
  ports: [{port: 9000, name: a}, {port: 9001, name: b}, {port: 9002, name: c}, {port: 9080, name: http}]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: legacy, namespace: default}
spec:
  selector: {matchLabels: {app: legacy}}
  portLevelMtls: {9001: {mode: STRICT}, 9002: {mode: DISABLE}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: legacy, namespace: default}
spec:
  selector: {matchLabels: {app: legacy}}
  rules: [{from: [{source: {namespaces: [default]}}]}]
`

func legacyProxy(t *testing.T) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy("sidecar~10.1.0.30~legacy-1.default~default.svc.cluster.local",
		map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "legacy"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSniffedInboundChains: the virtualInbound chains of a sniffed port
// are istiod's for ListenerProtocolAuto (getFilterChainMatchOptions):
// PERMISSIVE the five of inboundPermissiveFilterChainMatchWithMxcOptions,
// STRICT and DISABLE two each, HTTP chains with the HTTP RBAC filters and
// TCP chains with the network ones; the HTTP inspector runs on the ports
// that sniff plaintext only.
func TestSniffedInboundChains(t *testing.T) {
	w := loadWorld(t, sniffInboundWorld).World()
	p := legacyProxy(t)
	g := newForTest(quietLog())
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	l := classListener(t, pc.Own[ListenerType], VirtualInbound)
	const (
		mtlsHTTP = "alpn=istio-http/1.0,istio-http/1.1,istio-h2"
		mtlsTCP  = "alpn=istio-peer-exchange,istio"
	)
	want := map[int32][]string{
		9000: {
			"inbound|9000||-mtls-http [port=9000 tls " + mtlsHTTP + "] hcm inline inbound|9000|| +tls",
			"inbound|9000||-http [port=9000 raw_buffer alpn=http/1.1,h2c] hcm inline inbound|9000||",
			"inbound|9000||-mtls [port=9000 tls " + mtlsTCP + "] tcp inbound|9000|| +tls",
			"inbound|9000|| [port=9000 raw_buffer] tcp inbound|9000||",
			"inbound|9000||-tls [port=9000 tls] tcp inbound|9000||",
		},
		// No transport_protocol: Istio's STRICT chains match "tls", and
		// what they do not match finds no chain (Envoy does not fall back
		// to the passthrough's chains, which match no port); here the TCP
		// chain takes everything else and plaintext fails its handshake.
		9001: {
			"inbound|9001||-http [port=9001 " + mtlsHTTP + "] hcm inline inbound|9001|| +tls",
			"inbound|9001|| [port=9001] tcp inbound|9001|| +tls",
		},
		// The TLS inspector does not run on a DISABLE port (no chain of
		// it matches tls), so TLS to it is raw_buffer and goes to its
		// TCP proxy, as on Istio's.
		9002: {
			"inbound|9002||-http [port=9002 raw_buffer alpn=http/1.1,h2c] hcm inline inbound|9002||",
			"inbound|9002|| [port=9002 raw_buffer] tcp inbound|9002||",
		},
	}
	got := map[int32][]string{}
	for _, fc := range l.GetFilterChains() {
		port := int32(fc.GetFilterChainMatch().GetDestinationPort().GetValue())
		if _, ok := want[port]; !ok {
			continue
		}
		got[port] = append(got[port], chainShape(t, fc))
		rbac := chainRBACKind(t, fc)
		if strings.HasPrefix(chainTarget(t, fc), "hcm") != (rbac == "http") || rbac == "" {
			t.Errorf("chain %s has RBAC %q", fc.GetName(), rbac)
		}
	}
	for port, chains := range want {
		if !slices.Equal(got[port], chains) {
			t.Errorf("port %d chains\n  %s\nwant\n  %s", port, strings.Join(got[port], "\n  "), strings.Join(chains, "\n  "))
		}
	}
	wantFilters := []string{"envoy.filters.listener.original_dst", sniffTLSInspector, sniffHTTPInspector}
	if got := listenerFilterNames(l); !slices.Equal(got, wantFilters) {
		t.Fatalf("listener filters %v, want %v", got, wantFilters)
	}
	// The passthrough sniffs plaintext HTTP, so the HTTP inspector runs
	// everywhere except on the ports that do not sniff it: 9001
	// (STRICT), 9080 (HTTP) and 15006 (the blackhole chain), as istiod's
	// populateListenerFilters; the TLS inspector everywhere except on
	// 9002 (DISABLE) and 15006.
	disabledOn := func(f *listenerv3.ListenerFilter) []string {
		var ports []string
		for _, r := range f.GetFilterDisabled().GetOrMatch().GetRules() {
			ports = append(ports, fmt.Sprintf("%d-%d", r.GetDestinationPortRange().GetStart(), r.GetDestinationPortRange().GetEnd()))
		}
		return ports
	}
	if got := disabledOn(l.GetListenerFilters()[2]); !slices.Equal(got, []string{"9001-9002", "9080-9081", "15006-15007"}) {
		t.Errorf("http_inspector disabled on %v, want 9001, 9080 and 15006", got)
	}
	if got := disabledOn(l.GetListenerFilters()[1]); !slices.Equal(got, []string{"9002-9003", "15006-15007"}) {
		t.Errorf("tls_inspector disabled on %v, want 9002 and 15006", got)
	}
	if to := l.GetListenerFiltersTimeout(); to == nil || to.AsDuration() != 0 || !l.GetContinueOnListenerFiltersTimeout() {
		t.Errorf("listener filters timeout %v, continue %v; want Istio's 0s and true", to, l.GetContinueOnListenerFiltersTimeout())
	}
	for port, downstream := range map[int32]bool{9000: true, 9001: true, 9002: true, 9080: false} {
		if got := inboundUsesDownstreamProtocol(t, pc, port); got != downstream {
			t.Errorf("inbound cluster of %d uses the downstream protocol: %v, want %v (Istio's setUpstreamProtocol)", port, got, downstream)
		}
	}
}

// chainRBACKind says which RBAC a chain enforces: "http" (in its connection
// manager), "tcp" (a network filter) or "".
func chainRBACKind(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	for _, f := range fc.GetFilters() {
		switch f.GetName() {
		case netRBACName:
			return "tcp"
		case "envoy.filters.network.http_connection_manager":
			m := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			for _, h := range m.GetHttpFilters() {
				if strings.HasPrefix(h.GetName(), "envoy.filters.http.rbac") {
					return "http"
				}
			}
		}
	}
	return ""
}

func inboundUsesDownstreamProtocol(t *testing.T, pc *ProxyConfig, port int32) bool {
	t.Helper()
	r := pc.Own[ClusterType].Get(InboundClusterName(port))
	if r == nil {
		t.Fatalf("no inbound cluster for %d", port)
	}
	c := &clusterv3.Cluster{}
	if err := r.Any.UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	a := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if a == nil {
		return false
	}
	opts := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(opts); err != nil {
		t.Fatal(err)
	}
	return opts.GetUseDownstreamProtocolConfig() != nil
}
