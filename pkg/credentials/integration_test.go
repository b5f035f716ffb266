package credentials

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/internal/testenv"
)

// selfSigned returns a PEM certificate and key for host.
func selfSigned(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// On a real kube-apiserver: a kubernetes.io/tls Secret is read with its
// certificate, a renewal is announced and read, and the access check tells
// the admin from a service account without Secret permissions.
func TestKubeOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	env := testenv.Start(t)
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ingress"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cert1, key1 := selfSigned(t, "a.example.com")
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "a-cert", Namespace: "ingress"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{KeyCert: cert1, KeyKey: key1, "unrelated": []byte("x")},
	}
	if _, err := env.Client.CoreV1().Secrets("ingress").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ok, err := CanRead(ctx, env.Client)
	if err != nil || !ok {
		t.Fatalf("CanRead as admin = %v, %v; want true", ok, err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:ingress:nobody"}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := CanRead(ctx, sa); err != nil || ok {
		t.Fatalf("CanRead as a service account without RBAC = %v, %v; want false", ok, err)
	}

	k, err := NewKube(env.Client, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	k.OnChange(rec.add)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = k.Start(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "the informer to sync", k.HasSynced)
	got, ok := k.Get("ingress", "a-cert")
	if !ok || string(got.Cert) != string(cert1) || string(got.Key) != string(key1) {
		t.Fatalf("Get(ingress/a-cert) = ok %v, want the certificate created", ok)
	}

	cert2, key2 := selfSigned(t, "a.example.com")
	sec.Data = map[string][]byte{KeyCert: cert2, KeyKey: key2}
	if _, err := env.Client.CoreV1().Secrets("ingress").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the renewed certificate", func() bool {
		got, _ := k.Get("ingress", "a-cert")
		return string(got.Cert) == string(cert2) && rec.count("ingress/a-cert") >= 2
	})
	if _, err := tlsPair(got); err != nil {
		t.Errorf("the material read is not a usable key pair: %v", err)
	}
}

func tlsPair(m TLS) (tls.Certificate, error) { return tls.X509KeyPair(m.Cert, m.Key) }
