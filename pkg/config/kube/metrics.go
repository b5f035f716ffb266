package kube

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// sourceLabel is the value of the source label on every metric here.
const sourceLabel = "kube"

type metrics struct {
	events      *prometheus.CounterVec // kind, op
	applyErrors prometheus.Counter
	watchErrors *prometheus.CounterVec // kind
	watched     *prometheus.GaugeVec   // kind
	batchSize   prometheus.Histogram   // events per Sink.Apply
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	constLabels := prometheus.Labels{"source": sourceLabel}
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "discovery_config_events_total",
			Help:        "Configuration events a source handed to the model, by kind and operation.",
			ConstLabels: constLabels,
		}, []string{"kind", "op"}),
		applyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "discovery_config_apply_errors_total",
			Help:        "Configuration events the model rejected.",
			ConstLabels: constLabels,
		}),
		watchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "discovery_config_kube_watch_errors_total",
			Help:        "Failed list or watch calls to the Kubernetes API server, by kind; informers retry them.",
			ConstLabels: constLabels,
		}, []string{"kind"}),
		watched: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "discovery_config_kube_kind_watched",
			Help:        "1 while a kind is watched (for Istio kinds: while its CRD is established and serves v1), else 0.",
			ConstLabels: constLabels,
		}, []string{"kind"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "discovery_config_apply_batch_size",
			Help:        "Events per call of the model's Apply.",
			ConstLabels: constLabels,
			Buckets:     prometheus.ExponentialBuckets(1, 4, 8),
		}),
	}
	for _, c := range []prometheus.Collector{m.events, m.applyErrors, m.watchErrors, m.watched, m.batchSize} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register kube source metrics: %w", err)
		}
	}
	return m, nil
}
