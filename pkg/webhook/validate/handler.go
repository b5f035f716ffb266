package validate

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshplane/discovery/pkg/webhook/internal/admission"
)

// Validator serves /validate. It holds no state besides its metrics; every
// replica runs one and none needs the leader.
type Validator struct {
	log     *slog.Logger
	metrics *metrics
}

// New builds a Validator whose metrics go to reg.
func New(reg prometheus.Registerer, log *slog.Logger) (*Validator, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("validator metrics: %w", err)
	}
	return &Validator{log: log.With("component", "validator"), metrics: m}, nil
}

// Handler returns the /validate handler: AdmissionReview v1 for the kinds
// of Istio's groups (networking, security, telemetry and extensions
// .istio.io, as Istio's webhook rules cover). Malformed requests get
// HTTP 400, a panic HTTP 500.
func (v *Validator) Handler() http.Handler {
	return admission.Recover(http.HandlerFunc(v.serve), v.log, func() {
		v.metrics.failed.WithLabelValues("", "", "", reasonPanic).Inc()
		v.metrics.httpError.WithLabelValues("500").Inc()
	})
}

func (v *Validator) serve(w http.ResponseWriter, r *http.Request) {
	review, err := admission.Read(w, r)
	if err == nil {
		err = checkRequest(review.Request)
	}
	if err != nil {
		code := http.StatusBadRequest
		var ae *admission.Error
		if errors.As(err, &ae) {
			code = ae.Code
		}
		v.metrics.httpError.WithLabelValues(strconv.Itoa(code)).Inc()
		v.metrics.failed.WithLabelValues("", "", "", reasonRequest).Inc()
		v.log.Info("malformed validation request", "remote", r.RemoteAddr, "err", err)
		admission.WriteError(w, err)
		return
	}
	admission.Write(w, review, v.admit(review.Request), v.log)
}

func checkRequest(req *admissionv1.AdmissionRequest) error {
	if !istioGroups[req.Kind.Group] {
		return &admission.Error{
			Code: http.StatusBadRequest, Reason: "kind",
			Message: fmt.Sprintf("/validate takes the kinds of %s, %s, %s and %s, not %s", GroupNetworking, GroupSecurity, GroupTelemetry, GroupExtensions, req.Kind.String()),
		}
	}
	if req.Operation != admissionv1.Delete && len(req.Object.Raw) == 0 {
		return &admission.Error{Code: http.StatusBadRequest, Reason: "no_object", Message: "AdmissionReview request has no object"}
	}
	return nil
}

func (v *Validator) admit(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	gvr := req.Resource
	if req.Operation == admissionv1.Delete || req.Operation == admissionv1.Connect {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	warnings, err := Validate(gk, req.Object.Raw)
	log := v.log.With("kind", gk.String(), "namespace", req.Namespace, "name", req.Name)
	if err != nil {
		reason := reasonInvalid
		var de *DecodeError
		if errors.As(err, &de) {
			reason = reasonDecode
		}
		v.metrics.failed.WithLabelValues(gvr.Group, gvr.Version, gvr.Resource, reason).Inc()
		log.Info("configuration refused", "err", err)
		resp := admission.Deny(http.StatusBadRequest, err.Error())
		resp.Warnings = warnings
		return resp
	}
	v.metrics.passed.WithLabelValues(gvr.Group, gvr.Version, gvr.Resource).Inc()
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}
