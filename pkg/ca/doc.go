// Package ca is the mesh's certificate authority. It signs workload
// certificates over Istio's IstioCertificateService API
// (istio.v1.auth.IstioCertificateService/CreateCertificate), so Istio's agent
// and proxyless gRPC clients can use it unchanged.
//
// In: a PEM CSR, a caller authenticated by a client certificate this CA
// issued, a Kubernetes service-account token (TokenReview) or, in file mode,
// an operator's token file. Out: a chain leaf..root whose leaf carries the
// caller's SPIFFE ID as its only SAN.
//
// A request is refused as cheaply as possible: its size, then the
// credential (a bearer that is not a JWT, an expired one or one rejected
// moments ago costs no TokenReview; reviews of callers over the
// authentication failure budget, per peer address and for the replica, are
// not made), and only then the CSR budgets of authenticated callers, per
// identity and per replica. Refusals are logged with untrusted text clipped,
// at most a few per reason and interval, the rest summed up in one line;
// metrics count them all.
//
// The signing key and root come from the Secret `cacerts` (plugged in), else
// from `istio-ca-secret` (a self-signed root created once for all replicas),
// or from a directory in file mode; changes are picked up while running. The
// package also yields the control plane's own serving certificate (renewed
// before it expires) and, on the leader, publishes the root to every
// namespace as the ConfigMap `istio-ca-root-cert`.
package ca
