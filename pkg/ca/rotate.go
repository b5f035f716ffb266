package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"
)

// Root rotation by cross-signing, in two steps, with no restart and no
// handshake that fails between workloads of any two steps that can meet.
//
// Start: a new root R2 (new key K2) is made, and the old root R1 signs a
// second certificate X2 for R2's subject and key. The CA signs with K2
// through X2: a workload's chain is leaf, X2, and the trust bundle R1+R2.
// A peer that still trusts only R1 verifies the new leaf through X2; a
// peer given R1+R2 verifies both old and new leaves. Both roots are
// published (istio-ca-root-cert, the caBundle of webhooks).
//
// Finish, once every certificate issued under R1 alone has expired (the
// overlap, at least the longest workload certificate lifetime): the CA
// signs with R2 itself and publishes R2 only. The leaves of the start step
// still verify against R2 (their issuer is R2's subject and key), and the
// workloads holding them trust R2 already.
//
// istiod's own answer is different: a self-signed root is replaced when it
// nears expiry and both roots are published (multi-root trust bundles),
// but new leaves chain only to the new root, so until a peer has renewed
// it refuses them. Cross-signing closes that gap, as Consul's CA does.
//
// The state of a rotation is the bundle itself: a signing certificate that
// is a cross-signed copy of one of the anchors.

// Annotations the rotation writes on istio-ca-secret.
const (
	// AnnotationRotationStarted is when the current rotation started (RFC 3339).
	AnnotationRotationStarted = "discovery.meshplane.io/root-rotation-started"
	// AnnotationRotationFinished is when the last rotation finished.
	AnnotationRotationFinished = "discovery.meshplane.io/root-rotation-finished"
)

// Rotating reports whether b is between the two steps of a rotation, and
// if so returns the next root.
func (b *Bundle) Rotating() (*x509.Certificate, bool) {
	if b.SelfSigned() {
		return nil, false
	}
	for _, a := range b.Anchors[1:] {
		if a.Subject.String() == b.Cert.Subject.String() && publicKeysEqual(a.PublicKey, b.Cert.PublicKey) {
			return a, true
		}
	}
	return nil, false
}

// StartRotation returns the bundle of the start step: a new root with a
// new key of keyType, cross-signed by cur's root. cur must be a
// self-signed root not already rotating (a plugged-in CA is rotated by
// its operator: see SECURITY.md).
func StartRotation(cur *Bundle, trustDomain, keyType string, now time.Time) (*Bundle, error) {
	if _, ok := cur.Rotating(); ok {
		return nil, errors.New("a root rotation is already in progress: finish it first")
	}
	if !cur.SelfSigned() {
		return nil, errors.New("the CA signs with an intermediate (plugged-in cacerts): rotate it by changing cacerts, with both roots in root-cert.pem during the overlap")
	}
	key, err := newKey(keyType)
	if err != nil {
		return nil, err
	}
	subject := pkix.Name{Organization: []string{trustDomain}, CommonName: "discovery root CA " + now.UTC().Format("20060102T150405Z")}
	next, err := selfSign(subject, key, now)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := next.NotAfter
	if cur.Root.NotAfter.Before(notAfter) {
		notAfter = cur.Root.NotAfter
	}
	cross := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               next.Subject,
		SubjectKeyId:          next.SubjectKeyId,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              next.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, cross, cur.Root, key.Public(), cur.Key)
	if err != nil {
		return nil, fmt.Errorf("cross-sign the new root: %w", err)
	}
	x, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return newBundle(x, key, []*x509.Certificate{x, cur.Root}, cur.Root, next)
}

// FinishRotation returns the bundle of the finish step: the next root,
// signing for itself and the only anchor.
func FinishRotation(cur *Bundle) (*Bundle, error) {
	next, ok := cur.Rotating()
	if !ok {
		return nil, errors.New("no root rotation is in progress")
	}
	return newBundle(next, cur.Key, nil, next)
}

func selfSign(subject pkix.Name, key crypto.Signer, now time.Time) (*x509.Certificate, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(rootTTL),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create root certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}
