package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/webhook/internal/admission"
)

// Handler returns the /inject handler: AdmissionReview v1 for Pod CREATE.
// Malformed requests get HTTP 400, a panic HTTP 500; both are counted in
// sidecar_injection_failure_total.
func (i *Injector) Handler() http.Handler {
	return admission.Recover(http.HandlerFunc(i.serveInject), i.log, func() {
		i.metrics.failures.WithLabelValues(failPanic).Inc()
	})
}

func (i *Injector) serveInject(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	i.metrics.requests.Inc()
	defer func() { i.metrics.duration.Observe(time.Since(start).Seconds()) }()

	review, err := admission.Read(w, r)
	if err == nil {
		err = checkPodRequest(review.Request)
	}
	if err != nil {
		i.metrics.failures.WithLabelValues(failRequest).Inc()
		i.log.Info("malformed injection request", "remote", r.RemoteAddr, "err", err)
		admission.WriteError(w, err)
		return
	}
	admission.Write(w, review, i.admit(r.Context(), review.Request), i.log)
}

// checkPodRequest refuses requests that are not about a Pod or carry none.
func checkPodRequest(req *admissionv1.AdmissionRequest) error {
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" {
		return &admission.Error{
			Code: http.StatusBadRequest, Reason: "kind",
			Message: fmt.Sprintf("/inject takes Pods, not %s", req.Kind.String()),
		}
	}
	if req.Operation == admissionv1.Create && len(req.Object.Raw) == 0 {
		return &admission.Error{Code: http.StatusBadRequest, Reason: "no_object", Message: "AdmissionReview request has no object"}
	}
	return nil
}

// admit decides and answers one valid request.
func (i *Injector) admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create {
		i.metrics.skips.Inc()
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		i.metrics.failures.WithLabelValues(failDecode).Inc()
		return admission.Deny(http.StatusBadRequest, "sidecar injection: the object is not a Pod: "+err.Error())
	}
	log := i.log.With("namespace", req.Namespace, "pod", podName(pod), "uid", req.UID)
	orig, err := json.Marshal(pod)
	if err != nil {
		i.metrics.failures.WithLabelValues(failDecode).Inc()
		return admission.Deny(http.StatusBadRequest, "sidecar injection: encode pod: "+err.Error())
	}
	work := pod.DeepCopy()
	if work.Namespace == "" {
		work.Namespace = req.Namespace
	}
	ns, err := i.namespace(ctx, work.Namespace)
	if err != nil {
		i.metrics.failures.WithLabelValues(failNamespace).Inc()
		log.Error("read namespace for injection", "err", err)
		return admission.Deny(http.StatusInternalServerError, fmt.Sprintf("sidecar injection: cannot read namespace %q", work.Namespace))
	}
	snap := i.snap.Load()
	out, d, err := InjectWith(work, ns, snap.Config, snap.Values, i.Selection(), i.env())
	if err != nil {
		i.metrics.failures.WithLabelValues(failInject).Inc()
		log.Info("injection refused", "err", err)
		return admission.Deny(http.StatusBadRequest, "sidecar injection failed: "+err.Error())
	}
	if !d.Inject {
		i.metrics.skips.Inc()
		log.Debug("injection skipped", "reason", d.Reason)
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	out.Namespace = pod.Namespace
	patch, err := patchFor(orig, out)
	if err != nil {
		i.metrics.failures.WithLabelValues(failPatch).Inc()
		log.Error("injection patch refused", "err", err)
		return admission.Deny(http.StatusBadRequest, "sidecar injection failed: "+err.Error())
	}
	i.metrics.success.Inc()
	log.Info("injected", "reason", d.Reason, "config", snap.Source)
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

func patchFor(orig []byte, out *corev1.Pod) ([]byte, error) {
	injected, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode injected pod: %w", err)
	}
	ops, err := CreatePatch(orig, injected)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ops)
}

// namespace reads a namespace from the informer, or from the API server
// when the informer does not have it (yet).
func (i *Injector) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if l := i.namespaces.Load(); l != nil {
		ns, err := (*l).Get(name)
		if err == nil {
			return ns, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	if i.client == nil {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
	}
	ns, err := i.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get namespace %q: %w", name, err)
	}
	return ns, nil
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}
