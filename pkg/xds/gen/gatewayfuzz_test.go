package gen

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// l4Hosts are the hosts the L4 fuzzer routes to: two services of
// worldtest.Mesh(2, 1, 2), a headless TCP service and an external name.
var l4Hosts = []string{"svc-0.ns-0.svc.cluster.local", "svc-1", "db.ns-0.svc.cluster.local", "ext.example.com"}

// l4World is the fixed part of the L4 fuzzer's world: a headless TCP
// service with three endpoints next to the mesh services, and
// root-namespace AuthorizationPolicies of every action, so that every
// chain the fuzzer makes carries RBAC filters.
func l4World(t testing.TB) []model.Event {
	t.Helper()
	evs, err := worldtest.Decode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: ns-0}\n" +
		"spec:\n  clusterIP: None\n  ports:\n  - {name: tcp, port: 9042}\n  - {name: http, port: 8080}\n" + `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: istio-system}
spec:
  rules:
  - from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]
  - to: [{operation: {ports: ["9042"], paths: ["/x"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: istio-system}
spec: {action: DENY, rules: [{from: [{source: {ipBlocks: [198.51.100.0/24], requestPrincipals: ["*"]}}]}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: istio-system}
spec: {action: AUDIT, rules: [{}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, worldtest.SliceWithPorts("ns-0", "db", map[string]int32{"tcp": 9042, "http": 8080}, "10.1.9.1", "10.1.9.2", "10.1.9.3"))
	return append(worldtest.Mesh(2, 1, 2), evs...)
}

func (c *choices) server() *networking.Server {
	s := &networking.Server{
		Port:  &networking.Port{Number: uint32([]int{80, 443, 9042, 15443}[c.n(4)]), Name: c.pick("a", "b", ""), Protocol: c.pick("HTTP", "HTTPS", "TLS", "TCP", "MONGO", "GRPC")},
		Hosts: []string{c.pick("*", "*.local", "ns-0/*", "./*", "a.example.com", "*.example.com")},
	}
	if m := c.n(7); m > 0 {
		s.Tls = &networking.ServerTLSSettings{
			Mode:              networking.ServerTLSSettings_TLSmode(m - 1),
			ServerCertificate: "/c.pem", PrivateKey: "/k.pem", CaCertificates: c.pick("", "/ca.pem"),
		}
	}
	return s
}

func (c *choices) l4Routes() []*networking.RouteDestination {
	var out []*networking.RouteDestination
	for i := 1 + c.n(3); i > 0; i-- {
		d := &networking.RouteDestination{Destination: &networking.Destination{Host: l4Hosts[c.n(len(l4Hosts))], Subset: c.pick("", "v1")}, Weight: int32(c.n(101))}
		if c.n(2) == 1 {
			d.Destination.Port = &networking.PortSelector{Number: uint32([]int{80, 9042}[c.n(2)])}
		}
		out = append(out, d)
	}
	return out
}

// gatewayL4Configs turns fuzz input into Gateways and VirtualServices with
// tcp and tls routes bound to them or to the mesh.
func gatewayL4Configs(data []byte) []model.Event {
	c := &choices{b: data}
	var evs []model.Event
	for i := c.n(3); i >= 0; i-- {
		gw := &networkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: fmt.Sprintf("gw%d", i), ResourceVersion: "1"}}
		gw.Spec.Selector = map[string]string{"istio": "ingressgateway"}
		for j := 1 + c.n(4); j > 0; j-- {
			gw.Spec.Servers = append(gw.Spec.Servers, c.server())
		}
		evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindGateway, Namespace: "ns-0", Name: gw.Name}, Object: gw})
	}
	for i := c.n(4); i >= 0; i-- {
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: fmt.Sprintf("vs%d", i), ResourceVersion: "1"}}
		vs.Spec.Hosts = []string{c.pick("*", "*.example.com", "a.example.com", "db", "svc-0")}
		vs.Spec.Gateways = []string{c.pick("gw0", "gw1", "mesh", "ns-0/gw2")}
		for j := c.n(3); j > 0; j-- {
			vs.Spec.Tcp = append(vs.Spec.Tcp, &networking.TCPRoute{
				Match: []*networking.L4MatchAttributes{{Port: uint32([]int{0, 443, 9042}[c.n(3)]), DestinationSubnets: []string{c.pick("10.1.9.2/32", "10.0.0.0/8", "")}[:c.n(2)]}},
				Route: c.l4Routes(),
			})
		}
		for j := c.n(3); j > 0; j-- {
			vs.Spec.Tls = append(vs.Spec.Tls, &networking.TLSRoute{
				Match: []*networking.TLSMatchAttributes{{SniHosts: []string{c.pick("a.example.com", "b.example.com", "x.local")}, Port: uint32([]int{0, 443, 15443}[c.n(3)])}},
				Route: c.l4Routes(),
			})
		}
		evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: "ns-0", Name: vs.Name}, Object: vs})
	}
	if c.n(2) == 1 {
		dr := &networkingv1.DestinationRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: "dr", ResourceVersion: "1"}}
		dr.Spec.Host, dr.Spec.TrafficPolicy = l4Hosts[c.n(3)], c.policy()
		dr.Spec.Subsets = []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}}
		evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindDestinationRule, Namespace: "ns-0", Name: dr.Name}, Object: dr})
	}
	return evs
}

// FuzzGatewayL4 feeds random Gateways (every protocol and TLS mode) and
// VirtualServices with tcp and tls routes to a gateway and a sidecar: no
// panic, no resource left out as invalid, a consistent class, and no
// listener whose chains repeat a name or a match (Envoy refuses both).
func FuzzGatewayL4(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{3}, 200))
	// Two Gateways with an AUTO_PASSTHROUGH server each on 15443 for *.local.
	f.Add([]byte{1, 0, 3, 0, 2, 1, 4, 0, 0, 3, 1, 2, 1, 4, 0})
	// Two Gateways with an HTTPS server each on 443 for a.example.com.
	f.Add([]byte{1, 0, 1, 0, 1, 4, 2, 0, 0, 1, 1, 1, 4, 2, 0})
	// A TCP, a terminated TLS and a PASSTHROUGH server, tcp and tls routes.
	f.Add([]byte{0, 2, 2, 0, 3, 0, 0, 1, 2, 2, 2, 4, 2, 0, 1, 2, 2, 0, 1, 0, 0, 2, 0, 0, 1, 0, 2, 2, 0, 0, 0, 1, 0, 0})
	f.Add([]byte("\x02\x03\x01\x03\x00\x04\x01\x02\x03\x01\x02\x05\x01\x01\x01\x00\x02\x03\x01\x01\x02\x01\x04\x02\x01\x01\x01\x03\x02\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		store := model.NewStore(model.StoreOptions{})
		if _, err := store.Apply(append(l4World(t), gatewayL4Configs(data)...)...); err != nil {
			t.Skip(err)
		}
		for _, p := range []*model.Proxy{routerProxy(t, "istio=ingressgateway"), sidecar(t, "ns-0")} {
			var logs bytes.Buffer
			g := newForTest(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})))
			cc, err := g.Class(store.World(), p, nil)
			if err != nil {
				t.Fatalf("%s: %v", p.Class(), err)
			}
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("%s: %s", p.Class(), logs.String())
			}
			for _, name := range cc.Sets[ListenerType].Names {
				l := listener(t, cc, name)
				assertDistinctChains(t, l)
				if p.Type == model.ProxyRouter {
					assertGatewayRBAC(t, l)
				}
			}
		}
	})
}

// assertGatewayRBAC: every chain of a gateway listener carries the
// root-namespace policies of l4World (AUDIT, DENY, ALLOW), except
// AUTO_PASSTHROUGH chains (named by Istio's cluster SNI), which Istio
// leaves to the destination's sidecar.
func assertGatewayRBAC(t *testing.T, l *listenerv3.Listener) {
	t.Helper()
	for _, c := range listenerChains(t, l) {
		want := 3
		if strings.HasPrefix(c.name, "outbound_.") {
			want = 0
		}
		if len(c.rules) != want {
			t.Errorf("listener %s chain %s: %d RBAC filters, want %d", l.Name, c.name, len(c.rules), want)
		}
	}
}

func assertDistinctChains(t *testing.T, l *listenerv3.Listener) {
	t.Helper()
	names := map[string]bool{}
	var matches []*listenerv3.FilterChainMatch
	for _, fc := range l.FilterChains {
		if fc.Name != "" && names[fc.Name] {
			t.Errorf("listener %s: two chains named %s", l.Name, fc.Name)
		}
		names[fc.Name] = true
		for _, m := range matches {
			if proto.Equal(m, fc.GetFilterChainMatch()) {
				t.Errorf("listener %s: two chains match %v", l.Name, m)
			}
		}
		matches = append(matches, fc.GetFilterChainMatch())
	}
}
