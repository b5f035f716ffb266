package gen

import (
	"bytes"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/meshplane/discovery/pkg/model"
)

// noProtocolWorld has a ServiceEntry port and a Sidecar ingress port
// without protocol; Istio parses both with protocol.Parse, which makes
// them "UnsupportedProtocol": sniffed.
const noProtocolWorld = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: default, resourceVersion: "1"}
spec:
  hosts: [api.example.com]
  addresses: [240.0.0.5]
  resolution: DNS
  ports:
  - {number: 8080, name: http}
  - {number: 8443, name: https, protocol: HTTPS}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: app, namespace: default, resourceVersion: "1"}
spec:
  workloadSelector: {labels: {app: app}}
  ingress:
  - port: {number: 9090, name: http}
    defaultEndpoint: 127.0.0.1:8080
`

func TestServiceEntryPortWithoutProtocol(t *testing.T) {
	w := loadWorld(t, noProtocolWorld).World()
	svc := w.ServiceByHost("api.example.com")
	if svc == nil {
		t.Fatal("the ServiceEntry is not a service")
	}
	if p, _ := svc.PortByNumber(8080); p.Protocol != model.ProtocolUnknown {
		t.Errorf("port 8080 is %q, want %q (Istio's protocol.Parse of \"\"; the name is not read)", p.Protocol, model.ProtocolUnknown)
	}
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	sidecarP := labelled(t, "sidecar", "default", nil)
	cc, err := g.Class(w, sidecarP, nil)
	if err != nil {
		t.Fatal(err)
	}
	const name = "outbound|8080||api.example.com"
	if !usesDownstreamProtocol(t, cc, name) {
		t.Errorf("a sidecar's cluster of a sniffed port should use the downstream protocol, as Istio's does")
	}
	if usesDownstreamProtocol(t, cc, "outbound|8443||api.example.com") {
		t.Errorf("an HTTPS port's cluster uses the downstream protocol")
	}
	l := &listenerv3.Listener{}
	if err := cc.Sets[ListenerType].Get("0.0.0.0_8080").Any.UnmarshalTo(l); err != nil {
		t.Fatal(err)
	}
	// Sniffed (TestSniffedOutboundListeners): a TCP and an HTTP chain.
	if len(l.FilterChains) != 2 || !strings.Contains(l.FilterChains[0].String(), "tcp_proxy") ||
		!strings.Contains(l.FilterChains[1].String(), "http_connection_manager") {
		t.Errorf("the port without protocol is not sniffed: %v", l.FilterChains)
	}
	if strings.Contains(logs.String(), "ServiceEntry port without protocol") {
		t.Errorf("the sniffed port is reported as not sniffed:\n%s", logs.String())
	}
	gw, err := newForTest(quietLog()).Class(w, labelled(t, "router", "default", map[string]string{"istio": "ingressgateway"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if usesDownstreamProtocol(t, gw, name) {
		t.Errorf("a gateway's cluster uses the downstream protocol; Istio's sidecars only do")
	}
}

func usesDownstreamProtocol(t *testing.T, cc *ClassConfig, name string) bool {
	t.Helper()
	r := cc.Sets[ClusterType].Get(name)
	if r == nil {
		t.Fatalf("no cluster %s: %v", name, cc.Sets[ClusterType].Names)
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

func TestSidecarIngressPortWithoutProtocol(t *testing.T) {
	w := loadWorld(t, noProtocolWorld).World()
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	p := labelled(t, "sidecar", "default", map[string]string{"app": "app"})
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	if len(pc.InboundPorts) != 1 || pc.InboundPorts[0] != (InboundPort{Port: 9090, Protocol: model.ProtocolUnknown}) {
		t.Errorf("inbound ports %v, want 9090 sniffed (Istio's protocol.Parse of \"\"; the name is not read)", pc.InboundPorts)
	}
	// Sniffed (TestSniffedInboundChains): PERMISSIVE, five chains.
	chains := chainsByName(t, pc)
	for _, n := range []string{"inbound|9090||-mtls-http", "inbound|9090||-http", "inbound|9090||-mtls", "inbound|9090||", "inbound|9090||-tls"} {
		if chains[n] == nil {
			t.Errorf("no chain %s: %v", n, slices.Collect(maps.Keys(chains)))
		}
	}
	if strings.Contains(logs.String(), "without protocol") {
		t.Errorf("the sniffed port is reported:\n%s", logs.String())
	}
}

// TestSidecarIngressTLSPortWithoutProtocol: a port that terminates its
// own TLS is served as TCP after termination, and reported.
func TestSidecarIngressTLSPortWithoutProtocol(t *testing.T) {
	w := loadWorld(t, strings.Replace(noProtocolWorld, "defaultEndpoint: 127.0.0.1:8080", `defaultEndpoint: 127.0.0.1:8080
    tls: {mode: SIMPLE, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem}`, 1)+`---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: default}
spec: {mtls: {mode: DISABLE}}
`).World()
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	p := labelled(t, "sidecar", "default", map[string]string{"app": "app"})
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	fc := chainsByName(t, g.Proxy(w, p, cc))["inbound|9090||"]
	if fc == nil || fc.GetTransportSocket() == nil || !strings.Contains(fc.String(), "tcp_proxy") {
		t.Errorf("the port is not served as TCP behind its TLS: %v", fc)
	}
	if !strings.Contains(logs.String(), "without protocol that terminates TLS") || !strings.Contains(logs.String(), "ingress[0]") {
		t.Errorf("the port without protocol behind TLS is not reported:\n%s", logs.String())
	}
}
