package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/meshplane/discovery/internal/testenv"
	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

// runInBackground runs f until the test ends and waits for it to return.
func runInBackground(t *testing.T, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("background component: %v", err)
		}
	})
}

// namespaceInformer runs, until t ends, the Namespace informer that the
// process shares with the root publisher.
func namespaceInformer(t *testing.T, client kubernetes.Interface) cache.SharedIndexInformer {
	t.Helper()
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Core().V1().Namespaces().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		f.Shutdown()
	})
	return inf
}

func createNamespace(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	_, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func serviceAccountToken(t *testing.T, client kubernetes.Interface, ns, sa, audience string) string {
	t.Helper()
	_, err := client.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func TestOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	t.Run("a service account's token buys a certificate that verifies against the published root", func(t *testing.T) {
		testIssueOnAPIServer(t, env.Client)
	})
	t.Run("two replicas started together end with one and the same root", func(t *testing.T) {
		testReplicasShareRoot(t, env.Client)
	})
	t.Run("plugged-in cacerts chain leaf to intermediate to root and a change is picked up", func(t *testing.T) {
		testPluggedIn(t, env.Client)
	})
	t.Run("a flood of junk tokens and calls without credentials leaves valid callers their certificates", func(t *testing.T) {
		testFloodOnAPIServer(t, env)
	})
	t.Run("the root rotates by cross-signing with no failed handshake and no restart", func(t *testing.T) {
		testRootRotation(t, env.Client)
	})
	// Last: it takes the API server away.
	t.Run("renewals by client certificate go on while the API server is down", func(t *testing.T) {
		testAPIServerOutage(t, env)
	})
}

func testAPIServerOutage(t *testing.T, env *testenv.Env) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	createNamespace(t, env.Client, "outage")
	o := DefaultOptions()
	o.Namespace = "outage"
	logs := &logBuffer{}
	c, err := New(t.Context(), o, env.Client, newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, c.Start)
	addr := serve(t, c)
	token := serviceAccountToken(t, env.Client, "outage", "worker", "istio-ca")
	id := "spiffe://cluster.local/ns/outage/sa/worker"
	key := ecKey(t)
	first, err := dial(t, addr, c.RootPEM(), "outage", nil).CreateCertificate(ctxWithToken(t.Context(), token),
		&pb.IstioCertificateRequest{Csr: string(makeCSR(t, key, csrSpec{uris: []string{id}}))})
	if err != nil {
		t.Fatal(err)
	}

	env.StopAPIServer(t)
	renewer := dial(t, addr, c.RootPEM(), "outage", issuedTLSCert(t, first.CertChain, key))
	resp, err := renewer.CreateCertificate(t.Context(), &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{id}}))})
	if err != nil {
		t.Fatalf("renewal by client certificate without an API server: %v", err)
	}
	verifyLeaf(t, parseChain(t, resp.CertChain), c.authority.Bundle().Root, id, 24*time.Hour)
	// A new token cannot be reviewed: refused as unauthenticated, promptly
	// (JWT-shaped, so it is not refused before asking).
	start := time.Now()
	_, err = dial(t, addr, c.RootPEM(), "outage", nil).CreateCertificate(ctxWithToken(t.Context(), jwt(time.Now().Add(time.Hour))),
		&pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{id}}))})
	if status.Code(err) != codes.Unauthenticated || time.Since(start) > reviewTimeout+5*time.Second {
		t.Fatalf("unreviewable token: %v after %s, want Unauthenticated within the review timeout", err, time.Since(start))
	}
	env.StartAPIServer(t)
}

func testIssueOnAPIServer(t *testing.T, client kubernetes.Interface) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	createNamespace(t, client, "istio-system")
	createNamespace(t, client, "app")
	createNamespace(t, client, "kube-system")
	logs := &logBuffer{}
	o := DefaultOptions()
	c, err := New(t.Context(), o, client, newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, c.Start)
	pub, err := c.NewRootPublisher(namespaceInformer(t, client))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, pub.Start)

	cms := client.CoreV1().ConfigMaps("app")
	var root []byte
	waitFor(t, 30*time.Second, "istio-ca-root-cert in namespace app", func() bool {
		cm, err := cms.Get(t.Context(), RootConfigMap, metav1.GetOptions{})
		if err != nil {
			return false
		}
		root = []byte(cm.Data[RootConfigMapKey])
		return true
	})
	roots, err := parseCerts(root)
	if err != nil || len(roots) != 1 {
		t.Fatalf("published root: %d certificates, %v", len(roots), err)
	}

	token := serviceAccountToken(t, client, "app", "sleep", "istio-ca")
	id := "spiffe://cluster.local/ns/app/sa/sleep"
	pc := dial(t, serve(t, c), root, "istio-system", nil)
	resp, err := pc.CreateCertificate(ctxWithToken(t.Context(), token), &pb.IstioCertificateRequest{
		Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{id}})), ValidityDuration: 86400,
	})
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, parseChain(t, resp.CertChain), roots[0], id, 24*time.Hour)

	other := serviceAccountToken(t, client, "app", "sleep", "vault")
	_, err = pc.CreateCertificate(ctxWithToken(t.Context(), other), &pb.IstioCertificateRequest{
		Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{id}})),
	})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("token for audience vault: %v, want Unauthenticated", err)
	}
	for _, tok := range []string{token, other} {
		if containsString(logs.String(), tok) {
			t.Fatal("a token reached the log")
		}
	}

	if err := cms.Delete(t.Context(), RootConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "istio-ca-root-cert recreated after deletion", func() bool {
		cm, err := cms.Get(t.Context(), RootConfigMap, metav1.GetOptions{})
		return err == nil && cm.Data[RootConfigMapKey] == string(root)
	})
	if _, err := client.CoreV1().ConfigMaps("kube-system").Get(t.Context(), RootConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("kube-system got the root ConfigMap: %v", err)
	}
}

