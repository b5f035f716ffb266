package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Keys of the CA Secrets and files, as Istio names them. cacerts may also
// use the kubernetes.io/tls names (tls.crt, tls.key, ca.crt).
const (
	KeyCACert    = "ca-cert.pem"
	KeyCAKey     = "ca-key.pem"
	KeyCertChain = "cert-chain.pem"
	KeyRootCert  = "root-cert.pem"
	KeyTLSCert   = "tls.crt"
	KeyTLSKey    = "tls.key"
	KeyTLSCA     = "ca.crt"
)

// rootTTL is the lifetime of a self-signed root.
const rootTTL = 10 * 365 * 24 * time.Hour

// Bundle is the CA's signing material: a CA certificate and its key, the
// certificates between it and the root, and the root. Immutable.
type Bundle struct {
	// Cert signs workload certificates: the root itself when self-signed,
	// else an intermediate.
	Cert *x509.Certificate
	Key  crypto.Signer
	// Chain is Cert, then each certificate above it, ending with Root.
	Chain []*x509.Certificate
	Root  *x509.Certificate
	// Anchors are the roots proxies must trust: Root first, then any other
	// root of root-cert.pem (Istio's multi-root trust bundle), such as the
	// next root during a rotation (rotate.go).
	Anchors []*x509.Certificate

	chainPEM  []string       // Chain as PEM, one certificate per entry
	rootPEM   []byte         // Anchors as PEM
	pool      *x509.CertPool // the anchors
	clientCAs *x509.CertPool // every certificate of Chain and the anchors: anchors for TLS client certs
}

// SelfSigned reports whether the bundle signs with its root.
func (b *Bundle) SelfSigned() bool { return b.Cert.Equal(b.Root) }

// RootPEM is the trust bundle in PEM: every anchor, the signing root
// first. It is what the CA publishes (istio-ca-root-cert) and the last
// element of every certificate chain it returns, which pilot-agent takes
// as the workload's root certificates.
func (b *Bundle) RootPEM() []byte { return b.rootPEM }

// Pool is a pool holding the anchors.
func (b *Bundle) Pool() *x509.CertPool { return b.pool }

// newBundle checks that key belongs to cert, that cert may sign
// certificates, and that cert chains to root through chain; it fills the
// derived fields. extra are further trust anchors (self-signed roots).
func newBundle(cert *x509.Certificate, key crypto.Signer, chain []*x509.Certificate, root *x509.Certificate, extra ...*x509.Certificate) (*Bundle, error) {
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("CA key does not belong to the CA certificate")
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("CA certificate may not sign certificates (needs CA:true and keyCertSign)")
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("root certificate is not self-signed: %w", err)
	}
	full := []*x509.Certificate{cert}
	for _, c := range chain {
		if !c.Equal(cert) && !c.Equal(root) {
			full = append(full, c)
		}
	}
	if !cert.Equal(root) {
		full = append(full, root)
	}
	for i := 0; i+1 < len(full); i++ {
		if err := full[i].CheckSignatureFrom(full[i+1]); err != nil {
			return nil, fmt.Errorf("certificate %d (%s) is not signed by certificate %d (%s): %w",
				i, full[i].Subject, i+1, full[i+1].Subject, err)
		}
	}
	anchors := []*x509.Certificate{root}
	for _, c := range extra {
		if c.Equal(root) || containsCert(anchors, c) {
			continue
		}
		if err := c.CheckSignatureFrom(c); err != nil {
			return nil, fmt.Errorf("trust anchor %s is not a self-signed root: %w", c.Subject, err)
		}
		anchors = append(anchors, c)
	}
	b := &Bundle{Cert: cert, Key: key, Chain: full, Root: root, Anchors: anchors, pool: x509.NewCertPool(), clientCAs: x509.NewCertPool()}
	for _, c := range full {
		b.clientCAs.AddCert(c)
		b.chainPEM = append(b.chainPEM, pemCert(c.Raw))
	}
	var roots bytes.Buffer
	for _, c := range anchors {
		b.pool.AddCert(c)
		b.clientCAs.AddCert(c)
		roots.WriteString(pemCert(c.Raw))
	}
	b.rootPEM = roots.Bytes()
	return b, nil
}

