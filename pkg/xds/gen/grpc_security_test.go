package gen

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// upstreamSANs returns the exact SANs a gRPC cluster's TLS matches, and
// whether the cluster has TLS at all.
func upstreamSANs(t *testing.T, c *clusterv3.Cluster) ([]string, bool) {
	t.Helper()
	if c.TransportSocket == nil {
		return nil, false
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := c.TransportSocket.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	common := ctx.GetCommonTlsContext()
	if got := common.GetTlsCertificateProviderInstance(); got.GetInstanceName() != GRPCCertProvider || got.GetCertificateName() != SDSDefault {
		t.Errorf("identity certificate from %v, want instance %q certificate %q", got, GRPCCertProvider, SDSDefault)
	}
	vc := common.GetCombinedValidationContext().GetDefaultValidationContext()
	if got := vc.GetCaCertificateProviderInstance(); got.GetInstanceName() != GRPCCertProvider || got.GetCertificateName() != SDSRootCA {
		t.Errorf("roots from %v, want instance %q certificate %q", got, GRPCCertProvider, SDSRootCA)
	}
	var sans []string
	for _, m := range vc.GetMatchSubjectAltNames() {
		sans = append(sans, m.GetExact())
	}
	return sans, true
}

func TestGRPCClusterTLS(t *testing.T) {
	w, p := loadCase(t, "testdata/grpc-mtls")
	sc := scopeOf(w, p)
	echo := w.Service("ns1", "echo")
	eps := w.Endpoints("ns1", "echo")
	tests := map[string]struct {
		tls      *networking.ClientTLSSettings
		wantTLS  bool
		wantSANs []string
		warns    bool
	}{
		"ISTIO_MUTUAL verifies the server against the service accounts of the service's endpoints, sorted": {
			tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}, wantTLS: true,
			wantSANs: []string{"spiffe://cluster.local/ns/ns1/sa/echo", "spiffe://cluster.local/ns/ns1/sa/echo-legacy"},
		},
		"the DestinationRule's subjectAltNames replace the service accounts": {
			tls:     &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL, SubjectAltNames: []string{"spiffe://td/ns/a/sa/b"}},
			wantTLS: true, wantSANs: []string{"spiffe://td/ns/a/sa/b"},
		},
		"DISABLE is plaintext": {tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE}},
		"no tls is plaintext":  {},
		"SIMPLE is plaintext and reported": {
			tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CaCertificates: "/ca.pem"}, warns: true,
		},
		"MUTUAL is plaintext and reported": {
			tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL, ClientCertificate: "/c.pem", PrivateKey: "/k.pem"}, warns: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
			c := &clusterv3.Cluster{Name: "outbound|7070||echo.ns1.svc.cluster.local"}
			g.grpcClusterTLS(sc, echo, eps, c, &networking.TrafficPolicy{Tls: tc.tls})
			sans, hasTLS := upstreamSANs(t, c)
			if hasTLS != tc.wantTLS || !slices.Equal(sans, tc.wantSANs) {
				t.Errorf("TLS %v with SANs %q, want TLS %v with %q", hasTLS, sans, tc.wantTLS, tc.wantSANs)
			}
			warned := strings.Contains(logs.String(), "not supported for proxyless gRPC")
			if warned != tc.warns {
				t.Errorf("warned %v, want %v; log:\n%s", warned, tc.warns, logs.String())
			}
			if n := g.UnsupportedCounts()["DestinationRule grpc:trafficPolicy.tls.mode"]; (n == 1) != tc.warns {
				t.Errorf("counted %v warnings, want one: %v", n, tc.warns)
			}
		})
	}
}

func TestGRPCClusterTLSWithoutAccounts(t *testing.T) {
	w, p := loadCase(t, "testdata/grpc-mtls")
	c := &clusterv3.Cluster{Name: "outbound|50051||pinned.ns1.svc.cluster.local"}
	// pinned has no endpoints: with no identities known, any certificate
	// from the mesh roots is accepted (no SAN matcher), as in Istio.
	newForTest(quietLog()).grpcClusterTLS(scopeOf(w, p), w.Service("ns1", "pinned"), nil, c,
		&networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}})
	if sans, ok := upstreamSANs(t, c); !ok || len(sans) != 0 {
		t.Errorf("TLS %v with SANs %q, want TLS without SAN matching", ok, sans)
	}
}

func TestGRPCServerMode(t *testing.T) {
	tests := map[string]struct {
		mode   MTLSMode
		ports  map[uint32]MTLSMode
		labels map[string]string
		want   MTLSMode
	}{
		"STRICT requires mTLS":       {mode: MTLSStrict, want: MTLSStrict},
		"DISABLE is plaintext":       {mode: MTLSDisable, want: MTLSDisable},
		"PERMISSIVE is plaintext":    {mode: MTLSPermissive, want: MTLSDisable},
		"a port-level mode wins":     {mode: MTLSStrict, ports: map[uint32]MTLSMode{17070: MTLSDisable}, want: MTLSDisable},
		"another port's mode is not": {mode: MTLSStrict, ports: map[uint32]MTLSMode{9: MTLSDisable}, want: MTLSStrict},
		"PERMISSIVE on a workload whose clients use auto mTLS is STRICT": {
			mode: MTLSPermissive, labels: map[string]string{TLSModeLabel: "istio"}, want: MTLSStrict,
		},
		"DISABLE stays DISABLE with the tlsMode label": {mode: MTLSDisable, labels: map[string]string{TLSModeLabel: "istio"}, want: MTLSDisable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &model.Proxy{Metadata: model.ProxyMetadata{Labels: tc.labels}}
			if got := grpcServerMode(p, inboundMTLS{mode: tc.mode, ports: tc.ports}, 17070); got != tc.want {
				t.Errorf("mode %v, want %v", got, tc.want)
			}
		})
	}
}

