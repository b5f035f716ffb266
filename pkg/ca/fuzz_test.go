package ca

import (
	"errors"
	"testing"
)

// FuzzCSR drives the CSR and PEM parsing path with arbitrary input: it must
// never panic, must refuse with a typed InvalidRequest error, and whatever
// it accepts must carry a verified signature and an allowed key.
func FuzzCSR(f *testing.F) {
	f.Add(makeCSR(f, ecKey(f), csrSpec{uris: []string{idA}}))
	f.Add(makeCSR(f, ecKey(f), csrSpec{uris: []string{idA, idB}, dns: []string{"a.example"}}))
	f.Add(badSignatureCSR(f, idA))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte("-----BEGIN NEW CERTIFICATE REQUEST-----\n\n-----END NEW CERTIFICATE REQUEST-----\n"))
	f.Add([]byte(""))
	f.Add([]byte("garbage"))
	want := Identity{TrustDomain: "cluster.local", Namespace: "app", ServiceAccount: "a"}
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := ParseCSR(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Reason != ReasonInvalidRequest {
				t.Fatalf("refusal %v is not an InvalidRequest *Error", err)
			}
			return
		}
		if err := csr.CheckSignature(); err != nil {
			t.Fatalf("accepted a CSR whose signature does not verify: %v", err)
		}
		if err := checkPublicKey(csr.PublicKey); err != nil {
			t.Fatalf("accepted a CSR with a refused key: %v", err)
		}
		if err := checkSANs(csr, want); err == nil {
			if len(csr.URIs) != 1 || csr.URIs[0].String() != want.SPIFFEID() || len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses) != 0 {
				t.Fatalf("SAN check passed URIs %v DNS %v IP %v email %v", csr.URIs, csr.DNSNames, csr.IPAddresses, csr.EmailAddresses)
			}
		}
	})
}

// FuzzParseBundle drives the parser of CA Secrets and files: no panic, and
// an accepted bundle is consistent.
func FuzzParseBundle(f *testing.F) {
	b, err := NewSelfSignedBundle("cluster.local", KeyTypeECDSA, timeNow())
	if err != nil {
		f.Fatal(err)
	}
	data, err := b.Data()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data[KeyCACert], data[KeyCAKey], data[KeyCertChain], data[KeyRootCert])
	f.Add(data[KeyCACert], []byte("garbage"), []byte{}, []byte{})
	f.Add([]byte{}, []byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, cert, key, chain, root []byte) {
		b, err := ParseBundle(map[string][]byte{KeyCACert: cert, KeyCAKey: key, KeyCertChain: chain, KeyRootCert: root})
		if err != nil {
			return
		}
		if !b.Cert.IsCA || !publicKeysEqual(b.Cert.PublicKey, b.Key.Public()) || !b.Chain[len(b.Chain)-1].Equal(b.Root) {
			t.Fatal("accepted an inconsistent bundle")
		}
	})
}
