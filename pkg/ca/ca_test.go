package ca

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
		goleak.IgnoreAnyFunction("net/http.(*http2clientConnReadLoop).run"),
	)
}

func TestCreateCertificateIssues(t *testing.T) {
	logs := &logBuffer{}
	c := newTestCA(t, testOptions(), logs)
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", nil)
	root := c.authority.Bundle().Root

	tests := map[string]struct {
		key      crypto.Signer
		token    string
		ttl      int64
		metadata map[string]any
		want     string
		wantTTL  time.Duration
	}{
		"issues pilot-agent's 24h request for an ECDSA P-256 key": {
			key: ecKey(t), token: tok("token-a"), ttl: 86400, want: idA, wantTTL: 24 * time.Hour,
		},
		"issues the default TTL when none is asked for an RSA 2048 key": {
			key: rsaKey(t, 2048), token: tok("token-b"), want: idB, wantTTL: 24 * time.Hour,
		},
		"honours a shorter TTL": {
			key: ecKey(t), token: tok("token-a"), ttl: 3600, want: idA, wantTTL: time.Hour,
		},
		"issues another identity to a listed impersonator": {
			key: ecKey(t), token: tok("token-node"), metadata: map[string]any{ImpersonatedIdentityKey: idB}, want: idB, wantTTL: 24 * time.Hour,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := &pb.IstioCertificateRequest{Csr: string(makeCSR(t, tc.key, csrSpec{uris: []string{tc.want}})), ValidityDuration: tc.ttl}
			if tc.metadata != nil {
				req.Metadata, _ = structpb.NewStruct(tc.metadata)
			}
			resp, err := client.CreateCertificate(ctxWithToken(t.Context(), tc.token), req)
			if err != nil {
				t.Fatal(err)
			}
			verifyLeaf(t, parseChain(t, resp.CertChain), root, tc.want, tc.wantTTL)
		})
	}
	for name, tc := range tests {
		if strings.Contains(logs.String(), tc.token) {
			t.Fatalf("%s: the token reached the log", name)
		}
	}
}

func TestRenewalWithIssuedClientCertificate(t *testing.T) {
	c := newTestCA(t, testOptions(), &logBuffer{})
	addr := serve(t, c)
	key := ecKey(t)
	csr := string(makeCSR(t, key, csrSpec{uris: []string{idA}}))
	first, err := dial(t, addr, c.RootPEM(), "istio-system", nil).CreateCertificate(ctxWithToken(t.Context(), tok("token-a")), &pb.IstioCertificateRequest{Csr: csr})
	if err != nil {
		t.Fatal(err)
	}
	// No token this time: the certificate just issued is the credential.
	renewer := dial(t, addr, c.RootPEM(), "istio-system", issuedTLSCert(t, first.CertChain, key))
	second, err := renewer.CreateCertificate(t.Context(), &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))})
	if err != nil {
		t.Fatalf("renewal with the issued certificate: %v", err)
	}
	verifyLeaf(t, parseChain(t, second.CertChain), c.authority.Bundle().Root, idA, 24*time.Hour)
	// The client certificate proves sa A, not sa B.
	_, err = renewer.CreateCertificate(t.Context(), &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idB}}))})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("CSR for B with A's certificate: %v, want PermissionDenied", err)
	}
}

func TestClientCertificateFromAnotherCAIsRefused(t *testing.T) {
	c := newTestCA(t, testOptions(), &logBuffer{})
	other := newTestCA(t, testOptions(), &logBuffer{})
	key := ecKey(t)
	chain, _, err := other.authority.SignWorkload(key.Public(), Identity{"cluster.local", "app", "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, err = verifyClientCert(parseChain(t, chain), c.authority.Bundle(), "cluster.local")
	if err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("certificate of another CA: %v, want a verification error", err)
	}
	// Over TLS the handshake itself refuses it.
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", issuedTLSCert(t, chain, key))
	_, err = client.CreateCertificate(t.Context(), &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))})
	if err == nil {
		t.Fatal("a certificate of another CA was accepted")
	}
}

