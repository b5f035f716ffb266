package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"sync"
	"time"
)

// Key types of a self-signed root (--ca-key-type).
const (
	KeyTypeECDSA = "ECDSA"
	KeyTypeRSA   = "RSA"
)

// backdate moves a leaf's NotBefore into the past so that a peer whose clock
// is a little behind still accepts it.
const backdate = time.Minute

// Signer signs certificates with the current CA bundle.
type Signer interface {
	// SignWorkload issues a leaf for id with the given public key and
	// lifetime and returns the chain leaf..root in PEM, one per entry.
	SignWorkload(pub crypto.PublicKey, id Identity, ttl time.Duration) ([]string, *x509.Certificate, error)
}

var _ Signer = (*Authority)(nil)

// Authority holds the bundle in force and signs with it. The bundle is
// replaced when the root source changes; Watch tells who cares.
type Authority struct {
	now func() time.Time

	mu      sync.RWMutex
	bundle  *Bundle
	changed chan struct{}
}

// NewAuthority returns an Authority signing with b.
func NewAuthority(b *Bundle) *Authority {
	return &Authority{now: time.Now, bundle: b, changed: make(chan struct{})}
}

// Bundle is the bundle in force.
func (a *Authority) Bundle() *Bundle {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.bundle
}

// Watch returns the bundle in force and a channel closed when it is replaced.
func (a *Authority) Watch() (*Bundle, <-chan struct{}) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.bundle, a.changed
}

// Set replaces the bundle. It reports whether anything changed.
func (a *Authority) Set(b *Bundle) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bundle != nil && a.bundle.Cert.Equal(b.Cert) && sameChain(a.bundle.Chain, b.Chain) && sameChain(a.bundle.Anchors, b.Anchors) &&
		publicKeysEqual(a.bundle.Key.Public(), b.Key.Public()) {
		return false
	}
	a.bundle = b
	close(a.changed)
	a.changed = make(chan struct{})
	return true
}

func sameChain(x, y []*x509.Certificate) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if !x[i].Equal(y[i]) {
			return false
		}
	}
	return true
}

// SignWorkload issues a workload leaf: the SPIFFE ID as its only SAN, key
// usage digital signature + key encipherment, extended key usage server +
// client auth, valid for ttl (never beyond the signing certificate).
func (a *Authority) SignWorkload(pub crypto.PublicKey, id Identity, ttl time.Duration) ([]string, *x509.Certificate, error) {
	u, err := url.Parse(id.SPIFFEID())
	if err != nil {
		return nil, nil, refuse(ReasonInternal, err, "SPIFFE ID")
	}
	return a.sign(pub, ttl, func(t *x509.Certificate) { t.URIs = []*url.URL{u} })
}

// signServing issues the control plane's own serving certificate for names.
func (a *Authority) signServing(pub crypto.PublicKey, names []string, ttl time.Duration) ([]string, *x509.Certificate, error) {
	return a.sign(pub, ttl, func(t *x509.Certificate) {
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				t.IPAddresses = append(t.IPAddresses, ip)
			} else {
				t.DNSNames = append(t.DNSNames, n)
			}
		}
	})
}

func (a *Authority) sign(pub crypto.PublicKey, ttl time.Duration, sans func(*x509.Certificate)) ([]string, *x509.Certificate, error) {
	b := a.Bundle()
	serial, err := newSerial()
	if err != nil {
		return nil, nil, refuse(ReasonInternal, err, "sign")
	}
	now := a.now()
	notAfter := now.Add(ttl)
	if notAfter.After(b.Cert.NotAfter) {
		notAfter = b.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	sans(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.Cert, pub, b.Key)
	if err != nil {
		return nil, nil, refuse(ReasonInternal, err, "sign certificate")
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, refuse(ReasonInternal, err, "parse signed certificate")
	}
	// As istiod answers: the leaf, the certificates between it and the root,
	// then the trust bundle as one element (pilot-agent takes the last
	// element as the workload's root certificates).
	chain := make([]string, 0, len(b.chainPEM)+1)
	chain = append(chain, pemCert(der))
	chain = append(chain, b.intermediatesPEM()...)
	chain = append(chain, string(b.rootPEM))
	return chain, leaf, nil
}

func pemCert(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
