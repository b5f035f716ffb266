package gen

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
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
				c.TransportSocket = upstreamTLS(tc.drTLS, name, nil)
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
