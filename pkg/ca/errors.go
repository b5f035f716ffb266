package ca

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
)

// Reason classifies why a request was refused. Each maps to one gRPC code
// and one opaque message for the caller; the detail goes to the log only.
type Reason int

// Reasons for refusing a certificate request.
const (
	// ReasonUnauthenticated: no credential, or one that does not prove an identity.
	ReasonUnauthenticated Reason = iota + 1
	// ReasonPermissionDenied: the caller may not have the requested identity.
	ReasonPermissionDenied
	// ReasonInvalidRequest: the CSR or a request field is malformed or not allowed.
	ReasonInvalidRequest
	// ReasonThrottled: an authenticated caller is over a CSR rate limit (its
	// identity's or the replica's).
	ReasonThrottled
	// ReasonInternal: the CA could not sign (no usable key, signing failed).
	ReasonInternal
)

// Error is a refusal with its reason and a detail meant for the log. The
// detail never contains a token, a key or a CSR body.
type Error struct {
	Reason Reason
	Detail string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Detail + ": " + e.Err.Error()
	}
	return e.Detail
}

func (e *Error) Unwrap() error { return e.Err }

func refuse(r Reason, err error, format string, args ...any) *Error {
	return &Error{Reason: r, Detail: fmt.Sprintf(format, args...), Err: err}
}

// code and message are what the caller sees: a code and an opaque text.
func (r Reason) code() (codes.Code, string) {
	switch r {
	case ReasonUnauthenticated:
		return codes.Unauthenticated, "request authenticate failure"
	case ReasonPermissionDenied:
		return codes.PermissionDenied, "request is not authorized for the requested identity"
	case ReasonInvalidRequest:
		return codes.InvalidArgument, "invalid certificate request"
	case ReasonThrottled:
		return codes.ResourceExhausted, "too many certificate requests, retry later"
	default:
		return codes.Internal, "failed to sign the certificate"
	}
}

// String names the reason in logs and metric labels.
func (r Reason) String() string {
	switch r {
	case ReasonUnauthenticated:
		return "unauthenticated"
	case ReasonPermissionDenied:
		return "permission_denied"
	case ReasonInvalidRequest:
		return "invalid_request"
	case ReasonThrottled:
		return "throttled"
	default:
		return "internal"
	}
}

// reasonOf finds the Reason of err; errors that are not an *Error are internal.
func reasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonInternal
}
