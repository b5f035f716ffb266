package ca

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics carry Istio's citadel_server_* names so existing dashboards work;
// what Istio has no name for is discovery_ca_*.
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

	refusals          *prometheus.CounterVec // by reason
	identityThrottled prometheus.Counter
	reviews           *prometheus.CounterVec // by result
	reviewCacheHits   *prometheus.CounterVec // by result
	unreviewed        *prometheus.CounterVec // by reason
	logsSuppressed    *prometheus.CounterVec // by reason
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	counterVec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	m := &metrics{
		csrs:          counter("citadel_server_csr_count", "Certificate signing requests received."),
		issued:        counter("citadel_server_success_cert_issuance_count", "Certificates issued."),
		authnFailures: counter("citadel_server_authentication_failure_count", "Requests whose caller could not be authenticated."),
		parseErrors:   counter("citadel_server_csr_parsing_err_count", "CSRs that could not be parsed or whose key or signature is not acceptable."),
		idErrors:      counter("citadel_server_id_extraction_err_count", "CSRs whose identity is missing, malformed or not the caller's."),
		signErrors:    counter("citadel_server_csr_sign_err_count", "CSRs that could not be signed."),
		throttled:     counter("citadel_server_csr_throttled_count", "CSRs of authenticated callers refused with RESOURCE_EXHAUSTED by a rate limit (the replica's or one identity's)."),
		signLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "citadel_server_csr_sign_duration_seconds",
			Help:    "Time to handle a certificate request that was signed, from receipt to response.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		rootExpiry:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "citadel_server_root_cert_expiry_timestamp", Help: "Unix time when the root certificate expires."}),
		chainExpiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "citadel_server_cert_chain_expiry_timestamp", Help: "Unix time when the first certificate of the CA's chain expires."}),

		refusals: counterVec("discovery_ca_refusals_total", "Certificate requests refused, by reason (whether or not the refusal was logged).", "reason"),
		identityThrottled: counter("discovery_ca_csr_identity_throttled_total",
			"CSRs refused with RESOURCE_EXHAUSTED because their identity was over its own rate limit (also in citadel_server_csr_throttled_count)."),
		reviews: counterVec("discovery_ca_token_reviews_total",
			"TokenReviews sent to the API server (for CSRs and xDS streams), by result: authenticated, rejected.", "result"),
		reviewCacheHits: counterVec("discovery_ca_token_review_cache_hits_total",
			"Bearer tokens answered from the TokenReview cache, by the cached result: authenticated, rejected.", "result"),
		unreviewed: counterVec("discovery_ca_tokens_unreviewed_total",
			"Bearer tokens refused without a TokenReview, by reason: malformed (not a JWT), expired, peer_budget, global_budget (authentication failure budgets spent).", "reason"),
		logsSuppressed: counterVec("discovery_ca_refusal_logs_suppressed_total",
			"Refusals not logged in full because their reason was over the refusal log limit, by reason.", "reason"),
	}
	if reg != nil {
		reg.MustRegister(m.csrs, m.issued, m.authnFailures, m.parseErrors, m.idErrors, m.signErrors,
			m.throttled, m.signLatency, m.rootExpiry, m.chainExpiry,
			m.refusals, m.identityThrottled, m.reviews, m.reviewCacheHits, m.unreviewed, m.logsSuppressed)
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
