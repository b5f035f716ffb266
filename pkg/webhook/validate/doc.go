// Package validate checks Istio configuration before the API server stores
// it, for /validate.
//
// In: an AdmissionReview v1 for a networking.istio.io or security.istio.io
// object (CREATE or UPDATE).
//
// Out: allowed, or denied with every problem found (each with its field
// path); Istio's warnings; and, for fields discovery accepts but does not
// act on yet, warnings of its own. The verdict (accept, warn, refuse) is
// Istio's for the same object (its webhook and the schema of its CRDs),
// except that discovery also refuses what Envoy would refuse
// (gen.EnvoyRefusals). The file source judges objects with the same Check;
// hack/istio-validate compares both with Istio over Istio's own YAML.
package validate
