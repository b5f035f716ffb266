// Package server serves the webhooks over HTTPS and keeps the API
// server's trust in them.
//
// In: the /inject and /validate handlers (packages inject and validate), a
// TLS configuration whose certificate comes from the CA, and the CA's root.
//
// Out: an HTTPS server on :15017 (Server), and, on the leader only, the
// caBundle of the MutatingWebhookConfiguration istio-sidecar-injector[-rev]
// and the ValidatingWebhookConfiguration istio-validator[-rev]-<namespace>
// kept equal to the root (CABundlePatcher). Nothing else in those
// configurations is ever changed.
package server
