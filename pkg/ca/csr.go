package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
)

// MaxCSRBytes bounds the PEM CSR in a request; a workload CSR is about 1 KB
// (RSA 4096: 2 KB).
const MaxCSRBytes = 16 << 10

// maxRSABits bounds the cost of checking an RSA CSR's signature.
const maxRSABits = 8192

// ParseCSR decodes a PEM PKCS #10 request, checks its self-signature and
// that its key is RSA 2048..8192 bits or ECDSA P-256/P-384. It does not look
// at the SANs (see checkSANs). Every failure is a ReasonInvalidRequest.
func ParseCSR(pemText []byte) (*x509.CertificateRequest, error) {
	if len(bytes.TrimSpace(pemText)) == 0 {
		return nil, refuse(ReasonInvalidRequest, nil, "empty CSR")
	}
	if len(pemText) > MaxCSRBytes {
		return nil, refuse(ReasonInvalidRequest, nil, "CSR of %d bytes is over the limit of %d", len(pemText), MaxCSRBytes)
	}
	block, rest := pem.Decode(pemText)
	if block == nil {
		return nil, refuse(ReasonInvalidRequest, nil, "CSR is not PEM")
	}
	if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, refuse(ReasonInvalidRequest, nil, "PEM block is %q, not a CERTIFICATE REQUEST", clip(block.Type))
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, refuse(ReasonInvalidRequest, nil, "CSR PEM has trailing data")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, refuse(ReasonInvalidRequest, err, "parse CSR")
	}
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, refuse(ReasonInvalidRequest, err, "CSR signature")
	}
	return csr, nil
}

func checkPublicKey(pub any) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 || n > maxRSABits {
			return refuse(ReasonInvalidRequest, nil, "RSA key of %d bits (allowed: 2048 to %d)", n, maxRSABits)
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return refuse(ReasonInvalidRequest, nil, "ECDSA curve %s (allowed: P-256, P-384)", k.Curve.Params().Name)
		}
	default:
		return refuse(ReasonInvalidRequest, nil, "public key of type %T (allowed: RSA, ECDSA)", pub)
	}
	return nil
}

// checkSANs checks that csr names exactly one URI SAN, equal to want's
// SPIFFE ID, and no DNS, IP or email SAN.
func checkSANs(csr *x509.CertificateRequest, want Identity) error {
	if n := len(csr.DNSNames) + len(csr.IPAddresses) + len(csr.EmailAddresses); n > 0 {
		return refuse(ReasonInvalidRequest, nil, "CSR has %d DNS, %d IP and %d email SANs (only one URI SAN is allowed)",
			len(csr.DNSNames), len(csr.IPAddresses), len(csr.EmailAddresses))
	}
	if len(csr.URIs) != 1 {
		return refuse(ReasonInvalidRequest, nil, "CSR has %d URI SANs (exactly one is allowed)", len(csr.URIs))
	}
	if got := csr.URIs[0].String(); got != want.SPIFFEID() {
		return refuse(ReasonPermissionDenied, errors.New("identity mismatch"),
			"CSR asks for %q but the caller is %q", clip(got), want.SPIFFEID())
	}
	return nil
}
