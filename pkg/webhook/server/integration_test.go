package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/webhook/inject"
	"github.com/meshplane/discovery/pkg/webhook/validate"
)

const istioNS = "istio-system"

// TestWebhooksOnARealAPIServer registers both webhook configurations with
// a url to our loopback server and an empty caBundle, lets the patcher
// fill the caBundle, and checks what the API server stores.
func TestWebhooksOnARealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testLogWriter{t}, nil))
	mustCreateNamespace(ctx, t, env.Client, istioNS, nil)
	mustCreateNamespace(ctx, t, env.Client, "mesh", map[string]string{inject.NamespaceInjectionLabel: "enabled"})
	mustCreateNamespace(ctx, t, env.Client, "plain", nil)
	createInjectorConfigMap(ctx, t, env.Client)

	inj, err := inject.New(inject.Options{Namespace: istioNS}, env.Client, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	val, err := validate.New(prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t)
	base := runServer(t, ca, inj.Handler(), val.Handler())
	patcher, err := NewCABundlePatcher(PatcherOptions{Namespace: istioNS, Resync: time.Minute}, env.Client,
		func() ([]byte, <-chan struct{}) { return ca.rootPEM, nil }, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	// The injector's ConfigMap informer, as discovery serve builds it.
	injOpts := inject.Options{Namespace: istioNS}
	cmf := informers.NewSharedInformerFactoryWithOptions(env.Client, 0,
		informers.WithNamespace(istioNS), informers.WithTweakListOptions(injOpts.ConfigMapListOptions))
	inj.SetInformers(inject.Informers{ConfigMap: cmf.Core().V1().ConfigMaps().Informer()})
	runInBackground(t, func(ctx context.Context) error {
		cmf.Start(ctx.Done())
		<-ctx.Done()
		cmf.Shutdown()
		return nil
	})
	runInBackground(t, inj.Start)
	runInBackground(t, patcher.Start)
	poll(t, "the injector loads its ConfigMap", func() (bool, string) {
		return strings.Contains(inj.Current().Source, "ConfigMap"), inj.Current().Source
	})

	registerWebhooks(ctx, t, env.Client, base)
	poll(t, "the patcher sets the caBundles", func() (bool, string) { return bundlesAre(ctx, env.Client, ca.rootPEM) })
	checkOnlyCABundleChanged(ctx, t, env.Client, base)

	t.Run("a Pod in a labelled namespace is stored with istio-proxy", func(t *testing.T) {
		pod := createPodWhenWebhookAnswers(ctx, t, env.Client, "mesh")
		if !hasContainer(pod.Spec.Containers, inject.ProxyContainerName) || !hasContainer(pod.Spec.InitContainers, inject.InitContainerName) {
			t.Fatalf("stored pod lacks istio-proxy/istio-init: containers %v, init %v", names(pod.Spec.Containers), names(pod.Spec.InitContainers))
		}
		if img := pod.Spec.Containers[1].Image; img != "registry.test/proxyv2:9.9.9" {
			t.Errorf("istio-proxy image %q: the ConfigMap's values were not used", img)
		}
		if pod.Annotations["sidecar.istio.io/status"] == "" || pod.Spec.Containers[0].Name != "app" {
			t.Errorf("stored pod: annotations %v, first container %q", pod.Annotations, pod.Spec.Containers[0].Name)
		}
	})
	t.Run("the API server accepts each template's output", func(t *testing.T) {
		checkTemplatesAccepted(ctx, t, env.Client)
	})
	t.Run("a Pod in an unlabelled namespace is stored untouched", func(t *testing.T) {
		pod, err := env.Client.CoreV1().Pods("plain").Create(ctx, testPod(), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) != 0 || pod.Annotations["sidecar.istio.io/status"] != "" {
			t.Fatalf("pod in an unlabelled namespace was changed: %v %v %v", names(pod.Spec.Containers), names(pod.Spec.InitContainers), pod.Annotations)
		}
	})
	t.Run("an invalid VirtualService is refused with our message", func(t *testing.T) {
		checkVirtualServices(ctx, t, env)
	})
}

// checkTemplatesAccepted creates a native-sidecar pod, a gateway pod and a
// proxyless gRPC pod: the API server validates what each template added.
func checkTemplatesAccepted(ctx context.Context, t *testing.T, c kubernetes.Interface) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	native := testPod()
	native.Annotations = map[string]string{"sidecar.istio.io/nativeSidecar": "true"}
	got, err := c.CoreV1().Pods("mesh").Create(ctx, native, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("native sidecar pod: %v", err)
	}
	init := got.Spec.InitContainers
	if len(init) != 2 || init[1].Name != inject.ProxyContainerName || init[1].RestartPolicy == nil ||
		*init[1].RestartPolicy != corev1.ContainerRestartPolicyAlways || hasContainer(got.Spec.Containers, inject.ProxyContainerName) {
		t.Errorf("native sidecar pod stored with init containers %v and containers %v", names(init), names(got.Spec.Containers))
	}

	gw := testPod()
	gw.Annotations = map[string]string{"inject.istio.io/templates": "gateway"}
	gw.Spec.Containers = []corev1.Container{{Name: inject.ProxyContainerName, Image: "auto"}}
	got, err = c.CoreV1().Pods("mesh").Create(ctx, gw, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("gateway pod: %v", err)
	}
	if img := got.Spec.Containers[0].Image; img != "registry.test/proxyv2:9.9.9" || got.Spec.Containers[0].Args[1] != "router" {
		t.Errorf("gateway pod stored with image %q and args %v", img, got.Spec.Containers[0].Args)
	}

	grpc := testPod()
	grpc.Annotations = map[string]string{"inject.istio.io/templates": "grpc-agent"}
	got, err = c.CoreV1().Pods("mesh").Create(ctx, grpc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("grpc-agent pod: %v", err)
	}
	if len(got.Spec.InitContainers) != 0 || len(got.Spec.Containers) != 2 || len(got.Spec.Containers[0].Env) == 0 {
		t.Errorf("grpc-agent pod stored with init %v, containers %v", names(got.Spec.InitContainers), names(got.Spec.Containers))
	}
}