// The server listener of a STRICT port requires client certificates from
// the provider instances, without SAN matchers (grpc-go NACKs them on
// servers); a PERMISSIVE port is plaintext and its policy is reported.
func TestGRPCServerMTLS(t *testing.T) {
	w, p := loadCase(t, "testdata/grpc-server-mtls")
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	chain := func(port int32) *listenerv3.FilterChain {
		t.Helper()
		r := pc.Get(ListenerType, GRPCServerListenerName("0.0.0.0", port))
		if r == nil {
			t.Fatalf("no server listener for port %d", port)
		}
		l := &listenerv3.Listener{}
		if err := r.Any.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		if len(l.FilterChains) != 1 {
			t.Fatalf("port %d: %d filter chains, want 1", port, len(l.FilterChains))
		}
		return l.FilterChains[0]
	}
	strict := chain(17070).GetTransportSocket()
	ctx := &tlsv3.DownstreamTlsContext{}
	if strict == nil || strict.GetName() != "envoy.transport_sockets.tls" || strict.GetTypedConfig().UnmarshalTo(ctx) != nil {
		t.Fatalf("STRICT port: transport socket %v, want a DownstreamTlsContext", strict)
	}
	if !ctx.GetRequireClientCertificate().GetValue() {
		t.Error("STRICT port does not require client certificates")
	}
	vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
	if vc.GetCaCertificateProviderInstance().GetCertificateName() != SDSRootCA || len(vc.GetMatchSubjectAltNames()) != 0 {
		t.Errorf("STRICT port validation %v, want roots %q and no SAN matchers", vc, SDSRootCA)
	}
	if ts := chain(18080).GetTransportSocket(); ts != nil {
		t.Errorf("PERMISSIVE port has transport socket %v, want plaintext", ts)
	}
	out := logs.String()
	if !strings.Contains(out, "PERMISSIVE is served as plaintext") || !strings.Contains(out, "ns1/echo-admin") || strings.Contains(out, "resource=ns1/default ") {
		t.Errorf("want the PERMISSIVE warning on ns1/echo-admin only; log:\n%s", out)
	}
	if n := g.UnsupportedCounts()["PeerAuthentication grpc:mtls.mode"]; n != 1 {
		t.Errorf("counted %v PERMISSIVE warnings, want 1", n)
	}
}

func TestIdentitiesChanged(t *testing.T) {
	store, err := worldtest.LoadFile("testdata/grpc-mtls/input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, p := loadCase(t, "testdata/grpc-mtls")
	envoy := &model.Proxy{Type: model.ProxySidecar, Namespace: "ns1"}
	g := newForTest(quietLog())
	grpcCls, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	envoyCls, err := g.Class(store.World(), envoy, nil)
	if err != nil {
		t.Fatal(err)
	}
	echo := []model.NamespacedName{{Namespace: "ns1", Name: "echo"}}
	apply := func(yaml string) *model.World { return applyYAML(t, store, yaml) }
	// The same pods behind a new slice: same accounts.
	same := apply(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: ns1, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: 17070}]
endpoints:
- addresses: [10.1.2.2]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-legacy, namespace: ns1}
- addresses: [10.1.2.1]
  conditions: {ready: false, terminating: false}
  targetRef: {kind: Pod, name: echo-v1, namespace: ns1}
`)
	if IdentitiesChanged(grpcCls, same, echo) {
		t.Error("endpoints with the same service accounts reported as an identity change")
	}
	gone := apply(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: ns1, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: 17070}]
endpoints:
- addresses: [10.1.2.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-v1, namespace: ns1}
`)
	if !IdentitiesChanged(grpcCls, gone, echo) {
		t.Error("an endpoint update that drops a service account not reported for a gRPC class")
	}
	if !IdentitiesChanged(envoyCls, gone, echo) {
		t.Error("not reported for an Envoy class, whose mTLS clusters verify the service accounts too")
	}
	if IdentitiesChanged(grpcCls, gone, []model.NamespacedName{{Namespace: "ns1", Name: "pinned"}}) {
		t.Error("reported for a service whose endpoints did not change")
	}
}

// An endpoint backed by a pod without a service account still has an
// identity to verify (spiffe://TD/ns/NS/sa/, which no issued certificate
// carries), as istiod's SecureNamingSAN: without it a service of such pods
// would verify no SAN and accept any mesh identity. An address no pod
// backs has none.
func TestServiceAccountsOfPodWithoutAccount(t *testing.T) {
	eps := &model.ServiceEndpoints{Endpoints: []*model.Endpoint{
		{Address: "10.0.0.1", Pod: "a", ServiceAccount: "reviews"},
		{Address: "10.0.0.2", Pod: "b"},
		{Address: "10.0.0.3"},
		{Address: "10.0.0.4", Pod: "c", ServiceAccount: "reviews"},
	}}
	got := serviceAccounts(eps)
	if want := []string{"", "reviews"}; !slices.Equal(got, want) {
		t.Fatalf("serviceAccounts = %q, want %q", got, want)
	}
	ids := trustDomains{domain: "cluster.local"}.identities("default", got)
	if want := []string{"spiffe://cluster.local/ns/default/sa/", "spiffe://cluster.local/ns/default/sa/reviews"}; !slices.Equal(ids, want) {
		t.Fatalf("identities = %q, want %q", ids, want)
	}
	if got := serviceAccounts(&model.ServiceEndpoints{Endpoints: []*model.Endpoint{{Address: "10.0.0.3"}}}); len(got) != 0 {
		t.Fatalf("an address no pod backs has accounts %q", got)
	}
}
