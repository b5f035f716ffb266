// Package envoyfilter is Istio's EnvoyFilter patch model: which
// EnvoyFilters apply to a proxy, in which order, and how their
// configPatches change generated Envoy resources.
//
// In: EnvoyFilter specs (Compile), what a proxy is (Target) and Envoy
// protos that generation built (listeners, clusters, route
// configurations). Out: the same protos, patched in place. The caller
// hands in copies: generation shares resources between proxies, and a
// patch must only change what the proxies it selects are sent.
//
// The semantics are istiod's (pilot/pkg/networking/core/envoyfilter and
// pilot/pkg/model/envoyfilter.go): match context, proxy version and
// metadata, listener / filter chain / filter / sub-filter matches, cluster
// and route configuration matches, the operations per applyTo and Istio's
// merge (pkg/proto/merge: lists appended, durations replaced, a
// typed_config merged with one of its own type). The package knows nothing
// of discovery's World; the gen package decides each resource's patch
// context. Route configuration matches are mapped onto discovery's route
// names here (routeConfigurationMatch).
package envoyfilter
