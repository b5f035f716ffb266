// Package install installs discovery into a cluster from its embedded
// Helm charts.
//
// In: a profile (manifests/profiles), IstioOperator-shaped -f files and
// --set values, merged in that order and checked strictly against Spec.
// Out: the rendered objects per component (base, discovery, gateways),
// sorted and labelled with the install labels; then, against a cluster,
// pre-checks (permissions, an Istio installation, ownership), server-side
// apply in component order of only what the revision owns (ownership.go),
// waits for CRDs and Deployments, prune of labelled objects no longer
// rendered, uninstall, checks, and the state of a migration from Istio
// (istio.go, migrate.go).
package install
