// Package validate checks Istio configuration before the API server stores
// it, for /validate.
//
// In: an AdmissionReview v1 for a networking.istio.io or security.istio.io
// object (CREATE or UPDATE).
//
// Out: allowed, or denied with every problem found (each with its field
// path); and, for fields discovery accepts but does not act on yet,
// AdmissionReview warnings that kubectl shows to the user.
package validate