func testReplicasShareRoot(t *testing.T, client kubernetes.Interface) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	createNamespace(t, client, "race")
	o := DefaultOptions()
	o.Namespace = "race"
	var wg sync.WaitGroup
	start := make(chan struct{})
	cas := make([]*CA, 2)
	errs := make([]error, 2)
	for i := range cas {
		wg.Go(func() {
			<-start
			cas[i], errs[i] = New(t.Context(), o, client, newLogger(&logBuffer{}), nil)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	r0, r1 := cas[0].authority.Bundle().Root, cas[1].authority.Bundle().Root
	if !r0.Equal(r1) {
		t.Fatalf("replicas have different roots: %x and %x", r0.SerialNumber, r1.SerialNumber)
	}
	s, err := client.CoreV1().Secrets("race").Get(t.Context(), SecretSelfSigned, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ParseBundle(s.Data)
	if err != nil || !stored.Root.Equal(r0) {
		t.Fatalf("istio-ca-secret holds another root (%v)", err)
	}
	// A restart reads the same root again.
	again, err := New(t.Context(), o, client, newLogger(&logBuffer{}), nil)
	if err != nil || !again.authority.Bundle().Root.Equal(r0) {
		t.Fatalf("restarted replica: %v, same root %v", err, err == nil && again.authority.Bundle().Root.Equal(r0))
	}
}

func testPluggedIn(t *testing.T, client kubernetes.Interface) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	createNamespace(t, client, "plugged")
	secrets := client.CoreV1().Secrets("plugged")
	root, data := pluggedInCA(t, "first")
	if _, err := secrets.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretPluggedIn}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Namespace = "plugged"
	c, err := New(t.Context(), o, client, newLogger(&logBuffer{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, c.Start)
	key := ecKey(t)
	chain, _, err := c.authority.SignWorkload(key.Public(), Identity{"cluster.local", "app", "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certs := parseChain(t, chain)
	if len(certs) != 3 || certs[1].Subject.CommonName != "first intermediate" {
		t.Fatalf("chain of %d certificates, want leaf, intermediate, root", len(certs))
	}
	verifyLeaf(t, certs, root, idA, time.Hour)

	// Over TLS: the serving certificate chains through the intermediate too.
	pc := dial(t, serve(t, c), c.RootPEM(), "plugged", nil)
	if _, err := pc.CreateCertificate(t.Context(), &pb.IstioCertificateRequest{Csr: string(makeCSR(t, key, csrSpec{uris: []string{idA}}))}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credential: %v", err)
	}

	newRoot, newData := pluggedInCA(t, "second")
	s, err := secrets.Get(t.Context(), SecretPluggedIn, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = newData
	if _, err := secrets.Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the CA to pick up the changed cacerts", func() bool {
		return c.authority.Bundle().Root.Equal(newRoot)
	})
	waitFor(t, 30*time.Second, "a serving certificate from the new CA", func() bool {
		cur, _ := c.serving.getCertificate(nil)
		return cur.Leaf.CheckSignatureFrom(c.authority.Bundle().Cert) == nil
	})
}

// pluggedInCA makes a root and an intermediate as an operator would and
// returns the root and the cacerts data.
func pluggedInCA(t *testing.T, name string) (*x509.Certificate, map[string][]byte) {
	t.Helper()
	rootKey, interKey := ecKey(t), ecKey(t)
	root := caCert(t, name+" root", nil, nil, rootKey)
	inter := caCert(t, name+" intermediate", root, rootKey, interKey)
	der, err := x509.MarshalPKCS8PrivateKey(interKey)
	if err != nil {
		t.Fatal(err)
	}
	p := func(c *x509.Certificate) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return root, map[string][]byte{
		KeyCACert:    p(inter),
		KeyCAKey:     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		KeyCertChain: append(p(inter), p(root)...),
		KeyRootCert:  p(root),
	}
}

func caCert(t *testing.T, cn string, parent *x509.Certificate, parentKey, key crypto.Signer) *x509.Certificate {
	t.Helper()
	serial, _ := newSerial()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testRootRotation rotates the self-signed root with `discovery ca rotate`'s
// code on a running CA: workloads get their certificates over gRPC with
// service-account tokens, as pilot-agent does, and connect to the CA with
// the root ConfigMap they were given. At each step every pair of workloads
// that can meet completes mTLS both ways, and every generation of
// pilot-agent still reaches the CA.
func testRootRotation(t *testing.T, client kubernetes.Interface) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	createNamespace(t, client, "rotate")
	createNamespace(t, client, "rotapp")
	o := DefaultOptions()
	o.Namespace = "rotate"
	c, err := New(t.Context(), o, client, newLogger(&logBuffer{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, c.Start)
	pub, err := c.NewRootPublisher(namespaceInformer(t, client))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, pub.Start)
	addr := serve(t, c)
	published := func(n int) []byte {
		var root []byte
		waitFor(t, 30*time.Second, fmt.Sprintf("istio-ca-root-cert in rotapp with %d roots", n), func() bool {
			cm, err := client.CoreV1().ConfigMaps("rotapp").Get(t.Context(), RootConfigMap, metav1.GetOptions{})
			if err != nil {
				return false
			}
			root = []byte(cm.Data[RootConfigMapKey])
			certs, err := parseCerts(root)
			return err == nil && len(certs) == n && bytes.Equal(root, c.RootPEM())
		})
		return root
	}
	issue := func(name string, caRoot []byte) workload {
		t.Helper()
		id := "spiffe://cluster.local/ns/rotapp/sa/" + name
		key := ecKey(t)
		resp, err := dial(t, addr, caRoot, "rotate", nil).CreateCertificate(
			ctxWithToken(t.Context(), serviceAccountToken(t, client, "rotapp", name, "istio-ca")),
			&pb.IstioCertificateRequest{Csr: string(makeCSR(t, key, csrSpec{uris: []string{id}})), ValidityDuration: 3600})
		if err != nil {
			t.Fatalf("%s: the CA, reached with the root ConfigMap of its time: %v", name, err)
		}
		return newWorkload(t, name, id, resp.CertChain, key)
	}
	handshakes := 0
	mesh := func(step string, ws ...workload) {
		t.Helper()
		n, failed := meshHandshakes(t, ws...)
		handshakes += n
		if len(failed) > 0 {
			t.Fatalf("%s: failed handshakes: %v", step, failed)
		}
	}

	rootBefore := published(1)
	w0 := issue("w0", rootBefore)

	st, err := RotateRoot(t.Context(), client, RotateOptions{Namespace: "rotate", Overlap: 24 * time.Hour})
	if err != nil || st.Step != "started" || len(st.Roots) != 2 {
		t.Fatalf("start: %+v, %v", st, err)
	}
	waitFor(t, 30*time.Second, "the CA to sign through the cross-signed root", func() bool {
		_, ok := c.authority.Bundle().Rotating()
		return ok
	})
	rootDuring := published(2)
	// A pilot-agent that still has the old ConfigMap reaches the CA.
	waitFor(t, 30*time.Second, "a serving certificate under the new key", func() bool {
		cur, _ := c.serving.getCertificate(nil)
		return cur.Leaf.CheckSignatureFrom(c.authority.Bundle().Cert) == nil
	})
	w1 := issue("w1", rootBefore)
	mesh("started", w0, w1)

	if _, err := RotateRoot(t.Context(), client, RotateOptions{Namespace: "rotate", Overlap: 24 * time.Hour, Finish: true}); err == nil || !strings.Contains(err.Error(), "overlap has not passed") {
		t.Fatalf("finish within the overlap: %v", err)
	}
	later := func() time.Time { return time.Now().Add(25 * time.Hour) }
	st, err = RotateRoot(t.Context(), client, RotateOptions{Namespace: "rotate", Overlap: 24 * time.Hour, Finish: true, Now: later})
	if err != nil || st.Step != "finished" || len(st.Roots) != 1 {
		t.Fatalf("finish: %+v, %v", st, err)
	}
	waitFor(t, 30*time.Second, "the CA to sign with the new root alone", func() bool {
		return c.authority.Bundle().SelfSigned() && !c.authority.Bundle().Root.Equal(parseRoot(t, rootBefore))
	})
	published(1)
	waitFor(t, 30*time.Second, "a serving certificate under the new root", func() bool {
		cur, _ := c.serving.getCertificate(nil)
		return cur.Leaf.CheckSignatureFrom(c.authority.Bundle().Cert) == nil
	})
	// A pilot-agent with the ConfigMap of the start step reaches the CA.
	w2 := issue("w2", rootDuring)
	mesh("finished", w1, w2)
	t.Logf("root rotation: %d mTLS handshakes between workloads of neighbouring steps, 0 failed", handshakes)
}

func parseRoot(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	certs, err := parseCerts(p)
	if err != nil || len(certs) == 0 {
		t.Fatalf("root: %v", err)
	}
	return certs[0]
}
