// Package jwks fetches the JSON Web Key Sets of RequestAuthentication
// rules, as istiod does by default (its JwksResolver,
// PILOT_JWT_ENABLE_REMOTE_JWKS=false): the control plane fetches, the
// proxies get the keys inline.
//
// In: the Store's Worlds (every RequestAuthentication rule without an
// inline jwks names an issuer and a jwksUri, or only an issuer, whose
// jwks_uri OpenID discovery gives).
//
// Out: model.KindJWKS events to the Store, one per (issuer, jwksUri): the
// fetched key set, or Failed. The key set is a model input, like the
// MeshConfig, rather than state the generator asks for while it runs:
// generation stays a pure function of the World (the same World always
// gives the same configuration, goldens need no network), a fetched or
// changed key set is a Change that the push planner sees and sends only
// to the proxies whose policies name it (generation reads it through
// its views: gen.Reads), and a refresh
// that finds the same keys publishes nothing.
//
// Behaviour, istiod's unless said:
//   - a key set is fetched as soon as a policy names it (no retry on this
//     first fetch: istiod's main flow), then refreshed every
//     RefreshInterval (20 min); a failed fetch is retried RetryInterval
//     later with Retries retries RetryInterval apart, then every
//     RefreshIntervalOnFailure, doubling up to MaxRefreshIntervalOnFailure;
//   - a refresh that fails keeps the last good keys until none was
//     fetched for EvictionDuration (7 days); with none, the key set is
//     Failed and generation inlines istiod's fail-closed key set (no
//     token validates; requests without one pass);
//   - a key set no policy names any more is dropped at once (istiod
//     keeps unused ones up to 7 days);
//   - each fetch is bounded: the rule's timeout (5 s by default, at most
//     MaxTimeout), at most MaxBytes of body (istiod reads any size), a
//     2xx status, a JSON object with a "keys" list (istiod inlines what
//     it gets; a body Envoy could not use fails closed here instead);
//     connections to BlockedCIDRs are refused (BLOCKED_CIDRS_IN_JWKS_URIS);
//   - every network fetch counts in pilot_jwks_resolver_network_fetch_
//     success_total or ..._fail_total, Istio's metrics; each failed fetch
//     logs one line with the issuer and the URI without its query, never
//     a body, token or key.
package jwks