func checkVirtualServices(ctx context.Context, t *testing.T, env *testenv.Env) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	kubetest.InstallCRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config), model.KindVirtualService)
	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = warnings
	vs := dynamic.NewForConfigOrDie(cfg).Resource(model.KindVirtualService.GroupVersionResource()).Namespace("mesh")
	// Without hosts it is a delegate, which may have http routes only.
	invalid := virtualService("delegate-with-tcp", map[string]any{"tcp": []any{route("reviews")}})
	var last error
	poll(t, "the API server refuses a delegate VirtualService with tcp routes", func() (bool, string) {
		_, last = vs.Create(ctx, invalid, metav1.CreateOptions{})
		if last == nil { // created before the webhook was in force: try again
			_ = vs.Delete(ctx, "delegate-with-tcp", metav1.DeleteOptions{})
			return false, "created"
		}
		return strings.Contains(last.Error(), "must have no tcp routes"), last.Error()
	})
	if !strings.Contains(last.Error(), "admission webhook") {
		t.Errorf("refusal does not come from the webhook: %v", last)
	}
	// The VirtualService that once stopped the mesh (issue 13): a CR/LF in
	// a header match name and in a header value it sets, which Envoy
	// refuses. The webhook refuses it, naming both fields.
	crlf := virtualService("crlf", map[string]any{
		"hosts": []any{"reviews"},
		"http": []any{map[string]any{
			"match":   []any{map[string]any{"headers": map[string]any{"x-a\r\nb": map[string]any{"exact": "1"}}}},
			"headers": map[string]any{"request": map[string]any{"set": map[string]any{"x-b": "v\r\nInjected: 1"}}},
			"route":   []any{map[string]any{"destination": map[string]any{"host": "reviews"}}},
		}},
	})
	_, err := vs.Create(ctx, crlf, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), "is not a header name") ||
		!strings.Contains(err.Error(), "headers.request.set.x-b: control character") {
		t.Errorf("a VirtualService with CR/LF in header names and values: %v; want the webhook's refusal naming both", err)
	}
	// Valid, but with a field the generator does not act on yet: stored,
	// with a warning the client sees.
	valid := virtualService("with-stat-prefix", map[string]any{
		"hosts": []any{"reviews"},
		"http": []any{map[string]any{
			"match": []any{map[string]any{"statPrefix": "web"}},
			"route": []any{map[string]any{"destination": map[string]any{"host": "reviews"}}},
		}},
	})
	if _, err := vs.Create(ctx, valid, metav1.CreateOptions{}); err != nil {
		t.Fatalf("valid VirtualService refused: %v", err)
	}
	if !warnings.has("statPrefix: this field is not supported by discovery yet") {
		t.Errorf("no warning about statPrefix; warnings: %q", warnings.all())
	}
}

