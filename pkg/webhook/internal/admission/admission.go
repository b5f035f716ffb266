// Package admission reads AdmissionReview v1 requests and writes their
// responses, for the /inject and /validate handlers. It refuses malformed
// requests with HTTP 400 and a message that says what is wrong, and turns a
// handler's panic into HTTP 500.
package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxBodyBytes bounds a request body. The API server's own limit on an
// object is 3 MiB; an AdmissionReview carries at most two of them.
const MaxBodyBytes = 10 << 20

// Error is a malformed request: Code is the HTTP status to answer with,
// Reason a short metric label, Message what the caller did wrong.
type Error struct {
	Code    int
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Message }

func badRequest(reason, format string, args ...any) *Error {
	return &Error{Code: http.StatusBadRequest, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Read reads an AdmissionReview v1 request from r. It fails with an *Error
// when the method is not POST, the content type is not JSON, the body is
// over MaxBodyBytes, is not JSON, is not an admission.k8s.io/v1
// AdmissionReview, or has no request.
func Read(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, error) {
	if r.Method != http.MethodPost {
		return nil, &Error{Code: http.StatusMethodNotAllowed, Reason: "method", Message: fmt.Sprintf("method %s is not allowed: send a POST", r.Method)}
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return nil, badRequest("content_type", "content type %q is not accepted: send application/json", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, badRequest("too_large", "request body is over the limit of %d bytes", MaxBodyBytes)
		}
		return nil, badRequest("read", "read request body: %v", err)
	}
	if len(body) == 0 {
		return nil, badRequest("empty", "request body is empty: send an AdmissionReview")
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil {
		return nil, badRequest("decode", "request body is not an AdmissionReview: %v", err)
	}
	gvk := admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
	if review.APIVersion != gvk.GroupVersion().String() || review.Kind != gvk.Kind {
		return nil, badRequest("kind", "request is %s %q, not %s AdmissionReview", review.APIVersion, review.Kind, gvk.GroupVersion())
	}
	if review.Request == nil {
		return nil, badRequest("no_request", "AdmissionReview has no request")
	}
	return review, nil
}

// Write answers review with resp, echoing the request's UID.
func Write(w http.ResponseWriter, review *admissionv1.AdmissionReview, resp *admissionv1.AdmissionResponse, log *slog.Logger) {
	resp.UID = review.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	b, err := json.Marshal(out)
	if err != nil {
		log.Error("encode AdmissionReview response", "err", err)
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(b); err != nil {
		log.Debug("write AdmissionReview response", "err", err)
	}
}

// WriteError answers a malformed request.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: http.StatusInternalServerError, Message: "internal error"}
	}
	http.Error(w, e.Message, e.Code)
}

// Deny builds a response that refuses the object with message.
func Deny(code int32, message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: message, Reason: metav1.StatusReasonBadRequest},
	}
}

// Recover wraps h so that a panic answers HTTP 500, is logged with its
// value, and is reported to onPanic; the server keeps serving.
func Recover(h http.Handler, log *slog.Logger, onPanic func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				onPanic()
				log.Error("webhook handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(v))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(w, r)
	})
}