func containsCert(l []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range l {
		if x.Equal(c) {
			return true
		}
	}
	return false
}

// intermediatesPEM is Chain without its root, as PEM.
func (b *Bundle) intermediatesPEM() []string { return b.chainPEM[:len(b.chainPEM)-1] }

// ParseBundle reads the CA from Secret data or files named as in Istio's
// cacerts (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem) or as a
// kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt). Without a root, the CA
// certificate must be self-signed and is its own root. root-cert.pem may
// hold several roots, as in Istio's multi-root trust: the one the chain
// ends in signs, and all of them are published as trust anchors.
func ParseBundle(data map[string][]byte) (*Bundle, error) {
	certPEM, keyPEM, chainPEM, rootPEM := data[KeyCACert], data[KeyCAKey], data[KeyCertChain], data[KeyRootCert]
	if len(certPEM) == 0 && len(data[KeyTLSCert]) > 0 {
		certPEM, keyPEM, rootPEM = data[KeyTLSCert], data[KeyTLSKey], data[KeyTLSCA]
		chainPEM = nil
	}
	certs, err := parseCerts(certPEM)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("CA certificate: %w", orEmpty(err))
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	chain, err := parseCerts(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCertChain, err)
	}
	chain = append(certs[1:], chain...) // tls.crt may carry the chain itself
	roots, err := parseCerts(rootPEM)
	if err != nil {
		return nil, fmt.Errorf("root certificate: %w", err)
	}
	root := certs[0]
	switch {
	case len(roots) > 0:
		root = signingRoot(append([]*x509.Certificate{certs[0]}, chain...), roots)
	case len(chain) > 0:
		root = chain[len(chain)-1]
	}
	return newBundle(certs[0], key, chain, root, roots...)
}

// signingRoot is the root among roots that the chain ends in: the top of
// the chain itself, or the root that signed it; roots[0] when none does
// (newBundle then says why the chain does not verify).
func signingRoot(chain, roots []*x509.Certificate) *x509.Certificate {
	top := chain[len(chain)-1]
	for _, r := range roots {
		if top.Equal(r) {
			return r
		}
	}
	for _, r := range roots {
		if top.CheckSignatureFrom(r) == nil {
			return r
		}
	}
	return roots[0]
}

// Data is the bundle as Secret data or files, in Istio's names.
func (b *Bundle) Data() (map[string][]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(b.Key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	var chain bytes.Buffer
	for _, p := range b.chainPEM {
		chain.WriteString(p)
	}
	return map[string][]byte{
		KeyCACert:    []byte(b.chainPEM[0]),
		KeyCAKey:     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		KeyCertChain: chain.Bytes(),
		KeyRootCert:  bytes.Clone(b.rootPEM),
	}, nil
}

// NewSelfSignedBundle creates a root CA for trustDomain valid for ten years
// with a new key: "ECDSA" (P-256) or "RSA" (2048 bits).
func NewSelfSignedBundle(trustDomain, keyType string, now time.Time) (*Bundle, error) {
	key, err := newKey(keyType)
	if err != nil {
		return nil, err
	}
	cert, err := selfSign(pkix.Name{Organization: []string{trustDomain}, CommonName: "discovery root CA"}, key, now)
	if err != nil {
		return nil, err
	}
	return newBundle(cert, key, nil, cert)
}

func newKey(keyType string) (crypto.Signer, error) {
	switch keyType {
	case "", KeyTypeECDSA:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyTypeRSA:
		return rsa.GenerateKey(rand.Reader, 2048)
	default:
		return nil, fmt.Errorf("key type %q (allowed: %s, %s)", keyType, KeyTypeECDSA, KeyTypeRSA)
	}
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("key is not PKCS #8, SEC 1 (EC) or PKCS #1 (RSA)")
	}
	return k, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

func orEmpty(err error) error {
	if err != nil {
		return err
	}
	return errors.New("no certificate found")
}
