package gen

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

const policyServices = `apiVersion: v1
kind: Service
metadata: {name: a, namespace: default}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: other}
spec:
  clusterIP: 10.96.0.2
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: other}
spec:
  hosts: [api.example.com]
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
`

func sidecarYAML(ns, hosts, mode string) string {
	s := "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: " + ns + "}\nspec:\n  egress:\n  - hosts: [" + hosts + "]\n"
	if mode != "" {
		s += "  outboundTrafficPolicy: {mode: " + mode + "}\n"
	}
	return s
}

func TestSidecarEgressAndOutboundPolicy(t *testing.T) {
	tests := map[string]struct {
		sidecar  string
		visible  string // hosts, comma-separated
		fallback string // the cluster of virtualOutbound's fallthrough chain
	}{
		"without a Sidecar every service is visible and unknown traffic passes through": {
			visible:  "a.default.svc.cluster.local,api.example.com,b.other.svc.cluster.local",
			fallback: PassthroughCluster,
		},
		"./* limits the namespace to its own services": {
			sidecar: sidecarYAML("default", `"./*"`, ""), visible: "a.default.svc.cluster.local", fallback: PassthroughCluster,
		},
		"a namespace and a host name pick one entry; REGISTRY_ONLY blocks the rest": {
			sidecar: sidecarYAML("default", `"./*", "other/api.example.com"`, "REGISTRY_ONLY"),
			visible: "a.default.svc.cluster.local,api.example.com", fallback: BlackHoleCluster,
		},
		"*/ with a suffix wildcard matches in every namespace; ALLOW_ANY passes through": {
			sidecar: sidecarYAML("default", `"*/*.example.com"`, "ALLOW_ANY"), visible: "api.example.com", fallback: PassthroughCluster,
		},
		"~/* sees nothing": {
			sidecar: sidecarYAML("default", `"~/*"`, "REGISTRY_ONLY"), fallback: BlackHoleCluster,
		},
		"~ excludes within its listener whatever it imports: ~NAMESPACE/HOST a host there, ~/HOST a host anywhere": {
			sidecar: sidecarYAML("default", `"*/*", "~other/b.other.svc.cluster.local", "~/a.default.svc.cluster.local"`, ""), visible: "api.example.com", fallback: PassthroughCluster,
		},
		"the root namespace's Sidecar applies to namespaces without their own": {
			sidecar: sidecarYAML("istio-system", `"other/*"`, "REGISTRY_ONLY"),
			visible: "api.example.com,b.other.svc.cluster.local", fallback: BlackHoleCluster,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			events, err := worldtest.Decode([]byte(policyServices + tc.sidecar))
			if err != nil {
				t.Fatal(err)
			}
			store := model.NewStore(model.StoreOptions{})
			if _, err := store.Apply(events...); err != nil {
				t.Fatal(err)
			}
			p, err := model.ParseProxy("sidecar~10.1.0.1~app-1.default~default.svc.cluster.local", map[string]any{"NAMESPACE": "default"})
			if err != nil {
				t.Fatal(err)
			}
			cc, err := newForTest(quietLog()).Class(store.World(), p, nil)
			if err != nil {
				t.Fatal(err)
			}
			var hosts []string
			for _, s := range cc.Scope().Services {
				hosts = append(hosts, s.Hostname)
			}
			if got := strings.Join(hosts, ","); got != tc.visible {
				t.Errorf("visible %q, want %q", got, tc.visible)
			}
			l := &listenerv3.Listener{}
			if err := cc.Sets[ListenerType].Get(VirtualOutbound).Any.UnmarshalTo(l); err != nil {
				t.Fatal(err)
			}
			tp := &tcpv3.TcpProxy{}
			if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatal(err)
			}
			if tp.GetCluster() != tc.fallback {
				t.Errorf("virtualOutbound falls through to %s, want %s", tp.GetCluster(), tc.fallback)
			}
		})
	}
}

func TestUnsupportedSidecarAndEntryFieldsAreCounted(t *testing.T) {
	w, p := loadCase(t, "testdata/egress")
	g := newForTest(quietLog())
	if _, err := g.Class(w, p, nil); err != nil {
		t.Fatal(err)
	}
	for k := range g.UnsupportedCounts() {
		if strings.HasPrefix(k, "Sidecar ") {
			t.Errorf("supported field reported: %s", k)
		}
	}
}

func TestUnsupportedSidecarIngressValuesAreCounted(t *testing.T) {
	store, err := worldtest.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: default, resourceVersion: "3"}
spec:
  inboundConnectionPool: {tcp: {maxConnections: 10}}
  ingress:
  - port: {number: 9080, protocol: HTTP, name: http}
    defaultEndpoint: unix:///var/run/app.sock
    captureMode: NONE
  - port: {number: 9443, protocol: HTTPS, name: https}
    defaultEndpoint: 127.0.0.1:8443
    captureMode: IPTABLES
    tls: {mode: ISTIO_MUTUAL, credentialName: cert}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := model.NewStore(model.StoreOptions{DomainSuffix: "cluster.local"})
	if _, err := s.Apply(store...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "default")
	cc, err := g.Class(s.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.Proxy(s.World(), p, cc)
	counts := g.UnsupportedCounts()
	for _, f := range []string{"inboundConnectionPool", "ingress.defaultEndpoint", "ingress.captureMode", "ingress.tls.mode", "ingress.tls.credentialName"} {
		if counts["Sidecar "+f] != 1 {
			t.Errorf("Sidecar %s counted %v times, want 1 (all: %v)", f, counts["Sidecar "+f], counts)
		}
	}
	spec := s.World().Config(model.KindSidecar, "default", "default").Object.(*networkingv1.Sidecar)
	got := strings.Join(UnsupportedFields(model.KindSidecar, &spec.Spec), ",")
	want := "inboundConnectionPool,ingress[].tls.credentialName,ingress[].captureMode,ingress[].defaultEndpoint,ingress[].tls.mode"
	if got != want {
		t.Errorf("webhook warnings %q, want %q", got, want)
	}
}

func TestUnsupportedGatewayTLSIsCounted(t *testing.T) {
	w, p := loadCase(t, "testdata/gatewaytls")
	g := newForTest(quietLog())
	if _, err := g.Class(w, p, nil); err != nil {
		t.Fatal(err)
	}
	counts := g.UnsupportedCounts()
	if counts["Gateway servers.tls.credentialName"] != 1 {
		t.Errorf("credentialName counted %v times, want 1 (all: %v)", counts["Gateway servers.tls.credentialName"], counts)
	}
	for k := range counts {
		if strings.Contains(k, "httpsRedirect") || strings.Contains(k, "serverCertificate") {
			t.Errorf("supported field reported: %s", k)
		}
	}
}
