package ca

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics carry Istio's citadel_server_* names so existing dashboards work.
type metrics struct {
	csrs          prometheus.Counter
	issued        prometheus.Counter
	authnFailures prometheus.Counter
	parseErrors   prometheus.Counter
	idErrors      prometheus.Counter
	signErrors    prometheus.Counter
	throttled     prometheus.Counter
	signLatency   prometheus.Histogram
	rootExpiry    prometheus.Gauge
	chainExpiry   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		csrs:          counter("citadel_server_csr_count", "Certificate signing requests received."),
		issued:        counter("citadel_server_success_cert_issuance_count", "Certificates issued."),
		authnFailures: counter("citadel_server_authentication_failure_count", "Requests whose caller could not be authenticated."),
		parseErrors:   counter("citadel_server_csr_parsing_err_count", "CSRs that could not be parsed or whose key or signature is not acceptable."),
		idErrors:      counter("citadel_server_id_extraction_err_count", "CSRs whose identity is missing, malformed or not the caller's."),
		signErrors:    counter("citadel_server_csr_sign_err_count", "CSRs that could not be signed."),
		throttled:     counter("citadel_server_csr_throttled_count", "CSRs refused with RESOURCE_EXHAUSTED by the per-replica rate limit."),
		signLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "citadel_server_csr_sign_duration_seconds",
			Help:    "Time to handle a certificate request that was signed, from receipt to response.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		rootExpiry:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "citadel_server_root_cert_expiry_timestamp", Help: "Unix time when the root certificate expires."}),
		chainExpiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "citadel_server_cert_chain_expiry_timestamp", Help: "Unix time when the first certificate of the CA's chain expires."}),
	}
	if reg != nil {
		reg.MustRegister(m.csrs, m.issued, m.authnFailures, m.parseErrors, m.idErrors, m.signErrors,
			m.throttled, m.signLatency, m.rootExpiry, m.chainExpiry)
	}
	return m
}

// observeBundle sets the expiry gauges for b.
func (m *metrics) observeBundle(b *Bundle) {
	m.rootExpiry.Set(float64(b.Root.NotAfter.Unix()))
	first := b.Root.NotAfter
	for _, c := range b.Chain {
		if c.NotAfter.Before(first) {
			first = c.NotAfter
		}
	}
	m.chainExpiry.Set(float64(first.Unix()))
}
