package jwks

import "github.com/prometheus/client_golang/prometheus"

// metrics are Istio's JWKS resolver counters.
type metrics struct {
	success, fail prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		success: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_jwks_resolver_network_fetch_success_total",
			Help: "Network fetches of a JWKS (or OpenID configuration) that succeeded.",
		}),
		fail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_jwks_resolver_network_fetch_fail_total",
			Help: "Network fetches of a JWKS (or OpenID configuration) that failed.",
		}),
	}
	for _, c := range []prometheus.Collector{m.success, m.fail} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