func TestRateLimitRefusesPromptly(t *testing.T) {
	o := testOptions()
	o.CSRRateLimit, o.CSRBurst = 0.001, 2
	c := newTestCA(t, o, &logBuffer{})
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", nil)
	req := &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))}
	ctx := ctxWithToken(t.Context(), tok("token-a"))
	for i := range 2 {
		if _, err := client.CreateCertificate(ctx, req); err != nil {
			t.Fatalf("request %d within the burst: %v", i, err)
		}
	}
	_, err := client.CreateCertificate(ctx, req)
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || st.Message() != opaqueMessage(codes.ResourceExhausted) {
		t.Fatalf("request over the limit: %v, want ResourceExhausted", err)
	}
}

func TestTokenReviewsAreCached(t *testing.T) {
	reviews := 0
	o := testOptions()
	c, err := New(t.Context(), o, fakeClient(&reviews), newLogger(&logBuffer{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", nil)
	req := &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))}
	for range 3 {
		if _, err := client.CreateCertificate(ctxWithToken(t.Context(), tok("token-a")), req); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := client.CreateCertificate(ctxWithToken(t.Context(), tok("token-unknown")), req); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("unknown token: %v", err)
		}
	}
	if reviews != 2 {
		t.Fatalf("%d TokenReviews, want 2 (one for the good token and one for the unknown one, both cached)", reviews)
	}
}

func TestServingCertificate(t *testing.T) {
	o := testOptions()
	o.Namespace, o.Revision = "mesh", "canary"
	c := newTestCA(t, o, &logBuffer{})
	cert, err := c.serving.getCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"istiod.mesh.svc", "discovery.mesh.svc", "istiod-canary.mesh.svc", "discovery-canary.mesh.svc"}
	roots := x509.NewCertPool()
	roots.AddCert(c.authority.Bundle().Root)
	for _, name := range want {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if len(cert.Leaf.DNSNames) != len(want) {
		t.Errorf("DNS names %v, want %v", cert.Leaf.DNSNames, want)
	}
	// A TLS client that checks istiod-canary.mesh.svc against the root connects.
	addr := serve(t, c)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "istiod-canary.mesh.svc", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

func TestServingCertificateRenewsBeforeExpiry(t *testing.T) {
	o := testOptions()
	c := newTestCA(t, o, &logBuffer{})
	first, _ := c.serving.getCertificate(nil)
	// Pretend 13h of a 24h certificate went by: past half its life.
	c.serving.now = func() time.Time { return time.Now().Add(13 * time.Hour) }
	done := make(chan error, 1)
	ctx, cancel := contextWithCancel(t)
	go func() { done <- c.serving.run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, 5*time.Second, "a renewed serving certificate", func() bool {
		cur, _ := c.serving.getCertificate(nil)
		return !cur.Leaf.Equal(first.Leaf)
	})
}

func TestFileMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# operator's tokens\nfile-token-a,app,a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Dir, o.TokenFile = dir, tokens
	logs := &logBuffer{}
	first, err := New(t.Context(), o, nil, newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyCAKey))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key file: %v, mode %v", err, st.Mode())
	}
	again, err := New(t.Context(), o, nil, newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !again.authority.Bundle().Root.Equal(first.authority.Bundle().Root) {
		t.Fatal("a restart in file mode made a new root")
	}
	client := dial(t, serve(t, again), again.RootPEM(), "istio-system", nil)
	resp, err := client.CreateCertificate(ctxWithToken(t.Context(), "file-token-a"), &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))})
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, parseChain(t, resp.CertChain), first.authority.Bundle().Root, idA, 24*time.Hour)
	_, err = client.CreateCertificate(ctxWithToken(t.Context(), "file-token-b"), &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a token not in the file: %v, want Unauthenticated", err)
	}
	if strings.Contains(logs.String(), "file-token") {
		t.Fatal("a token reached the log")
	}
}
