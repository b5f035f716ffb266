package dataplane

import (
	"fmt"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

const (
	typeDownstreamTLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	typeUpstreamTLS   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	typeRawBuffer     = "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
	typeInternalUp    = "type.googleapis.com/envoy.extensions.transport_sockets.internal_upstream.v3.InternalUpstreamTransport"
	// rootCA is the SDS name of the mesh's root in Istio's proxies.
	rootCA = "ROOTCA"
)

// downstreamTLS terminates TLS on a filter chain: the summary of what the
// proxy presents and requires, or why the handshake fails.
func (e *evaluator) downstreamTLS(fc *listenerv3.FilterChain) (summary, failure string) {
	ts := fc.GetTransportSocket()
	if ts == nil || ts.GetTypedConfig().GetTypeUrl() == typeRawBuffer {
		return "", ""
	}
	if ts.GetTypedConfig().GetTypeUrl() != typeDownstreamTLS {
		return "", "unknown transport socket " + ts.GetTypedConfig().GetTypeUrl()
	}
	var ctx tlsv3.DownstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		return "", "invalid TLS context"
	}
	cc := ctx.GetCommonTlsContext()
	ca := validationName(cc)
	require := ctx.GetRequireClientCertificate().GetValue()
	summary = fmt.Sprintf("cert=%s client_cert=%s ca=%s alpn=%s%s",
		certNames(cc), map[bool]string{true: "required", false: "optional"}[require], ca,
		alpn(cc.GetAlpnProtocols()), tlsParams(cc.GetTlsParams(), true))
	if sans := validationSANs(cc); sans != "" {
		summary += " client_sans=" + sans
	}
	switch {
	case e.req.TLS == Plaintext:
		return summary, "tls handshake: plaintext to a TLS chain"
	case require && e.req.TLS != MutualTLS:
		return summary, "tls handshake: client certificate required"
	case e.req.TLS == MutualTLS && ca != "":
		// An Istio peer's certificate chains to the mesh root; another
		// client's to the gateway's CA credential.
		if (e.req.Peer != "") != (ca == rootCA) {
			return summary, "tls handshake: client certificate not trusted"
		}
		if !sansAllow(cc, e.req.Peer) {
			return summary, "tls handshake: client SAN not allowed"
		}
	}
	return summary, ""
}

// certNames names the certificates a TLS context presents: SDS secret
// names, certificate provider instances, or "inline".
func certNames(cc *tlsv3.CommonTlsContext) string {
	var names []string
	for _, s := range cc.GetTlsCertificateSdsSecretConfigs() {
		names = append(names, s.GetName())
	}
	if p := cc.GetTlsCertificateProviderInstance(); p != nil {
		names = append(names, "provider:"+p.GetInstanceName())
	}
	if p := cc.GetTlsCertificateCertificateProviderInstance(); p != nil && len(names) == 0 {
		names = append(names, "provider:"+p.GetInstanceName())
	}
	for _, c := range cc.GetTlsCertificates() {
		// Istio's agent serves a certificate from files as the SDS
		// secret file-cert:CHAIN~KEY: the same files either way.
		chain, key := c.GetCertificateChain().GetFilename(), c.GetPrivateKey().GetFilename()
		if chain != "" && key != "" {
			names = append(names, "file-cert:"+chain+"~"+key)
		} else {
			names = append(names, "inline")
		}
	}
	sort.Strings(names)
	return "[" + strings.Join(names, ",") + "]"
}

// validationName names what a TLS context validates peers against ("" for
// nothing).
func validationName(cc *tlsv3.CommonTlsContext) string {
	switch v := cc.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		return v.ValidationContextSdsSecretConfig.GetName()
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		if s := v.CombinedValidationContext.GetValidationContextSdsSecretConfig(); s != nil {
			return s.GetName()
		}
		if p := v.CombinedValidationContext.GetDefaultValidationContext().GetCaCertificateProviderInstance(); p != nil {
			return "provider:" + p.GetInstanceName()
		}
		if p := v.CombinedValidationContext.GetValidationContextCertificateProviderInstance(); p != nil {
			return "provider:" + p.GetInstanceName()
		}
		return inlineCA(v.CombinedValidationContext.GetDefaultValidationContext())
	case *tlsv3.CommonTlsContext_ValidationContext:
		if p := v.ValidationContext.GetCaCertificateProviderInstance(); p != nil {
			return "provider:" + p.GetInstanceName()
		}
		return inlineCA(v.ValidationContext)
	case *tlsv3.CommonTlsContext_ValidationContextCertificateProviderInstance:
		return "provider:" + v.ValidationContextCertificateProviderInstance.GetInstanceName()
	}
	return ""
}

func inlineCA(v *tlsv3.CertificateValidationContext) string {
	if v.GetTrustedCa() == nil {
		return ""
	}
	switch s := v.GetTrustedCa().GetSpecifier().(type) {
	case *corev3.DataSource_Filename:
		// As the agent's SDS secret file-root:PATH names the same file.
		return "file-root:" + s.Filename
	default:
		return "inline"
	}
}

func defaultValidation(cc *tlsv3.CommonTlsContext) *tlsv3.CertificateValidationContext {
	switch v := cc.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		return v.CombinedValidationContext.GetDefaultValidationContext()
	case *tlsv3.CommonTlsContext_ValidationContext:
		return v.ValidationContext
	}
	return nil
}

