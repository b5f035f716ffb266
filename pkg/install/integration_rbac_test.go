package install

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/meshplane/discovery/internal/testenv"
	webhookserver "github.com/meshplane/discovery/pkg/webhook/server"
)

// The chart's ClusterRole lets each revision keep the caBundle of its own
// two webhook configurations and of nothing else. With the default and a
// canary revision installed side by side next to someone else's webhook
// configurations, each revision's ServiceAccount (impersonated) runs the
// caBundle patcher on its own configurations, and is forbidden to patch
// the other revision's, the foreign ones, or to list them all.
func TestChartRBACKeepsEachRevisionToItsOwnWebhookConfigurations(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, err := NewClient(env.Config, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []Input{{Profile: "minimal"}, {Profile: "minimal", Revision: "canary"}} {
		m, err := Render(renderOpts(), in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Apply(ctx, m, ApplyOptions{}); err != nil {
			t.Fatalf("install revision %q: %v", in.Revision, err)
		}
	}
	createForeignWebhooks(ctx, t, env.Client, "someone-elses-webhooks")
	root := selfSignedPEM(t)

	revisions := map[string]struct {
		serviceAccount, revision string
		injector, validator      string
		notOurs                  [2]string // a MutatingWebhookConfiguration and a ValidatingWebhookConfiguration
	}{
		"the default revision": {
			"discovery", "", "istio-sidecar-injector", "istio-validator-istio-system",
			[2]string{"istio-sidecar-injector-canary", "istio-validator-canary-istio-system"},
		},
		"the canary revision": {
			"discovery-canary", "canary", "istio-sidecar-injector-canary", "istio-validator-canary-istio-system",
			[2]string{"istio-sidecar-injector", "istio-validator-istio-system"},
		},
	}
	for name, r := range revisions {
		t.Run(name+" patches only its own configurations", func(t *testing.T) {
			sa := impersonate(t, env.Config, "system:serviceaccount:istio-system:"+r.serviceAccount)
			adm := sa.AdmissionregistrationV1()

			// What the patcher's informers do: list and watch one
			// configuration by name.
			byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", r.injector).String()}
			if _, err := adm.MutatingWebhookConfigurations().List(ctx, byName); err != nil {
				t.Errorf("list its injector configuration by name: %v", err)
			}
			if w, err := adm.MutatingWebhookConfigurations().Watch(ctx, byName); err != nil {
				t.Errorf("watch its injector configuration by name: %v", err)
			} else {
				w.Stop()
			}
			if _, err := adm.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("list every MutatingWebhookConfiguration: %v, want forbidden", err)
			}
			if _, err := adm.ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("list every ValidatingWebhookConfiguration: %v, want forbidden", err)
			}

			runPatcher(ctx, t, sa, webhookserver.PatcherOptions{Namespace: "istio-system", Revision: r.revision}, root)
			waitCABundle(ctx, t, env.Client, r.injector, r.validator, root)

			patch := []byte(`{"metadata":{"annotations":{"test":"patched"}}}`)
			for _, mwc := range []string{r.notOurs[0], "someone-elses-webhooks"} {
				if _, err := adm.MutatingWebhookConfigurations().Patch(ctx, mwc, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
					t.Errorf("patch MutatingWebhookConfiguration %s: %v, want forbidden", mwc, err)
				}
			}
			for _, vwc := range []string{r.notOurs[1], "someone-elses-webhooks"} {
				if _, err := adm.ValidatingWebhookConfigurations().Patch(ctx, vwc, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
					t.Errorf("patch ValidatingWebhookConfiguration %s: %v, want forbidden", vwc, err)
				}
			}
		})
	}
}

// impersonate returns a clientset acting as user, through the admin config.
func impersonate(t *testing.T, admin *rest.Config, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runPatcher runs the caBundle patcher with client until the test ends.
func runPatcher(ctx context.Context, t *testing.T, client kubernetes.Interface, opts webhookserver.PatcherOptions, root []byte) {
	t.Helper()
	var logs bytes.Buffer
	p, err := webhookserver.NewCABundlePatcher(opts, client, func() ([]byte, <-chan struct{}) { return root, nil },
		prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("patcher: %v", err)
		}
		if bytes.Contains(bytes.ToLower(logs.Bytes()), []byte("forbidden")) {
			t.Errorf("the patcher was refused something:\n%s", logs.String())
		}
	})
}

func waitCABundle(ctx context.Context, t *testing.T, admin kubernetes.Interface, injector, validator string, root []byte) {
	t.Helper()
	adm := admin.AdmissionregistrationV1()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := adm.MutatingWebhookConfigurations().Get(ctx, injector, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, err := adm.ValidatingWebhookConfigurations().Get(ctx, validator, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range m.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, root) {
				return false, nil
			}
		}
		for _, w := range v.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, root) {
				return false, nil
			}
		}
		return len(m.Webhooks) > 0 && len(v.Webhooks) > 0, nil
	})
	if err != nil {
		t.Fatalf("the caBundle of %s and %s was not patched: %v", injector, validator, err)
	}
}

// createForeignWebhooks creates a mutating and a validating configuration
// that are not the installer's, whose webhooks match nothing.
func createForeignWebhooks(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	cc := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/hook")}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	nothing := &metav1.LabelSelector{MatchLabels: map[string]string{"matches": "nothing"}}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "hook.example.com", ClientConfig: cc, Rules: rules, ObjectSelector: nothing,
			FailurePolicy: &ignore, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
		}},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "hook.example.com", ClientConfig: cc, Rules: rules, ObjectSelector: nothing,
			FailurePolicy: &ignore, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// selfSignedPEM is a CA certificate to stand for discovery's root.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