func createInjectorConfigMap(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	cfg, err := inject.DefaultConfigYAML()
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector", Namespace: istioNS},
		Data: map[string]string{
			inject.ConfigKey: string(cfg),
			inject.ValuesKey: `{"global":{"hub":"registry.test","tag":"9.9.9"}}`,
		},
	}
	if _, err := c.CoreV1().ConfigMaps(istioNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func registerWebhooks(ctx context.Context, t *testing.T, c kubernetes.Interface, base string) {
	t.Helper()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "namespace.sidecar-injector.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + "/inject")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("", "v1", "pods", admissionregistrationv1.Create)},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{inject.NamespaceInjectionLabel: "enabled"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-validator-" + istioNS},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "rev.validation.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + "/validate")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule(model.GroupNetworking, "*", "*", admissionregistrationv1.Create, admissionregistrationv1.Update)},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func rule(group, version, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}},
	}
}

func bundlesAre(ctx context.Context, c kubernetes.Interface, root []byte) (bool, string) {
	m, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	v, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "istio-validator-"+istioNS, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	ok := string(m.Webhooks[0].ClientConfig.CABundle) == string(root) && string(v.Webhooks[0].ClientConfig.CABundle) == string(root)
	return ok, "caBundles not yet patched"
}

// checkOnlyCABundleChanged compares what the API server holds with what
// was registered, caBundle aside.
func checkOnlyCABundleChanged(ctx context.Context, t *testing.T, c kubernetes.Interface, base string) {
	t.Helper()
	m, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := m.Webhooks[0]
	if *w.FailurePolicy != admissionregistrationv1.Fail || *w.ClientConfig.URL != base+"/inject" || len(m.Webhooks) != 1 ||
		w.NamespaceSelector.MatchLabels[inject.NamespaceInjectionLabel] != "enabled" {
		t.Errorf("the patcher changed more than caBundle: %+v", w)
	}
	for _, f := range m.ManagedFields {
		if f.Manager == fieldManager && f.FieldsV1 != nil && strings.Contains(string(f.FieldsV1.Raw), "failurePolicy") {
			t.Errorf("the patcher owns failurePolicy: %s", f.FieldsV1.Raw)
		}
	}
}

func createPodWhenWebhookAnswers(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	poll(t, "the injection webhook answers", func() (bool, string) {
		var err error
		pod, err = c.CoreV1().Pods(ns).Create(ctx, testPod(), metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "failed calling webhook") {
			t.Fatalf("create pod: %v", err)
		}
		if err != nil {
			return false, err.Error() // the API server may still hold the config without caBundle
		}
		return true, ""
	})
	return pod
}

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			// Set by the ServiceAccount admission plugin in a real cluster;
			// the projected istio-token volume needs it.
			ServiceAccountName: "default",
			Containers:         []corev1.Container{{Name: "app", Image: "example/app:1"}},
		},
	}
}

func virtualService(name string, spec map[string]any) *unstructured.Unstructured {
	gvk := model.KindVirtualService.GroupVersionKind()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind})
	u.SetName(name)
	return u
}

func route(host string) map[string]any {
	return map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": host}}}}
}

func mustCreateNamespace(ctx context.Context, t *testing.T, c kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func hasContainer(cs []corev1.Container, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}

func names(cs []corev1.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func runInBackground(t *testing.T, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("component: %v", err)
		}
	})
}

func poll(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s (last: %s)", what, detail)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type warningRecorder struct {
	mu   sync.Mutex
	list []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

func (w *warningRecorder) has(s string) bool {
	for _, x := range w.all() {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
