package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t testing.TB) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func namespaces() []runtime.Object {
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh", Labels: map[string]string{NamespaceInjectionLabel: "enabled"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
	}
}

func newTestInjector(t testing.TB, objs ...runtime.Object) (*Injector, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	i, err := New(Options{Namespace: "istio-system"}, fake.NewClientset(objs...), reg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return i, reg
}

func podReview(t testing.TB, ns string, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("req-1"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: ns, Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: raw},
		},
	}
	b, _ := json.Marshal(review)
	return b
}

func appPod(labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example/app:1"}}},
	}
}

func post(t testing.TB, h http.Handler, body []byte) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	out, _ := io.ReadAll(res.Body)
	return res, out
}

func decodeResponse(t testing.TB, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil || r.Response == nil {
		t.Fatalf("response is not an AdmissionReview with a response: %v: %s", err, body)
	}
	if r.Response.UID != "req-1" {
		t.Fatalf("response UID %q does not echo the request", r.Response.UID)
	}
	return r.Response
}

func TestHandlerInjectsAPodInALabelledNamespace(t *testing.T) {
	i, _ := newTestInjector(t, namespaces()...)
	pod := appPod(map[string]string{"app": "web"})
	res, body := post(t, i.Handler(), podReview(t, "mesh", pod))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	resp := decodeResponse(t, body)
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response = %+v, want an allowed JSONPatch", resp)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(pod)
	patched, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("apply patch: %v", err)
	}
	got := &corev1.Pod{}
	if err := json.Unmarshal(patched, got); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, c := range got.Spec.Containers {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "app,istio-proxy" {
		t.Errorf("containers after patch = %v, want app,istio-proxy", names)
	}
	if got.Namespace != "" {
		t.Errorf("the patch set the namespace to %q; the API server does that", got.Namespace)
	}
	if v := testutil.ToFloat64(i.metrics.success); v != 1 {
		t.Errorf("sidecar_injection_success_total = %v", v)
	}
}

func TestHandlerLeavesAnUnlabelledNamespaceAlone(t *testing.T) {
	i, _ := newTestInjector(t, namespaces()...)
	res, body := post(t, i.Handler(), podReview(t, "plain", appPod(nil)))
	resp := decodeResponse(t, body)
	if res.StatusCode != http.StatusOK || !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("status %d response %+v, want allowed without a patch", res.StatusCode, resp)
	}
	if v := testutil.ToFloat64(i.metrics.skips); v != 1 {
		t.Errorf("sidecar_injection_skip_total = %v", v)
	}
}

func TestHandlerDeniesWhenTheTemplateFails(t *testing.T) {
	i, _ := newTestInjector(t, namespaces()...)
	// Renders for the probe pod, fails for a pod labelled fail=yes.
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector", Namespace: "istio-system", ResourceVersion: "7"},
		Data: map[string]string{ConfigKey: `templates:
  sidecar: |
    {{ if eq (index .ObjectMeta.Labels "fail") "yes" }}{{ .Values.no.such.value }}{{ end }}
    spec:
      containers:
      - name: istio-proxy
        image: proxy
`},
	}
	if err := i.Load(cm); err != nil {
		t.Fatal(err)
	}
	_, body := post(t, i.Handler(), podReview(t, "mesh", appPod(map[string]string{"fail": "yes"})))
	resp := decodeResponse(t, body)
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, `template "sidecar"`) {
		t.Fatalf("response = %+v, want a denial naming the template", resp)
	}
	if v := testutil.ToFloat64(i.metrics.failures.WithLabelValues(failInject)); v != 1 {
		t.Errorf("sidecar_injection_failure_total{type=inject} = %v", v)
	}
}

func TestHandlerRefusesMalformedRequests(t *testing.T) {
	i, _ := newTestInjector(t, namespaces()...)
	h := i.Handler()
	valid := podReview(t, "mesh", appPod(nil))
	cases := map[string]struct {
		method, contentType string
		body                []byte
		code                int
		message             string
	}{
		"bad JSON":                 {body: []byte(`{"apiVersion":`), code: 400, message: "not an AdmissionReview"},
		"an empty body":            {body: nil, code: 400, message: "empty"},
		"a review of v1beta1":      {body: bytes.Replace(valid, []byte(`admission.k8s.io/v1"`), []byte(`admission.k8s.io/v1beta1"`), 1), code: 400, message: "not admission.k8s.io/v1 AdmissionReview"},
		"a review with no request": {body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), code: 400, message: "no request"},
		"a request for a Deployment": {
			body: bytes.Replace(valid, []byte(`"kind":"Pod"`), []byte(`"kind":"Deployment","group":"apps"`), 1), code: 400, message: "takes Pods",
		},
		"a request without an object": {
			body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE"}}`),
			code: 400, message: "no object",
		},
		"a body over 10 MiB":  {body: append(append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), 10<<20)...), '"', '}'), code: 400, message: "over the limit"},
		"a YAML content type": {contentType: "application/yaml", body: valid, code: 400, message: "content type"},
		"a GET":               {method: http.MethodGet, body: nil, code: 405, message: "POST"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			method, ct := tc.method, tc.contentType
			if method == "" {
				method = http.MethodPost
			}
			if ct == "" {
				ct = "application/json"
			}
			req := httptest.NewRequest(method, "/inject", bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", ct)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.message) {
				t.Fatalf("got %d %q, want %d with %q", rec.Code, rec.Body.String(), tc.code, tc.message)
			}
		})
	}
	// And it keeps serving.
	res, body := post(t, h, valid)
	if res.StatusCode != http.StatusOK || !decodeResponse(t, body).Allowed {
		t.Fatalf("a valid request after the malformed ones failed: %d %s", res.StatusCode, body)
	}
	if v := testutil.ToFloat64(i.metrics.failures.WithLabelValues(failRequest)); v != float64(len(cases)) {
		t.Errorf("sidecar_injection_failure_total{type=request} = %v, want %d", v, len(cases))
	}
}

