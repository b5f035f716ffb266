// Package credentials reads the TLS Secrets that Gateways name in
// tls.credentialName, for the xDS server's SDS responses.
//
// In: Kubernetes Secrets of type kubernetes.io/tls, or Opaque ones holding
// tls.crt and tls.key; ca.crt (or Istio's cacert key) for MUTUAL servers,
// in the same Secret or in one named NAME-cacert.
//
// Out: Reader.Get(namespace, name) and a change callback per Secret.
//
// Secrets never enter model.World, which /debug/configz and
// /debug/registryz dump: they have their own informer, whose transform
// keeps only the TLS keys (every other Secret is cached as its name alone).
// Which proxy may read which Secret is the xDS server's decision (gateways
// of the Secret's own namespace only).
package credentials

// Keys of a Secret's data that hold TLS material; every other key is
// dropped before the Secret is cached.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
	// KeyIstioCA is the key Istio also accepts for a CA certificate.
	KeyIstioCA = "cacert"
)

// TLS is the material of one Secret. Cert and Key are set together or not
// at all; CA may be set alone.
type TLS struct {
	Cert, Key, CA []byte
}

// HasCertificate reports whether t holds a certificate and its key.
func (t TLS) HasCertificate() bool { return len(t.Cert) > 0 && len(t.Key) > 0 }

// Reader gives the xDS server the TLS Secrets of the cluster.
type Reader interface {
	// Get returns the TLS material of namespace/name, and false when there
	// is no such Secret or it holds no TLS material.
	Get(namespace, name string) (TLS, bool)
	// OnChange registers fn, called after a Secret is added, changed or
	// deleted; fn must return quickly. Call it before Start.
	OnChange(fn func(namespace, name string))
}
