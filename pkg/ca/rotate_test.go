package ca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// workload is what pilot-agent makes of a CA answer: the whole answer as
// the certificate chain it presents, and the answer's last element as the
// roots it trusts.
type workload struct {
	name  string
	id    string
	cert  tls.Certificate
	trust *x509.CertPool
}

func newWorkload(t testing.TB, name, id string, chain []string, key any) workload {
	t.Helper()
	w := workload{name: name, id: id, cert: tls.Certificate{PrivateKey: key}, trust: x509.NewCertPool()}
	for i, p := range chain {
		certs, err := parseCerts([]byte(p))
		if err != nil || len(certs) == 0 {
			t.Fatalf("%s: chain entry %d: %d certificates, %v", name, i, len(certs), err)
		}
		for _, c := range certs {
			w.cert.Certificate = append(w.cert.Certificate, c.Raw)
		}
	}
	if !w.trust.AppendCertsFromPEM([]byte(chain[len(chain)-1])) {
		t.Fatalf("%s: no root in the answer's last element", name)
	}
	return w
}

// verifyPeer checks a peer's chain as Envoy does for Istio mTLS: the chain
// against the trusted roots, and the peer's SPIFFE ID; not a host name.
func verifyPeer(trust *x509.CertPool, wantID string) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("no peer certificate")
		}
		inter := x509.NewCertPool()
		var leaf *x509.Certificate
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return err
			}
			if i == 0 {
				leaf = c
			} else {
				inter.AddCert(c)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: trust, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return err
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantID {
			return fmt.Errorf("peer is %v, want %s", leaf.URIs, wantID)
		}
		return nil
	}
}

// handshake makes a gRPC call from client to server over mTLS, both sides
// verifying the other, and returns the error of the call.
func handshake(t testing.TB, client, server workload) error {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scfg := &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{server.cert},
		ClientAuth: tls.RequireAnyClientCert, VerifyPeerCertificate: verifyPeer(server.trust, client.id),
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(scfg)))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	ccfg := &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{client.cert},
		// Istio's peers verify the chain and the SPIFFE ID, not a host name.
		InsecureSkipVerify: true, VerifyPeerCertificate: verifyPeer(client.trust, server.id),
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(ccfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	return err
}

// meshHandshakes runs handshakes both ways between every pair of ws and
// returns one line per failure.
func meshHandshakes(t testing.TB, ws ...workload) (ok int, failed []string) {
	t.Helper()
	for _, a := range ws {
		for _, b := range ws {
			if a.name == b.name {
				continue
			}
			if err := handshake(t, a, b); err != nil {
				failed = append(failed, fmt.Sprintf("%s -> %s: %v", a.name, b.name, err))
			} else {
				ok++
			}
		}
	}
	return ok, failed
}