func TestHandlerTurnsAPanicInto500(t *testing.T) {
	i, _ := newTestInjector(t, namespaces()...)
	i.snap.Store(nil) // the handler dereferences the snapshot: a bug it must survive
	res, _ := post(t, i.Handler(), podReview(t, "mesh", appPod(nil)))
	if res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", res.StatusCode)
	}
	if v := testutil.ToFloat64(i.metrics.failures.WithLabelValues(failPanic)); v != 1 {
		t.Errorf("sidecar_injection_failure_total{type=panic} = %v", v)
	}
}

func TestWatcherReloadsAndKeepsTheLastGoodConfig(t *testing.T) {
	good := func(rv, image string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector", Namespace: "istio-system", ResourceVersion: rv},
			Data: map[string]string{
				ConfigKey: "templates:\n  sidecar: |\n    spec:\n      containers:\n      - name: istio-proxy\n        image: " + image + "\n",
				ValuesKey: `{"global":{"hub":"example"}}`,
			},
		}
	}
	client := fake.NewClientset(append(namespaces(), good("1", "proxy:one"))...)
	i, err := New(Options{Namespace: "istio-system"}, client, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	withInformers(t, i, client, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- i.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	cms := client.CoreV1().ConfigMaps("istio-system")
	eventually(t, "the ConfigMap is loaded", func() bool { return strings.Contains(i.Current().Source, "istio-sidecar-injector") })

	broken := good("2", "proxy:two")
	broken.Data[ConfigKey] = "templates:\n  sidecar: '{{ .Values.no.such }}'\n"
	if _, err := cms.Update(ctx, broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the broken config is refused", func() bool { return debugJSON(t, i)["lastError"] != nil })
	if !strings.Contains(i.Current().Config.Templates["sidecar"], "proxy:one") {
		t.Fatal("the refused config replaced the last good one")
	}
	if _, err := cms.Update(ctx, good("3", "proxy:three"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the fixed config is loaded", func() bool {
		return strings.Contains(i.Current().Config.Templates["sidecar"], "proxy:three")
	})
	if v := debugJSON(t, i); v["lastError"] != nil || !strings.Contains(v["source"].(string), "resourceVersion 3") {
		t.Errorf("/debug/inject after the fix = %v", v)
	}
}

func debugJSON(t testing.TB, i *Injector) map[string]any {
	t.Helper()
	mux := http.NewServeMux()
	i.RegisterDebug(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/inject", nil))
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("/debug/inject: %v: %s", err, rec.Body.String())
	}
	return v
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzInjectHandler feeds arbitrary bodies to /inject: the handler answers
// 200 with an AdmissionReview that echoes the UID, or 400, never 500.
func FuzzInjectHandler(f *testing.F) {
	f.Add(podReview(f, "mesh", appPod(map[string]string{"app": "x"})))
	f.Add(podReview(f, "plain", appPod(nil)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"mesh","object":{"metadata":{"annotations":{"sidecar.istio.io/proxyCPU":"x"}}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"mesh","object":[]}}`))
	f.Add([]byte(`null`))
	i, err := New(Options{Namespace: "istio-system"}, fake.NewClientset(namespaces()...), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	h := i.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusBadRequest:
		case http.StatusOK:
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("200 without an AdmissionReview response: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	})
}

func TestMetricsUseIstioNames(t *testing.T) {
	i, reg := newTestInjector(t, namespaces()...)
	post(t, i.Handler(), podReview(t, "mesh", appPod(nil)))
	post(t, i.Handler(), podReview(t, "plain", appPod(nil)))
	post(t, i.Handler(), []byte("{"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
	}
	for _, name := range []string{
		"sidecar_injection_requests_total", "sidecar_injection_success_total", "sidecar_injection_failure_total",
		"sidecar_injection_skip_total", "sidecar_injection_time_seconds",
	} {
		if !got[name] {
			t.Errorf("metric %s is missing (have %v)", name, got)
		}
	}
	if v := testutil.ToFloat64(i.metrics.requests); v != 3 {
		t.Errorf("sidecar_injection_requests_total = %v, want 3", v)
	}
}

// withInformers gives i, as the process does, its ConfigMap informer and,
// with tags, its tag-webhook informer, run from client until t ends.
func withInformers(t *testing.T, i *Injector, client kubernetes.Interface, tags bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmf := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(i.opts.Namespace), informers.WithTweakListOptions(i.opts.ConfigMapListOptions))
	inf := Informers{ConfigMap: cmf.Core().V1().ConfigMaps().Informer()}
	cmf.Start(ctx.Done())
	t.Cleanup(cmf.Shutdown)
	if tags {
		tf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(TagListOptions))
		inf.Tags = tf.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()
		tf.Start(ctx.Done())
		t.Cleanup(tf.Shutdown)
	}
	t.Cleanup(cancel)
	i.SetInformers(inf)
}
