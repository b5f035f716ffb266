package istiovalidate

// class sorts the reasons for a disagreement.
type class string

// envoyRefuses is the one reason discovery may refuse what Istio accepts:
// Envoy itself would refuse the configuration (gen.EnvoyRefusals).
const envoyRefuses class = "discovery refuses what Envoy would refuse"

// reason says why an object's verdict differs from Istio's.
type reason struct {
	Class class
	Why   string
}

// reasons lists every object whose verdict differs from Istio's, keyed by
// the object ("path in istio.io/istio#document").
var reasons = map[string]reason{
	"pkg/config/analysis/analyzers/testdata/envoy-filter-remove-operation.yaml#4": {
		Why: "an explicit null configPatches[].match: the API server's structural schema refuses a null object; discovery's decoder reads it as unset (no match), which is what istiod does with the object once stored",
	},
}
