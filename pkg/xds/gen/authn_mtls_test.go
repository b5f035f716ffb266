package gen

import (
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

func TestMeshServerTLS(t *testing.T) {
	tests := map[string]struct {
		trust    trustDomains
		http     bool
		alpn     []string
		prefixes []string
	}{
		"an HTTP chain negotiates HTTP and takes identities of the trust domain only": {
			trust: trustDomains{domain: "cluster.local"}, http: true,
			alpn: []string{"h2", "http/1.1"}, prefixes: []string{"spiffe://cluster.local/"},
		},
		"a TCP chain also offers the metadata exchange and takes the aliases' identities": {
			trust: trustDomains{domain: "td.new", aliases: []string{"td.old"}},
			alpn:  []string{"istio-peer-exchange", "h2", "http/1.1"}, prefixes: []string{"spiffe://td.new/", "spiffe://td.old/"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ctx tlsv3.DownstreamTlsContext
			if err := newMeshServerTLS(tc.trust).socket(tc.http).GetTypedConfig().UnmarshalTo(&ctx); err != nil {
				t.Fatal(err)
			}
			cc := ctx.GetCommonTlsContext()
			if !ctx.GetRequireClientCertificate().GetValue() {
				t.Error("client certificates not required")
			}
			if !slices.Equal(cc.GetAlpnProtocols(), tc.alpn) {
				t.Errorf("ALPN %v, want %v", cc.GetAlpnProtocols(), tc.alpn)
			}
			p := cc.GetTlsParams()
			if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 ||
				!slices.Equal(p.GetCipherSuites(), meshServerCiphers) {
				t.Errorf("TLS params %v, want TLS 1.2-1.3 with Istio's ciphers", p)
			}
			v := cc.GetCombinedValidationContext()
			if v.GetValidationContextSdsSecretConfig().GetName() != SDSRootCA {
				t.Errorf("validated against %q, want %s", v.GetValidationContextSdsSecretConfig().GetName(), SDSRootCA)
			}
			var got []string
			for _, m := range v.GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
				if m.GetSanType() != tlsv3.SubjectAltNameMatcher_URI {
					t.Errorf("SAN matcher %v is not on URI SANs", m)
				}
				got = append(got, m.GetMatcher().GetPrefix())
			}
			if !slices.Equal(got, tc.prefixes) {
				t.Errorf("client SAN prefixes %v, want %v", got, tc.prefixes)
			}
		})
	}
}