// validationSANs lists the SAN matchers of a validation context.
func validationSANs(cc *tlsv3.CommonTlsContext) string {
	v := defaultValidation(cc)
	var out []string
	// A SPIFFE ID can only be a URI SAN: an untyped matcher and a URI
	// one check the same certificates for it.
	// Likewise a host name can only be a DNS SAN.
	san := func(kind string, m *matcherv3.StringMatcher) string {
		s := stringMatcher(m)
		if _, v, _ := strings.Cut(s, ":"); kind == "any" {
			switch {
			case strings.HasPrefix(v, "spiffe://"):
				kind = "uri"
			case dnsName(v):
				kind = "dns"
			}
		}
		return kind + ":" + s
	}
	for _, m := range v.GetMatchSubjectAltNames() {
		out = append(out, san("any", m))
	}
	for _, m := range v.GetMatchTypedSubjectAltNames() {
		kind := strings.ToLower(m.GetSanType().String())
		if m.GetSanType() == tlsv3.SubjectAltNameMatcher_SAN_TYPE_UNSPECIFIED {
			kind = "any"
		}
		out = append(out, san(kind, m.GetMatcher()))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return ""
	}
	return "[" + strings.Join(out, " ") + "]"
}

// sansAllow reports whether a peer's URI SAN passes the SAN matchers.
func sansAllow(cc *tlsv3.CommonTlsContext, peer string) bool {
	v := defaultValidation(cc)
	if len(v.GetMatchSubjectAltNames()) == 0 && len(v.GetMatchTypedSubjectAltNames()) == 0 {
		return true
	}
	for _, m := range v.GetMatchSubjectAltNames() {
		if matchString(m, peer) {
			return true
		}
	}
	for _, m := range v.GetMatchTypedSubjectAltNames() {
		t := m.GetSanType()
		if (t == tlsv3.SubjectAltNameMatcher_URI || t == tlsv3.SubjectAltNameMatcher_SAN_TYPE_UNSPECIFIED) && matchString(m.GetMatcher(), peer) {
			return true
		}
	}
	return false
}

// tlsParams renders TLS versions and ciphers with Envoy's defaults
// filled in: TLS 1.2 minimum for both sides, 1.2 maximum for clients
// and 1.3 for servers.
// dnsName reports whether s can only be a DNS name: labels of letters,
// digits, hyphens (and a leading wildcard), at least one dot, not an IP.
func dnsName(s string) bool {
	if !strings.Contains(s, ".") || validIP(s) {
		return false
	}
	for i, l := range strings.Split(s, ".") {
		if l == "*" && i == 0 {
			continue
		}
		if l == "" {
			return false
		}
		for _, r := range l {
			if !(r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return false
			}
		}
	}
	return true
}

// alpn lists ALPN protocols without istio-peer-exchange: that token only
// negotiates Istio's metadata exchange, which is telemetry.
func alpn(protos []string) string {
	var out []string
	for _, p := range protos {
		if p != "istio-peer-exchange" {
			out = append(out, p)
		}
	}
	return "[" + strings.Join(out, ",") + "]"
}

func tlsParams(p *tlsv3.TlsParameters, server bool) string {
	minV, maxV := tlsv3.TlsParameters_TLSv1_2, tlsv3.TlsParameters_TLSv1_2
	if server {
		maxV = tlsv3.TlsParameters_TLSv1_3
	}
	if v := p.GetTlsMinimumProtocolVersion(); v != tlsv3.TlsParameters_TLS_AUTO {
		minV = v
	}
	if v := p.GetTlsMaximumProtocolVersion(); v != tlsv3.TlsParameters_TLS_AUTO {
		maxV = v
	}
	s := " versions=" + minV.String() + "-" + maxV.String()
	if len(p.GetCipherSuites()) > 0 {
		s += " ciphers=" + strings.Join(p.GetCipherSuites(), ":")
	}
	if len(p.GetEcdhCurves()) > 0 {
		s += " curves=" + strings.Join(p.GetEcdhCurves(), ":")
	}
	return s
}

// upstreamTLS summarises the TLS a proxy originates through a transport
// socket ("plaintext" for none).
func upstreamTLS(ts *corev3.TransportSocket) string {
	if ts == nil {
		return "plaintext"
	}
	tc := ts.GetTypedConfig()
	switch tc.GetTypeUrl() {
	case typeRawBuffer:
		return "plaintext"
	case typeInternalUp:
		return "internal:" + tc.GetTypeUrl()
	case typeUpstreamTLS:
	default:
		return "transport " + strings.TrimPrefix(tc.GetTypeUrl(), "type.googleapis.com/")
	}
	var ctx tlsv3.UpstreamTlsContext
	if err := tc.UnmarshalTo(&ctx); err != nil {
		return "invalid TLS context"
	}
	cc := ctx.GetCommonTlsContext()
	s := fmt.Sprintf("tls sni=%s cert=%s ca=%s", ctx.GetSni(), certNames(cc), validationName(cc))
	if sans := validationSANs(cc); sans != "" {
		s += " sans=" + sans
	}
	if len(cc.GetAlpnProtocols()) > 0 {
		s += " alpn=" + alpn(cc.GetAlpnProtocols())
	}
	return s + tlsParams(cc.GetTlsParams(), false)
}

// stringMatcher renders a StringMatcher as kind:value.
func stringMatcher(m *matcherv3.StringMatcher) string {
	var s string
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		s = "exact:" + p.Exact
	case *matcherv3.StringMatcher_Prefix:
		s = "prefix:" + p.Prefix
	case *matcherv3.StringMatcher_Suffix:
		s = "suffix:" + p.Suffix
	case *matcherv3.StringMatcher_Contains:
		s = "contains:" + p.Contains
	case *matcherv3.StringMatcher_SafeRegex:
		s = "regex:" + p.SafeRegex.GetRegex()
	default:
		s = "?"
	}
	if m.GetIgnoreCase() {
		s += "(nocase)"
	}
	return s
}
