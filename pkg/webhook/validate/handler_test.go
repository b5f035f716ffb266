package validate

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func review(t testing.TB, doc string) []byte {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "u1",
			Kind:      metav1.GroupVersionKind{Group: GroupNetworking, Version: "v1", Kind: "VirtualService"},
			Resource:  metav1.GroupVersionResource{Group: GroupNetworking, Version: "v1", Resource: "virtualservices"},
			Namespace: "default", Name: "r", Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: js},
		},
	}
	b, _ := json.Marshal(r)
	return b
}

func serve(h http.Handler, body []byte, ct string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func response(t *testing.T, rec *httptest.ResponseRecorder) *admissionv1.AdmissionResponse {
	t.Helper()
	var out admissionv1.AdmissionReview
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Response == nil || out.Response.UID != "u1" {
		t.Fatalf("not an AdmissionReview response for u1: %d %s", rec.Code, rec.Body.String())
	}
	return out.Response
}

func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	v, err := New(reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := v.Handler()

	good := response(t, serve(h, review(t, vsHead+"spec: {hosts: [a], http: [{route: [{destination: {host: a}}]}]}"), "application/json"))
	if !good.Allowed {
		t.Fatalf("valid VirtualService refused: %+v", good.Result)
	}
	bad := response(t, serve(h, review(t, vsHead+"spec: {tcp: [{route: [{destination: {host: a}}]}]}"), "application/json"))
	if bad.Allowed || !strings.Contains(bad.Result.Message, "must have no tcp routes") {
		t.Fatalf("invalid VirtualService: %+v", bad)
	}
	warned := response(t, serve(h, review(t, vsHead+"spec: {hosts: [a], http: [{match: [{statPrefix: b}], route: [{destination: {host: a}}]}]}"), "application/json"))
	if !warned.Allowed || len(warned.Warnings) != 1 {
		t.Fatalf("want allowed with one warning, got %+v", warned)
	}
	if rec := serve(h, []byte("{"), "application/json"); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad JSON answered %d", rec.Code)
	}
	if rec := serve(h, review(t, vsHead), "text/plain"); rec.Code != http.StatusBadRequest {
		t.Fatalf("wrong content type answered %d", rec.Code)
	}
	pod := bytes.Replace(review(t, vsHead), []byte(`"group":"networking.istio.io","version":"v1","kind":"VirtualService"`), []byte(`"group":"","version":"v1","kind":"Pod"`), 1)
	if rec := serve(h, pod, "application/json"); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "not /v1, Kind=Pod") {
		t.Fatalf("a Pod answered %d %s", rec.Code, rec.Body.String())
	}
	if got := testutil.ToFloat64(v.metrics.passed.WithLabelValues(GroupNetworking, "v1", "virtualservices")); got != 2 {
		t.Errorf("galley_validation_passed = %v, want 2", got)
	}
	if got := testutil.ToFloat64(v.metrics.failed.WithLabelValues(GroupNetworking, "v1", "virtualservices", reasonInvalid)); got != 1 {
		t.Errorf("galley_validation_failed{reason=invalid_resource} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(v.metrics.httpError.WithLabelValues("400")); got != 3 {
		t.Errorf("galley_validation_http_error{status=400} = %v, want 3", got)
	}
}

// FuzzValidate feeds arbitrary objects of every kind: Validate returns
// without panicking, and a refusal always says why.
func FuzzValidate(f *testing.F) {
	f.Add("VirtualService", `{"spec":{"hosts":["a"],"http":[{"route":[{"destination":{"host":"a"},"weight":100}]}]}}`)
	f.Add("DestinationRule", `{"spec":{"host":"a","subsets":[{"name":"v1"},{}]}}`)
	f.Add("Gateway", `{"spec":{"servers":[{"port":{"number":443,"protocol":"HTTPS"},"hosts":["*"]}]}}`)
	f.Add("AuthorizationPolicy", `{"spec":{"action":"CUSTOM","rules":[{"when":[{"key":"request.headers[x]"}]}]}}`)
	f.Add("ServiceEntry", `{"spec":{"hosts":["*.x"],"resolution":"DNS","endpoints":[{"address":"x","ports":{"a":0}}]}}`)
	f.Add("PeerAuthentication", `{"spec":{"portLevelMtls":{"0":{"mode":"STRICT"}}}}`)
	f.Add("Sidecar", `{"spec":{"egress":[{"hosts":["./a","b"]}],"ingress":[{}]}}`)
	f.Add("RequestAuthentication", `{"spec":{"jwtRules":[{"jwksUri":"::"}]}}`)
	f.Add("WorkloadEntry", `{"spec":{}}`)
	f.Fuzz(func(t *testing.T, kind, obj string) {
		for gk := range kinds {
			if gk.Kind != kind {
				continue
			}
			_, err := Validate(gk, []byte(obj))
			if err != nil && err.Error() == "" {
				t.Fatal("a refusal without a message")
			}
		}
	})
}
