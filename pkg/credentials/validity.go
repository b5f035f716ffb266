package credentials

import (
	"crypto/tls"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// CertificateState is Certificate as the Gateway API translation reads
// it (model.Store.SetSecrets): unknown until the first list of Secrets.
func (k *Kube) CertificateState(namespace, name string) gatewayapi.CertificateState {
	if !k.HasSynced() {
		return gatewayapi.CertificateUnknown
	}
	switch found, valid := k.Certificate(namespace, name); {
	case !found:
		return gatewayapi.CertificateMissing
	case !valid:
		return gatewayapi.CertificateInvalid
	}
	return gatewayapi.CertificateValid
}

// Certificate reports whether the Secret namespace/name exists and
// whether it holds a certificate and key that go together (PEM that
// crypto/tls can load), for the Gateway API's listener status. The
// verdict is kept per Secret version, so a translation that asks again
// parses nothing.
func (k *Kube) Certificate(namespace, name string) (found, valid bool) {
	obj, ok, err := k.informer.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return false, false
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return false, false
	}
	key := namespace + "/" + name
	k.mu.Lock()
	v, cached := k.valid[key]
	k.mu.Unlock()
	if cached && v.rv == s.ResourceVersion {
		return true, v.ok
	}
	t, _ := material(s)
	good := false
	if t.HasCertificate() {
		_, err := tls.X509KeyPair(t.Cert, t.Key)
		good = err == nil
	}
	k.mu.Lock()
	if k.valid == nil {
		k.valid = map[string]validity{}
	}
	k.valid[key] = validity{rv: s.ResourceVersion, ok: good}
	k.mu.Unlock()
	return true, good
}

// validity is one Secret version's verdict.
type validity struct {
	rv string
	ok bool
}
