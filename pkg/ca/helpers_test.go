package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

// logBuffer collects log output from many goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newLogger(w *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func ecKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func rsaKey(t testing.TB, bits int) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// csrSpec describes a test CSR.
type csrSpec struct {
	uris []string
	dns  []string
	ips  []net.IP
}

func makeCSR(t testing.TB, key crypto.Signer, spec csrSpec) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{}, DNSNames: spec.dns, IPAddresses: spec.ips}
	for _, s := range spec.uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// badSignatureCSR returns a CSR for uri whose signature does not verify.
func badSignatureCSR(t testing.TB, uri string) []byte {
	t.Helper()
	block, _ := pem.Decode(makeCSR(t, ecKey(t), csrSpec{uris: []string{uri}}))
	// The DER ends with the signature's last byte (the low byte of the
	// ECDSA s value): flipping it keeps the structure parseable and the
	// signature wrong.
	der := bytes.Clone(block.Bytes)
	der[len(der)-1] ^= 0x01
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// serve runs the CA's gRPC service on a loopback TLS listener.
func serve(t testing.TB, c *CA) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(c.ServerTLSConfig())))
	c.Register(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dial connects as pilot-agent does: the server is verified against root
// for istiod.<ns>.svc; cert, when set, is presented as client certificate.
func dial(t testing.TB, addr string, root []byte, ns string, cert *tls.Certificate) pb.IstioCertificateServiceClient {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) {
		t.Fatal("no root")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "istiod." + ns + ".svc", MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// parseChain decodes a response chain, leaf first.
func parseChain(t testing.TB, chain []string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for i, p := range chain {
		certs, err := parseCerts([]byte(p))
		if err != nil || len(certs) != 1 {
			t.Fatalf("chain entry %d: %d certificates, err %v", i, len(certs), err)
		}
		out = append(out, certs[0])
	}
	return out
}

// verifyLeaf checks the chain leaf..root against root and the leaf's shape.
func verifyLeaf(t testing.TB, chain []*x509.Certificate, root *x509.Certificate, spiffeID string, ttl time.Duration) {
	t.Helper()
	if len(chain) < 2 {
		t.Fatalf("chain of %d certificates; pilot-agent needs at least 2", len(chain))
	}
	if !chain[len(chain)-1].Equal(root) {
		t.Fatalf("chain ends with %s, not the root %s", chain[len(chain)-1].Subject, root.Subject)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range chain[1 : len(chain)-1] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}); err != nil {
		t.Fatalf("leaf does not verify: %v", err)
	}
	for i := 0; i+1 < len(chain); i++ {
		if err := chain[i].CheckSignatureFrom(chain[i+1]); err != nil {
			t.Fatalf("chain[%d] is not signed by chain[%d]: %v", i, i+1, err)
		}
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != spiffeID || len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
		t.Fatalf("leaf SANs: URIs %v DNS %v IP %v email %v; want only %s", leaf.URIs, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, spiffeID)
	}
	if want := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment; leaf.KeyUsage != want {
		t.Fatalf("key usage %b, want %b", leaf.KeyUsage, want)
	}
	if len(leaf.ExtKeyUsage) != 2 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("extended key usage %v, want server + client auth", leaf.ExtKeyUsage)
	}
	if leaf.IsCA {
		t.Fatal("leaf is a CA")
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore) - backdate; got < ttl-time.Minute || got > ttl+time.Minute {
		t.Fatalf("leaf lifetime %s, want %s", got, ttl)
	}
	if d := time.Until(leaf.NotAfter); d < ttl-2*time.Minute || d > ttl {
		t.Fatalf("leaf expires in %s, want about %s", d, ttl)
	}
}

// issuedTLSCert turns a response chain and key into a TLS client certificate.
func issuedTLSCert(t testing.TB, chain []string, key crypto.Signer) *tls.Certificate {
	t.Helper()
	c := &tls.Certificate{PrivateKey: key}
	for _, x := range parseChain(t, chain) {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}

func ctxWithToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}
