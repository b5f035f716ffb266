package server

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the clients that talk to the test
		// API server and to our server; they close with their transports.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
		goleak.IgnoreAnyFunction("net/http.(*http2clientConnReadLoop).run"),
	)
}

func webhookConfigs(bundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-canary", Labels: map[string]string{"app": "sidecar-injector"}},
	}
	for _, name := range []string{"rev.namespace.sidecar-injector.istio.io", "rev.object.sidecar-injector.istio.io"} {
		m.Webhooks = append(m.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:15017/inject"), CABundle: bundle},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-validator-canary-istio-system"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "rev.validation.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:15017/validate")},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	return m, v
}

type testRoots struct {
	mu      sync.Mutex
	pem     []byte
	changed chan struct{}
}

func (r *testRoots) get() ([]byte, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pem, r.changed
}

func (r *testRoots) set(pem []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pem = pem
	close(r.changed)
	r.changed = make(chan struct{})
}

func TestPatcherChangesOnlyCABundle(t *testing.T) {
	m, v := webhookConfigs([]byte("old root"))
	client := fake.NewClientset(m, v)
	roots := &testRoots{pem: []byte("root one"), changed: make(chan struct{})}
	p, err := NewCABundlePatcher(PatcherOptions{Namespace: "istio-system", Revision: "canary", Resync: time.Hour},
		client, roots.get, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitBundles(t, client, "root one")
	roots.set([]byte("root two"))
	waitBundles(t, client, "root two")

	gotM, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, m.Name, metav1.GetOptions{})
	gotV, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, v.Name, metav1.GetOptions{})
	wantM, wantV := webhookConfigs([]byte("root two"))
	wantV.Webhooks[0].ClientConfig.CABundle = []byte("root two")
	if !equalJSON(gotM.Webhooks, wantM.Webhooks) || !equalJSON(gotM.Labels, wantM.Labels) {
		t.Errorf("mutating config changed beyond caBundle:\n got %s\nwant %s", toJSON(gotM.Webhooks), toJSON(wantM.Webhooks))
	}
	if !equalJSON(gotV.Webhooks, wantV.Webhooks) {
		t.Errorf("validating config changed beyond caBundle:\n got %s\nwant %s", toJSON(gotV.Webhooks), toJSON(wantV.Webhooks))
	}
}

func TestReconcileSkipsMissingConfigsAndRefusesAnEmptyRoot(t *testing.T) {
	client := fake.NewClientset()
	p, err := NewCABundlePatcher(PatcherOptions{Namespace: "istio-system"}, client, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Reconcile(context.Background(), []byte("root")); err != nil {
		t.Fatalf("missing configurations: %v", err)
	}
	if err := p.Reconcile(context.Background(), nil); err == nil {
		t.Fatal("an empty root was accepted")
	}
}

func waitBundles(t *testing.T, client *fake.Clientset, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err1 := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "istio-sidecar-injector-canary", metav1.GetOptions{})
		v, err2 := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "istio-validator-canary-istio-system", metav1.GetOptions{})
		if err1 == nil && err2 == nil && string(m.Webhooks[0].ClientConfig.CABundle) == want &&
			string(m.Webhooks[1].ClientConfig.CABundle) == want && string(v.Webhooks[0].ClientConfig.CABundle) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("caBundles never became %q", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With TagWebhooks the patcher keeps, as istiod does, the caBundle of the
// injector webhooks of every configuration labelled with its revision:
// revision tags have names nobody knew at install time. Other revisions'
// configurations and other webhooks are left alone.
func TestPatcherKeepsTheRevisionsTagWebhooks(t *testing.T) {
	m, v := webhookConfigs([]byte("old root"))
	tag := func(name, rev, hook string) *admissionregistrationv1.MutatingWebhookConfiguration {
		c := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"istio.io/rev": rev, "istio.io/tag": "t"},
		}}
		c.Webhooks = []admissionregistrationv1.MutatingWebhook{{Name: hook, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("old root")}}}
		return c
	}
	ours := tag("istio-revision-tag-prod", "canary", "rev.namespace.sidecar-injector.istio.io")
	theirs := tag("istio-revision-tag-qa", "stable", "rev.namespace.sidecar-injector.istio.io")
	foreign := tag("someone-elses", "canary", "mutate.example.com")
	client := fake.NewClientset(m, v, ours, theirs, foreign)
	p, err := NewCABundlePatcher(PatcherOptions{Namespace: "istio-system", Revision: "canary", Resync: time.Hour, TagWebhooks: true},
		client, (&testRoots{pem: []byte("root one"), changed: make(chan struct{})}).get, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	defer func() { cancel(); <-done }()
	waitBundles(t, client, "root one")
	bundle := func(name string) string {
		c, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		return string(c.Webhooks[0].ClientConfig.CABundle)
	}
	deadline := time.Now().Add(10 * time.Second)
	for bundle(ours.Name) != "root one" {
		if time.Now().After(deadline) {
			t.Fatalf("the revision's tag webhook keeps caBundle %q", bundle(ours.Name))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A tag created later is patched too (the watch brings it).
	later := tag("istio-revision-tag-later", "canary", "rev.object.sidecar-injector.istio.io")
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for bundle(later.Name) != "root one" {
		if time.Now().After(deadline) {
			t.Fatalf("a tag created later keeps caBundle %q", bundle(later.Name))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := bundle(theirs.Name); got != "old root" {
		t.Errorf("another revision's tag got caBundle %q", got)
	}
	if got := bundle(foreign.Name); got != "old root" {
		t.Errorf("a webhook that is not Istio's injector got caBundle %q", got)
	}
}
