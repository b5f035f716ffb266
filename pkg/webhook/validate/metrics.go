package validate

import "github.com/prometheus/client_golang/prometheus"

// Reasons of galley_validation_failed, as Istio names them.
const (
	reasonInvalid = "invalid_resource"
	reasonDecode  = "crd_conversion_error"
	reasonRequest = "bad_request"
	reasonPanic   = "panic"
)

type metrics struct {
	passed    *prometheus.CounterVec
	failed    *prometheus.CounterVec
	httpError *prometheus.CounterVec
}

// newMetrics registers the validator's metrics, named as Istio names them.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		passed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galley_validation_passed", Help: "Configuration objects that passed validation.",
		}, []string{"group", "version", "resource"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galley_validation_failed", Help: "Configuration objects or requests that failed validation, by reason.",
		}, []string{"group", "version", "resource", "reason"}),
		httpError: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galley_validation_http_error", Help: "Validation requests answered with an HTTP error, by status.",
		}, []string{"status"}),
	}
	for _, c := range []prometheus.Collector{m.passed, m.failed, m.httpError} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
