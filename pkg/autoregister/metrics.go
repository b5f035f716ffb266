package autoregister

import "github.com/prometheus/client_golang/prometheus"

// metrics are istiod's auto-registration counters, by the same names,
// and the queue's state.
type metrics struct {
	success    prometheus.Counter
	updates    prometheus.Counter
	unregister prometheus.Counter
	deletes    prometheus.Counter
	errors     *prometheus.CounterVec
	retries    prometheus.Counter
	depth      prometheus.GaugeFunc
	entries    prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, depth, entries func() float64) *metrics {
	m := &metrics{
		success: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auto_registration_success_total",
			Help: "WorkloadEntries created for proxies that asked to be registered.",
		}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auto_registration_updates_total",
			Help: "Existing auto-registered WorkloadEntries marked connected to this replica.",
		}),
		unregister: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auto_registration_unregister_total",
			Help: "Auto-registered WorkloadEntries marked disconnected.",
		}),
		deletes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auto_registration_deletes_total",
			Help: "Auto-registered WorkloadEntries deleted after the grace period.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auto_registration_errors_total",
			Help: "Auto-registration failures, by reason (api, identity, no_group, unsupported, invalid_node).",
		}, []string{"reason"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auto_registration_retries_total",
			Help: "Attempts to bring a WorkloadEntry up to date that failed and were queued again with back-off.",
		}),
		depth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "auto_registration_queue_depth",
			Help: "WorkloadEntries waiting for a write to the API server.",
		}, depth),
		entries: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "auto_registration_tracked_entries",
			Help: "WorkloadEntries this replica tracks: connected, or disconnected within the grace period.",
		}, entries),
	}
	reg.MustRegister(m.success, m.updates, m.unregister, m.deletes, m.errors, m.retries, m.depth, m.entries)
	return m
}
