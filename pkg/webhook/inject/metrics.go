package inject

import "github.com/prometheus/client_golang/prometheus"

// Failure types of sidecar_injection_failure_total.
const (
	failRequest   = "request"   // malformed AdmissionReview (see admission.Error reasons in the log)
	failDecode    = "decode"    // the object is not a Pod
	failNamespace = "namespace" // the pod's namespace could not be read
	failInject    = "inject"    // a bad annotation, unknown template or failed render
	failPatch     = "patch"     // the injected pod would change what the user wrote
	failPanic     = "panic"     // the handler panicked: HTTP 500
)

type metrics struct {
	requests prometheus.Counter
	success  prometheus.Counter
	failures *prometheus.CounterVec
	skips    prometheus.Counter
	duration prometheus.Histogram
	reloads  *prometheus.CounterVec
}

// newMetrics registers the injector's metrics, named as Istio names them.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sidecar_injection_requests_total", Help: "Sidecar injection requests received.",
		}),
		success: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sidecar_injection_success_total", Help: "Pods injected.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sidecar_injection_failure_total", Help: "Injection requests that failed, by type.",
		}, []string{"type"}),
		skips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sidecar_injection_skip_total", Help: "Pods not injected because the rules say so.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sidecar_injection_time_seconds", Help: "Time to answer an injection request.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sidecar_injection_config_reloads_total", Help: "Injection configuration loads from the ConfigMap, by result.",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.success, m.failures, m.skips, m.duration, m.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
