package istiovalidate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"istio.io/istio/pkg/config/crd"
	"istio.io/istio/pkg/config/schema/collections"
	"istio.io/istio/pkg/webhooks/validation/server"
)

// verdict is what a validator makes of an object.
type verdict string

const (
	accept verdict = "accept"
	warn   verdict = "warn"
	refuse verdict = "refuse"
)

// judgement is a verdict and what led to it.
type judgement struct {
	Verdict verdict
	Detail  string // the refusal's message or the warnings
}

// istio judges objects as a cluster running istiod does: the API server
// checks metadata and the CRD's structural schema (unknown fields, types,
// enums, CEL rules), then istiod's validating webhook runs.
type istio struct {
	webhook http.Handler
	crds    *crd.Validator
}

func newIstio(t *testing.T, moduleDir string) *istio {
	t.Helper()
	mux := http.NewServeMux()
	if _, err := server.New(server.Options{Schemas: collections.PilotGatewayAPI(), DomainSuffix: "cluster.local", Mux: mux}); err != nil {
		t.Fatalf("Istio's validation webhook: %v", err)
	}
	v, err := crd.NewValidatorFromFilesWithOptions(
		[]string{filepath.Join(moduleDir, "manifests/charts/base/files/crd-all.gen.yaml")}, crd.WithoutCRDValidation())
	if err != nil {
		t.Fatalf("Istio's CRDs: %v", err)
	}
	return &istio{webhook: mux, crds: v}
}

func (is *istio) judge(d doc) judgement {
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(d.JSON); err != nil {
		return judgement{refuse, "API server: " + err.Error()}
	}
	if msg := metadataProblem(&u); msg != "" {
		return judgement{refuse, "API server: " + msg}
	}
	if err := is.crds.ValidateCustomResource(&u); err != nil {
		return judgement{refuse, "CRD schema: " + err.Error()}
	}
	resp, err := is.admit(d, u.GetNamespace())
	if err != nil {
		return judgement{refuse, "webhook: " + err.Error()}
	}
	switch {
	case !resp.Allowed:
		msg := ""
		if resp.Result != nil {
			msg = resp.Result.Message
		}
		return judgement{refuse, "webhook: " + msg}
	case len(resp.Warnings) > 0:
		return judgement{warn, fmt.Sprint(resp.Warnings)}
	}
	return judgement{accept, ""}
}

// metadataProblem is what the API server says of an object's name and
// namespace before any webhook sees it.
func metadataProblem(u *unstructured.Unstructured) string {
	if u.GetName() == "" && u.GetGenerateName() == "" {
		return "metadata.name is required"
	}
	if errs := validation.IsDNS1123Subdomain(u.GetName()); u.GetName() != "" && len(errs) > 0 {
		return fmt.Sprintf("metadata.name %q: %v", u.GetName(), errs)
	}
	if ns := u.GetNamespace(); ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Sprintf("metadata.namespace %q: %v", ns, errs)
		}
	}
	return ""
}

// admit sends the object to Istio's webhook handler in process, as the API
// server would (an AdmissionReview v1, CREATE).
func (is *istio) admit(d doc, namespace string) (*admissionv1.AdmissionResponse, error) {
	gv := struct {
		APIVersion string `json:"apiVersion"`
	}{}
	_ = json.Unmarshal(d.JSON, &gv)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "corpus",
			Kind:      metav1.GroupVersionKind{Group: d.GK.Group, Version: versionOf(gv.APIVersion), Kind: d.GK.Kind},
			Namespace: namespace, Name: d.Name, Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: d.JSON},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	is.webhook.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", rec.Code, rec.Body.String())
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		return nil, fmt.Errorf("not an AdmissionReview: %v %s", err, rec.Body.String())
	}
	return out.Response, nil
}

func versionOf(apiVersion string) string {
	for i := len(apiVersion) - 1; i >= 0; i-- {
		if apiVersion[i] == '/' {
			return apiVersion[i+1:]
		}
	}
	return apiVersion
}
