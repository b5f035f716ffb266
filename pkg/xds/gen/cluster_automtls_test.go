package gen

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

// socketFor picks a cluster's transport socket for an endpoint as Envoy
// does: the first match whose every field equals the endpoint's
// envoy.transport_socket_match metadata, else the cluster's own socket.
func socketFor(c *clusterv3.Cluster, md *corev3.Metadata) *corev3.TransportSocket {
	have := md.GetFilterMetadata()[TransportSocketMatchKey].GetFields()
	for _, m := range c.GetTransportSocketMatches() {
		ok := true
		for k, v := range m.GetMatch().GetFields() {
			if have[k].GetStringValue() != v.GetStringValue() || have[k] == nil {
				ok = false
			}
		}
		if ok {
			return m.GetTransportSocket()
		}
	}
	return c.GetTransportSocket()
}

func TestAutoMTLS(t *testing.T) {
	name := ClusterName(9080, "", "reviews.default.svc.cluster.local")
	meshEP := &model.Endpoint{Address: "10.1.0.21", Labels: map[string]string{TLSModeLabel: "istio", "app": "reviews"}}
	plainEP := &model.Endpoint{Address: "10.1.0.22", Labels: map[string]string{"app": "reviews"}}
	if tlsModeMetadata(plainEP) != nil {
		t.Errorf("an endpoint without %s has metadata", TLSModeLabel)
	}
	tests := map[string]struct {
		drTLS               *networking.ClientTLSSettings
		wantMesh, wantPlain string // the SNI of the socket picked, "" for plaintext
	}{
		"without DestinationRule TLS mesh endpoints get ISTIO_MUTUAL, others plaintext": {
			wantMesh: IstioSNI(name), wantPlain: "",
		},
		"DestinationRule TLS wins for every endpoint": {
			drTLS:    &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, Sni: "reviews.example"},
			wantMesh: "reviews.example", wantPlain: "reviews.example",
		},
	}
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			c := edsCluster(name, model.ProtocolHTTP, true)
			if tc.drTLS != nil {
				c.TransportSocket = upstreamTLS(tc.drTLS, c, nil)
			}
			autoMTLSWith(c, nil)
			if _, err := NewResource(c.Name, ClusterType, c); err != nil {
				t.Fatalf("cluster does not validate: %v", err)
			}
			for _, x := range []struct {
				ep   *model.Endpoint
				want string
			}{{meshEP, tc.wantMesh}, {plainEP, tc.wantPlain}} {
				got := ""
				if s := socketFor(c, tlsModeMetadata(x.ep)); s != nil {
					m, err := s.GetTypedConfig().UnmarshalNew()
					if err != nil {
						t.Fatal(err)
					}
					if u, ok := m.(*tlsv3.UpstreamTlsContext); ok {
						got = u.GetSni()
					}
				}
				if got != x.want {
					t.Errorf("endpoint %s: SNI %q, want %q", x.ep.Address, got, x.want)
				}
			}
		})
	}
}

func TestUpstreamTLSAsIstiod(t *testing.T) {
	name := ClusterName(9080, "", "reviews.default.svc.cluster.local")
	tests := map[string]struct {
		tls   *networking.ClientTLSSettings
		proto model.Protocol
		alpn  []string
		ca    string // SDS secret or file the server is verified against, "" for none
	}{
		"ISTIO_MUTUAL says in-mesh": {
			tls: istioMutual, proto: model.ProtocolHTTP, alpn: []string{"istio-peer-exchange", "istio"}, ca: SDSRootCA,
		},
		"ISTIO_MUTUAL to an HTTP/2 cluster also offers h2": {
			tls: istioMutual, proto: model.ProtocolGRPC, alpn: []string{"istio-peer-exchange", "istio", "h2"}, ca: SDSRootCA,
		},
		"SIMPLE without caCertificates verifies against the system's roots": {
			tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}, proto: model.ProtocolHTTP, ca: SDSSystemRoots,
		},
		"SIMPLE with caCertificates to an HTTP/2 cluster offers h2": {
			tls:   &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CaCertificates: "/etc/ca.pem"},
			proto: model.ProtocolHTTP2, alpn: []string{"h2"}, ca: "/etc/ca.pem",
		},
		"insecureSkipVerify verifies nothing": {
			tls:   &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, InsecureSkipVerify: wrapperspb.Bool(true)},
			proto: model.ProtocolHTTP,
		},
	}
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			c := edsCluster(name, tc.proto, true)
			var ctx tlsv3.UpstreamTlsContext
			if err := upstreamTLS(tc.tls, c, nil).GetTypedConfig().UnmarshalTo(&ctx); err != nil {
				t.Fatal(err)
			}
			cc := ctx.GetCommonTlsContext()
			if p := cc.GetTlsParams(); p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 {
				t.Errorf("TLS versions %v, want 1.2 to 1.3", p)
			}
			if !slices.Equal(cc.GetAlpnProtocols(), tc.alpn) {
				t.Errorf("ALPN %v, want %v", cc.GetAlpnProtocols(), tc.alpn)
			}
			ca := cc.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName()
			if ca == "" {
				ca = cc.GetValidationContext().GetTrustedCa().GetFilename()
			}
			if ca != tc.ca {
				t.Errorf("verified against %q, want %q", ca, tc.ca)
			}
		})
	}
}

func TestAutoMTLSFollowsNamespacePeerAuthentication(t *testing.T) {
	const world = `apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.11
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
`
	pa := func(ns, mode, sel string) string {
		return "---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: pa, namespace: " + ns + "}\nspec: {" + sel + "mtls: {mode: " + mode + "}}\n"
	}
	tests := map[string]struct {
		policies string
		mutual   bool
	}{
		"no policy: auto mTLS":                                           {mutual: true},
		"mesh DISABLE: plaintext":                                        {policies: pa("istio-system", "DISABLE", ""), mutual: false},
		"namespace DISABLE: plaintext":                                   {policies: pa("default", "DISABLE", ""), mutual: false},
		"namespace STRICT over mesh DISABLE: auto mTLS":                  {policies: pa("istio-system", "DISABLE", "") + pa("default", "STRICT", ""), mutual: true},
		"a workload policy does not count (istiod infers per namespace)": {policies: pa("default", "DISABLE", "selector: {matchLabels: {app: reviews}}, "), mutual: true},
	}
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			p, err := model.ParseProxy("sidecar~10.1.0.7~productpage-v1-abc.default~default.svc.cluster.local", map[string]any{"NAMESPACE": "default"})
			if err != nil {
				t.Fatal(err)
			}
			cc, _ := classFromYAML(t, p, world+tc.policies)
			r := cc.Sets[ClusterType].Get(ClusterName(9080, "", "reviews.default.svc.cluster.local"))
			if r == nil {
				t.Fatal("no cluster for reviews")
			}
			m, err := r.Any.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			c := m.(*clusterv3.Cluster)
			if got := len(c.GetTransportSocketMatches()) > 0; got != tc.mutual {
				t.Errorf("auto mTLS %v, want %v", got, tc.mutual)
			}
		})
	}
}