func issueTo(t testing.TB, a *Authority, name, sa string) workload {
	t.Helper()
	key := ecKey(t)
	id := Identity{"cluster.local", "app", sa}
	chain, _, err := a.SignWorkload(key.Public(), id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return newWorkload(t, name, id.SPIFFEID(), chain, key)
}

// Every pair of workloads that can meet during a rotation completes an
// mTLS handshake both ways; the pair that cannot (a certificate of before
// the rotation and a peer of after it) is what the overlap keeps apart,
// and it does fail: the overlap is needed.
func TestRootRotationHandshakes(t *testing.T) {
	old, err := NewSelfSignedBundle("cluster.local", KeyTypeECDSA, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuthority(old)
	before := issueTo(t, a, "issued-before", "before")

	started, err := StartRotation(old, "cluster.local", KeyTypeECDSA, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if next, ok := started.Rotating(); !ok || len(started.Anchors) != 2 || !started.Anchors[0].Equal(old.Root) || !started.Anchors[1].Equal(next) {
		t.Fatalf("started bundle: rotating %v, %d anchors", ok, len(started.Anchors))
	}
	if _, err := StartRotation(started, "cluster.local", KeyTypeECDSA, time.Now()); err == nil || !strings.Contains(err.Error(), "already in progress") {
		t.Fatalf("second start: %v", err)
	}
	a.Set(started)
	during := issueTo(t, a, "issued-during", "during")
	if n, failed := meshHandshakes(t, before, during); len(failed) > 0 {
		t.Fatalf("start step: %d handshakes, failed: %v", n, failed)
	}

	finished, err := FinishRotation(started)
	if err != nil {
		t.Fatal(err)
	}
	if !finished.SelfSigned() || len(finished.Anchors) != 1 || finished.Root.Equal(old.Root) {
		t.Fatal("finished bundle is not the new root alone")
	}
	if _, err := FinishRotation(finished); err == nil {
		t.Fatal("finish without a rotation in progress succeeded")
	}
	a.Set(finished)
	after := issueTo(t, a, "issued-after", "after")
	if n, failed := meshHandshakes(t, during, after); len(failed) > 0 {
		t.Fatalf("finish step: %d handshakes, failed: %v", n, failed)
	}
	// A certificate of before the rotation and a peer that trusts only the
	// new root: refused. This is why finishing waits for the overlap.
	if err := handshake(t, before, after); err == nil {
		t.Fatal("a certificate under the old root alone was accepted by a peer trusting only the new root")
	}
}

// A bundle read back from its Secret data is the same bundle: the state of
// a rotation survives a restart and reaches every replica.
func TestRotationStateRoundTrips(t *testing.T) {
	old, err := NewSelfSignedBundle("cluster.local", KeyTypeRSA, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	started, err := StartRotation(old, "cluster.local", keyTypeOf(old), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if keyTypeOf(started) != KeyTypeRSA {
		t.Fatalf("new key type %s, want the old root's, RSA", keyTypeOf(started))
	}
	data, err := started.Data()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseBundle(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := back.Rotating(); !ok || !back.Root.Equal(old.Root) || !back.Cert.Equal(started.Cert) || !sameChain(back.Anchors, started.Anchors) {
		t.Fatal("the started bundle did not survive Data and ParseBundle")
	}
	if a := NewAuthority(started); a.Set(back) {
		t.Fatal("the same bundle read back counts as a change")
	}
	if got := strings.Count(string(back.RootPEM()), "BEGIN CERTIFICATE"); got != 2 {
		t.Fatalf("trust bundle of %d certificates during a rotation, want 2", got)
	}
}

// A plugged-in cacerts may list several roots in root-cert.pem (Istio's
// multi-root trust): the CA signs under the one its chain ends in, in
// whichever order, and publishes all of them.
func TestPluggedInMultiRoot(t *testing.T) {
	_, first := pluggedInCA(t, "first")
	secondRoot, second := pluggedInCA(t, "second")
	data := map[string][]byte{
		KeyCACert: second[KeyCACert], KeyCAKey: second[KeyCAKey], KeyCertChain: second[KeyCertChain],
		KeyRootCert: append(append([]byte{}, first[KeyRootCert]...), second[KeyRootCert]...),
	}
	b, err := ParseBundle(data)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Root.Equal(secondRoot) || len(b.Anchors) != 2 {
		t.Fatalf("signing root %s with %d anchors, want the second root of two", b.Root.Subject, len(b.Anchors))
	}
	chain, _, err := NewAuthority(b).SignWorkload(ecKey(t).Public(), Identity{"cluster.local", "app", "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(chain[len(chain)-1], "BEGIN CERTIFICATE"); n != 2 || len(chain) != 3 {
		t.Fatalf("answer of %d elements, last with %d roots; want leaf, intermediate, both roots", len(chain), n)
	}
}

// A plugged-in CA moves to an intermediate under another root in Istio's
// three steps: the new root joins root-cert.pem while the old intermediate
// still signs; once every workload has renewed, the new intermediate signs;
// then the old root leaves. Workloads of neighbouring steps complete mTLS
// both ways at every step.
func TestPluggedInRootChangeHandshakes(t *testing.T) {
	_, first := pluggedInCA(t, "first")
	_, second := pluggedInCA(t, "second")
	both := append(append([]byte{}, first[KeyRootCert]...), second[KeyRootCert]...)
	steps := []map[string][]byte{
		first,
		{KeyCACert: first[KeyCACert], KeyCAKey: first[KeyCAKey], KeyCertChain: first[KeyCertChain], KeyRootCert: both},
		{KeyCACert: second[KeyCACert], KeyCAKey: second[KeyCAKey], KeyCertChain: second[KeyCertChain], KeyRootCert: both},
		second,
	}
	var prev *workload
	for i, data := range steps {
		b, err := ParseBundle(data)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		w := issueTo(t, NewAuthority(b), fmt.Sprintf("step-%d", i), fmt.Sprintf("sa%d", i))
		if prev != nil {
			if n, failed := meshHandshakes(t, *prev, w); len(failed) > 0 {
				t.Fatalf("step %d: %d handshakes, failed: %v", i, n, failed)
			}
		}
		prev = &w
	}
}
