package credentials

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// CertificateState tells a valid certificate from a malformed one, a
// Secret without TLS keys and one that does not exist; unknown before
// the first list; a creation and a deletion are announced to OnPresence.
func TestCertificateState(t *testing.T) {
	crt, key := selfSigned(t, "example.com")
	client := fake.NewSimpleClientset(
		secret("a", "good", corev1.SecretTypeTLS, map[string]string{KeyCert: string(crt), KeyKey: string(key)}),
		secret("a", "malformed", corev1.SecretTypeTLS, map[string]string{KeyCert: "Hello world\n", KeyKey: "Hello world\n"}),
		secret("a", "mismatched", corev1.SecretTypeOpaque, map[string]string{KeyCert: string(crt), KeyKey: string(otherKey(t))}),
		secret("a", "db", corev1.SecretTypeOpaque, map[string]string{"password": "p"}),
	)
	k, err := NewKube(client, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if got := k.CertificateState("a", "good"); got != gatewayapi.CertificateUnknown {
		t.Errorf("before the first list: %v, want unknown", got)
	}
	presence := make(chan string, 4)
	k.OnPresence(func(ns, name string) { presence <- ns + "/" + name })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = k.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), k.HasSynced) {
		t.Fatal("not synced")
	}
	for name, want := range map[string]gatewayapi.CertificateState{
		"good": gatewayapi.CertificateValid, "malformed": gatewayapi.CertificateInvalid,
		"mismatched": gatewayapi.CertificateInvalid, "db": gatewayapi.CertificateInvalid, "none": gatewayapi.CertificateMissing,
	} {
		for range 2 { // the second answer comes from the verdict kept
			if got := k.CertificateState("a", name); got != want {
				t.Errorf("%s: %v, want %v", name, got, want)
			}
		}
	}
	for range 4 {
		<-presence // the listed Secrets
	}
	if err := client.CoreV1().Secrets("a").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := <-presence; got != "a/db" {
		t.Errorf("presence announced %s, want a/db", got)
	}
}

// otherKey is the key of another certificate.
func otherKey(t *testing.T) []byte {
	t.Helper()
	_, key := selfSigned(t, "other.example.com")
	return key
}
