package gen

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func TestClassifyServer(t *testing.T) {
	tls := func(m networking.ServerTLSSettings_TLSmode) *networking.ServerTLSSettings {
		return &networking.ServerTLSSettings{Mode: m}
	}
	tests := map[string]struct {
		protocol string
		tls      *networking.ServerTLSSettings
		want     serverKind
		why      string
	}{
		"HTTP is plain HTTP":                         {protocol: "HTTP", want: serverHTTP},
		"GRPC-WEB is plain HTTP":                     {protocol: "grpc-web", want: serverHTTP},
		"HTTPS terminated is HTTPS":                  {protocol: "HTTPS", tls: tls(networking.ServerTLSSettings_SIMPLE), want: serverHTTPS},
		"TLS terminated routes by tcp routes":        {protocol: "TLS", tls: tls(networking.ServerTLSSettings_ISTIO_MUTUAL), want: serverTLSTCP},
		"TLS in PASSTHROUGH routes by SNI":           {protocol: "TLS", tls: tls(networking.ServerTLSSettings_PASSTHROUGH), want: serverPassthrough},
		"HTTPS in AUTO_PASSTHROUGH is automatic SNI": {protocol: "HTTPS", tls: tls(networking.ServerTLSSettings_AUTO_PASSTHROUGH), want: serverAutoPassthrough},
		"TCP without tls is opaque TCP":              {protocol: "TCP", want: serverTCP},
		"MONGO is opaque TCP":                        {protocol: "MONGO", want: serverTCP},
		"TCP with tls is a TLS server":               {protocol: "TCP", tls: tls(networking.ServerTLSSettings_MUTUAL), want: serverTLSTCP},
		"OPTIONAL_MUTUAL is not served": {
			protocol: "HTTPS", tls: tls(networking.ServerTLSSettings_OPTIONAL_MUTUAL), want: serverUnsupported, why: "tls.mode=OPTIONAL_MUTUAL",
		},
		"an unknown protocol is not served":   {protocol: "QUIC", want: serverUnsupported, why: "port.protocol=QUIC"},
		"TLS without tls settings is invalid": {protocol: "TLS", want: serverUnsupported},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := &networking.Server{Port: &networking.Port{Number: 1, Protocol: tc.protocol}, Tls: tc.tls}
			got, why := classifyServer(s)
			if got != tc.want || why != tc.why {
				t.Errorf("classifyServer = %v %q, want %v %q", got, why, tc.want, tc.why)
			}
		})
	}
}

func TestGatewayUnsupportedValues(t *testing.T) {
	gw := &networking.Gateway{Servers: []*networking.Server{
		{Port: &networking.Port{Number: 31400, Protocol: "TCP"}, Hosts: []string{"*"}},
		{Port: &networking.Port{Number: 15443, Protocol: "TLS"}, Hosts: []string{"*.local"}, Tls: &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_AUTO_PASSTHROUGH}},
		{Port: &networking.Port{Number: 443, Protocol: "HTTPS"}, Hosts: []string{"a"}, Tls: &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_OPTIONAL_MUTUAL}},
	}}
	if got := strings.Join(gatewayUnsupportedValues(gw), ","); got != "servers[2].tls.mode=OPTIONAL_MUTUAL" {
		t.Errorf("unsupported values %q, want only the OPTIONAL_MUTUAL server", got)
	}
	if got := strings.Join(UnsupportedFields(model.KindGateway, gw), ","); got != "servers[].tls.mode=OPTIONAL_MUTUAL" {
		t.Errorf("UnsupportedFields %q, want servers[].tls.mode=OPTIONAL_MUTUAL", got)
	}
}

func TestHostsOverlap(t *testing.T) {
	tests := map[string]struct {
		server []string
		vsNS   string
		vs     []string
		want   bool
	}{
		"* admits any host":                      {server: []string{"*"}, vsNS: "a", vs: []string{"db.example.com"}, want: true},
		"a VirtualService for * fits any server": {server: []string{"db.example.com"}, vsNS: "a", vs: []string{"*"}, want: true},
		"a wildcard admits its subdomains":       {server: []string{"*.example.com"}, vsNS: "a", vs: []string{"db.example.com"}, want: true},
		"another domain is not admitted":         {server: []string{"*.example.com"}, vsNS: "a", vs: []string{"db.example.org"}, want: false},
		"another namespace is not admitted":      {server: []string{"prod/*"}, vsNS: "dev", vs: []string{"db"}, want: false},
		"the named namespace is admitted":        {server: []string{"prod/*"}, vsNS: "prod", vs: []string{"db"}, want: true},
		"./ is the gateway's namespace":          {server: []string{"./*"}, vsNS: "gw", vs: []string{"db"}, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := gatewayServer{ns: "gw", hosts: tc.server}
			if got := hostsOverlap(srv, tc.vsNS, tc.vs); got != tc.want {
				t.Errorf("hostsOverlap = %v, want %v", got, tc.want)
			}
		})
	}
}

func routerProxy(t testing.TB, labels string) *model.Proxy {
	t.Helper()
	l := map[string]any{}
	for _, kv := range strings.Split(labels, ",") {
		k, v, _ := strings.Cut(kv, "=")
		l[k] = v
	}
	p, err := model.ParseProxy("router~10.1.0.100~gw-1.istio-system~istio-system.svc.cluster.local", map[string]any{"LABELS": l})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func classFromYAML(t *testing.T, p *model.Proxy, docs string) (*ClassConfig, *model.Store) {
	t.Helper()
	evs, err := worldtest.Decode([]byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	cc, err := newForTest(quietLog()).Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cc, store
}

func listener(t *testing.T, cc *ClassConfig, name string) *listenerv3.Listener {
	t.Helper()
	r := cc.Sets[ListenerType].Get(name)
	if r == nil {
		return nil
	}
	m, err := r.Any.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	return m.(*listenerv3.Listener)
}

func TestGatewayPortConflicts(t *testing.T) {
	const backend = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: 10.96.0.5
  ports:
  - {name: tcp, port: 9000}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: default}
spec:
  hosts: ["*"]
  gateways: [first, second]
  tcp:
  - route:
    - destination: {host: echo}
---
`
	gateway := func(name, protocol string) string {
		return "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: " + name + ", namespace: default}\n" +
			"spec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 8000, name: p, protocol: " + protocol + "}\n    hosts: [\"*\"]\n---\n"
	}
	tests := map[string]struct {
		first, second string
		wantChain     string // the name of the port's chain; "" for the HTTP connection manager's
	}{
		"a TCP server keeps its port from a later HTTP server":  {first: "TCP", second: "HTTP", wantChain: "tcp.8000.p.first.default"},
		"an HTTP server keeps its port from a later TCP server": {first: "HTTP", second: "TCP", wantChain: ""},
		"a second TCP server on a port is left out":             {first: "TCP", second: "TCP", wantChain: "tcp.8000.p.first.default"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cc, _ := classFromYAML(t, routerProxy(t, "istio=ingressgateway"), backend+gateway("first", tc.first)+gateway("second", tc.second))
			l := listener(t, cc, "0.0.0.0_8000")
			if l == nil || len(l.FilterChains) != 1 {
				t.Fatalf("listener 0.0.0.0_8000 = %v, want one chain", l)
			}
			fc := l.FilterChains[0]
			if fc.Name != tc.wantChain {
				t.Errorf("chain %q, want %q", fc.Name, tc.wantChain)
			}
			if got := fc.Filters[0].Name; (tc.wantChain == "") != (got == "envoy.filters.network.http_connection_manager") {
				t.Errorf("filter %s for chain %q", got, tc.wantChain)
			}
		})
	}
}
