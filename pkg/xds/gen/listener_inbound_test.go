package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshplane/discovery/pkg/model"
)

func TestIngressCluster(t *testing.T) {
	ips := []string{"fd00::5", "10.1.0.5"}
	tests := map[string]struct {
		endpoint string
		ips      []string
		want     string // ADDRESS:PORT of the STATIC endpoint, "origdst" or "" (no cluster)
		problem  bool
	}{
		"no endpoint goes to the original destination":     {endpoint: "", want: "origdst"},
		"127.0.0.1 keeps the loopback and the given port":  {endpoint: "127.0.0.1:8080", want: "127.0.0.1:8080"},
		"[::1] is the IPv6 loopback":                       {endpoint: "[::1]:8080", want: "::1:8080"},
		"0.0.0.0 is the proxy's IPv4 address":              {endpoint: "0.0.0.0:8080", ips: ips, want: "10.1.0.5:8080"},
		"0.0.0.0 without an IPv4 address is the loopback":  {endpoint: "0.0.0.0:8080", ips: []string{"fd00::5"}, want: "127.0.0.1:8080"},
		"[::] is the proxy's IPv6 address":                 {endpoint: "[::]:8080", ips: ips, want: "fd00::5:8080"},
		"[::] without an IPv6 address is the loopback":     {endpoint: "[::]:8080", ips: []string{"10.1.0.5"}, want: "::1:8080"},
		"a unix socket is not supported":                   {endpoint: "unix:///var/run/app.sock", want: "", problem: true},
		"another IP goes to the original destination":      {endpoint: "10.0.0.1:8080", want: "origdst", problem: true},
		"an endpoint without a port is refused":            {endpoint: "127.0.0.1", want: "", problem: true},
		"port 0 is refused":                                {endpoint: "127.0.0.1:0", want: "", problem: true},
		"a port out of range is refused":                   {endpoint: "127.0.0.1:70000", want: "", problem: true},
		"a name is not an IP and goes to the original dst": {endpoint: "localhost:8080", want: "origdst", problem: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, problem := ingressCluster(9080, tc.endpoint, tc.ips)
			if (problem != "") != tc.problem {
				t.Errorf("problem %q, want one: %v", problem, tc.problem)
			}
			got := ""
			switch {
			case c == nil:
			case c.GetType() == clusterv3.Cluster_ORIGINAL_DST:
				got = "origdst"
			default:
				sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
				got = sa.GetAddress() + ":" + itoa(int32(sa.GetPortValue()))
			}
			if got != tc.want {
				t.Errorf("cluster goes to %q, want %q", got, tc.want)
			}
			if c != nil {
				if c.Name != "inbound|9080||" {
					t.Errorf("cluster %q, want inbound|9080|| (named after the listener's port)", c.Name)
				}
				if _, err := NewResource(c.Name, ClusterType, c); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

const ingressSidecar = `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: app, namespace: default, resourceVersion: "1"}
spec:
  workloadSelector: {labels: {app: app}}
  ingress:
  - port: {number: 9443, protocol: HTTPS, name: https}
    defaultEndpoint: 127.0.0.1:8443
    tls: {mode: SIMPLE, serverCertificate: /etc/certs/tls.crt, privateKey: /etc/certs/tls.key}
  - port: {number: 9444, protocol: TLS, name: tls}
    defaultEndpoint: 127.0.0.1:8444
    tls: {mode: ISTIO_MUTUAL}
  - port: {number: 9080, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:8080
    captureMode: NONE
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: default}
spec:
  clusterIP: 10.96.0.40
  selector: {app: app}
  ports: [{name: http, port: 7070, targetPort: 7070}]
`

// chainsByName lists virtualInbound's filter chains by name.
func chainsByName(t *testing.T, pc *ProxyConfig) map[string]*listenerv3.FilterChain {
	t.Helper()
	l := &listenerv3.Listener{}
	if err := pc.Get(ListenerType, VirtualInbound).Any.UnmarshalTo(l); err != nil {
		t.Fatal(err)
	}
	out := map[string]*listenerv3.FilterChain{}
	for _, fc := range l.FilterChains {
		out[fc.Name] = fc
	}
	return out
}

func TestSidecarIngressTLSYieldsToMeshMTLS(t *testing.T) {
	strict := `---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: default}
spec: {mtls: {mode: STRICT}}
`
	for name, tc := range map[string]struct {
		extra      string
		terminated bool
	}{
		"PERMISSIVE (the default): the Sidecar's TLS is not used": {},
		"STRICT: mesh mTLS on the port":                           {extra: strict},
		"DISABLE: the Sidecar's certificate terminates TLS":       {extra: strings.ReplaceAll(strict, "STRICT", "DISABLE"), terminated: true},
	} {
		t.Run(name, func(t *testing.T) {
			w := loadWorld(t, ingressSidecar+tc.extra).World()
			var logs bytes.Buffer
			g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
			p := labelled(t, "sidecar", "default", map[string]string{"app": "app"})
			cc, err := g.Class(w, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			pc := g.Proxy(w, p, cc)
			ports := map[int32]model.Protocol{}
			for _, ip := range pc.InboundPorts {
				ports[ip.Port] = ip.Protocol
			}
			if len(ports) != 3 || ports[7070] != "" {
				t.Errorf("inbound ports %v, want the Sidecar's 9080, 9443, 9444 only", ports)
			}
			chains := chainsByName(t, pc)
			fc := chains["inbound|9443||"]
			if fc == nil {
				t.Fatalf("no chain for 9443: %v", chains)
			}
			ctx := &tlsv3.DownstreamTlsContext{}
			if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil && tc.terminated {
				t.Fatal(err)
			}
			files := len(ctx.GetCommonTlsContext().GetTlsCertificates()) == 1
			if files != tc.terminated {
				t.Errorf("9443 terminated with the Sidecar's certificate: %v, want %v", files, tc.terminated)
			}
			if tc.terminated && (fc.GetFilterChainMatch().GetTransportProtocol() != "tls" || !strings.Contains(fc.String(), "http_connection_manager")) {
				t.Errorf("a terminated HTTPS port is matched on TLS and served as HTTP: %v", fc)
			}
			if !tc.terminated && !strings.Contains(logs.String(), "applies only where PeerAuthentication mode is DISABLE") {
				t.Errorf("the ignored TLS is not reported:\n%s", logs.String())
			}
			if !strings.Contains(logs.String(), "ingress[1].tls.mode") || !strings.Contains(logs.String(), "ingress[2].captureMode") {
				t.Errorf("ISTIO_MUTUAL and captureMode NONE are not reported:\n%s", logs.String())
			}
			if chains["inbound|9080||"] == nil && chains["inbound|9080||-mtls"] == nil {
				t.Errorf("a captureMode NONE port is served as DEFAULT: no chain for 9080 in %v", chains)
			}
		})
	}
}

func TestProxylessGRPCIgnoresSidecarIngress(t *testing.T) {
	w := loadWorld(t, ingressSidecar).World()
	g := newForTest(quietLog())
	p, err := model.ParseProxy("sidecar~10.1.0.40~app-1.default~default.svc.cluster.local", map[string]any{
		model.MetaGenerator: model.GeneratorGRPC, model.MetaLabels: map[string]any{"app": "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	if len(pc.InboundPorts) != 1 || pc.InboundPorts[0].Port != 7070 {
		t.Errorf("a gRPC server listens where its services say: %v", pc.InboundPorts)
	}
	if pc.Get(ListenerType, GRPCServerListenerName("10.1.0.40", 7070)) == nil {
		t.Errorf("no server listener for 7070: %v", pc.Names(ListenerType))
	}
}
