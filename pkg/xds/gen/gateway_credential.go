package gen

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// SecretType is the type URL of the SDS Secrets the server sends gateways
// for credentialName.
const SecretType = resourcev3.SecretType

// Gateway credentials are named as Istio names them: a Gateway server's
// tls.credentialName NAME becomes the SDS resource kubernetes://NAME (the
// Secret NAME of the gateway proxy's namespace); for MUTUAL its client CA
// is kubernetes://NAME-cacert (the Secret NAME-cacert, or else NAME's
// ca.crt). A credentialName NS/NAME names another namespace's Secret: it
// is sent only if NS is the proxy's own namespace.
const (
	CredentialPrefix   = "kubernetes://"
	CredentialCASuffix = "-cacert"
)

// Credential is a parsed SDS resource name.
type Credential struct {
	// Namespace is empty when the name leaves it to the proxy's.
	Namespace, Name string
	// CA is set for NAME-cacert: the client CA, not the certificate.
	CA bool
}

// ParseCredential parses kubernetes://[NS/]NAME[-cacert]; ok is false for
// any other form.
func ParseCredential(resource string) (Credential, bool) {
	rest, ok := strings.CutPrefix(resource, CredentialPrefix)
	if !ok || rest == "" {
		return Credential{}, false
	}
	var c Credential
	if ns, name, ok := strings.Cut(rest, "/"); ok {
		c.Namespace, rest = ns, name
		if ns == "" || strings.Contains(name, "/") {
			return Credential{}, false
		}
	}
	if base, ok := strings.CutSuffix(rest, CredentialCASuffix); ok && base != "" {
		c.CA, rest = true, base
	}
	if rest == "" {
		return Credential{}, false
	}
	c.Name = rest
	return c, true
}

// credentialSDS refers to an SDS Secret served over the proxy's ADS stream.
func credentialSDS(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}}
}

// credentialContext sets the certificate (and for MUTUAL the client CA) of
// a gateway server's TLS context from its credentialName over SDS.
func credentialContext(ctx *tlsv3.DownstreamTlsContext, tls *networking.ServerTLSSettings) {
	name := CredentialPrefix + strings.TrimPrefix(tls.GetCredentialName(), CredentialPrefix)
	ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{credentialSDS(name)}
	if tls.GetMode() != networking.ServerTLSSettings_MUTUAL {
		return
	}
	ctx.RequireClientCertificate = wrapperspb.Bool(true)
	ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
		CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
			ValidationContextSdsSecretConfig: credentialSDS(name + CredentialCASuffix),
		},
	}
}

// CertificateSecret is the SDS Secret of a certificate and its key.
func CertificateSecret(name string, cert, key []byte) (*Resource, error) {
	return NewResource(name, SecretType, &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{
		TlsCertificate: &tlsv3.TlsCertificate{CertificateChain: inlineBytes(cert), PrivateKey: inlineBytes(key)},
	}})
}

// CASecret is the SDS Secret of a client CA.
func CASecret(name string, ca []byte) (*Resource, error) {
	return NewResource(name, SecretType, &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{
		ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: inlineBytes(ca)},
	}})
}

func inlineBytes(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

// Redacted is what a private key shows in debug output, as in Envoy's own
// config_dump.
const Redacted = "[redacted]"

// RedactSecret returns a copy of s whose private key reads Redacted.
func RedactSecret(s *tlsv3.Secret) *tlsv3.Secret {
	out := proto.Clone(s).(*tlsv3.Secret)
	if c := out.GetTlsCertificate(); c != nil && c.GetPrivateKey() != nil {
		c.PrivateKey = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: Redacted}}
	}
	return out
}
