package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics carry Istio's names, so its dashboards find them.
type metrics struct {
	proxies        prometheus.Gauge         // pilot_xds
	pushes         *prometheus.CounterVec   // pilot_xds_pushes{type}
	convergence    prometheus.Histogram     // pilot_proxy_convergence_time
	triggers       *prometheus.CounterVec   // pilot_push_triggers{type}
	debounce       prometheus.Histogram     // pilot_debounce_time
	queueTime      prometheus.Histogram     // pilot_proxy_queue_time
	pushTime       *prometheus.HistogramVec // pilot_xds_push_time{type}
	rejects        *prometheus.CounterVec   // pilot_total_xds_rejects{type}
	typeRejects    map[string]prometheus.Counter
	services       prometheus.Gauge         // pilot_services
	configSize     *prometheus.HistogramVec // pilot_xds_config_size_bytes{type}
	streamsClosed  *prometheus.CounterVec   // discovery_xds_streams_closed_total{reason}
	streamsRefused *prometheus.CounterVec   // discovery_xds_streams_refused_total{reason}
	streamsWaiting prometheus.Gauge         // discovery_xds_streams_waiting
	waves          *prometheus.CounterVec   // discovery_xds_push_waves_total{outcome}
}

func newMetrics(reg prometheus.Registerer) *metrics {
	sizeBuckets := []float64{1, 1e3, 1e4, 1e5, 1e6, 1e7}
	m := &metrics{
		proxies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pilot_xds", Help: "Number of proxies connected to this instance."}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_pushes", Help: "xDS responses sent, by type (cds, eds, lds, rds).",
		}, []string{"type"}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_proxy_convergence_time", Help: "Seconds from the first change of a push to its configuration being handed to a proxy's stream.",
			Buckets: []float64{.1, .5, 1, 3, 5, 10, 20, 30},
		}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_push_triggers", Help: "Changes that caused pushes, by kind of object.",
		}, []string{"type"}),
		debounce: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_debounce_time", Help: "Seconds a change waited in the debouncer.",
			Buckets: []float64{.01, .1, 1, 3, 5, 10, 20, 30},
		}),
		queueTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_proxy_queue_time", Help: "Seconds a proxy waited in the push queue.",
			Buckets: []float64{.1, .5, 1, 3, 5, 10, 20, 30},
		}),
		pushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pilot_xds_push_time", Help: "Seconds to prepare a proxy's push, by type (full or eds).",
			Buckets: []float64{.01, .1, 1, 3, 5, 10, 20, 30},
		}, []string{"type"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_total_xds_rejects", Help: "xDS responses proxies rejected (NACK), by type.",
		}, []string{"type"}),
		typeRejects: map[string]prometheus.Counter{},
		services:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "pilot_services", Help: "Number of services in the World."}),
		configSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pilot_xds_config_size_bytes", Help: "Size in bytes of the resources of an xDS response, by type.",
			Buckets: sizeBuckets,
		}, []string{"type"}),
		waves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_xds_push_waves_total", Help: "First waves of class pushes (--xds-push-wave), by outcome: started, acked, nacked (the rest held), timeout (the rest released unanswered), superseded.",
		}, []string{"outcome"}),
		streamsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_xds_streams_closed_total", Help: "xDS streams the server closed, by reason.",
		}, []string{"reason"}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_xds_streams_refused_total", Help: "xDS streams refused for going over a bound (limits.go), by reason: " +
				"too_many_streams, node_too_large, node_id_too_long, too_many_names, too_many_unknown_names.",
		}, []string{"reason"}),
		streamsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "discovery_xds_streams_waiting", Help: "New xDS streams waiting for a slot to be given their first configuration (--xds-warming-streams).",
		}),
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "discovery_xds_response_memory_bytes", Help: "Memory of large delta xDS responses marshalled and not yet written (codec_budget.go); bounded at 8 MiB but for overruns.",
		}, func() float64 { return float64(responseBudget.Load().used.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "discovery_xds_response_memory_waits_total", Help: "Large delta xDS responses that waited for earlier ones to be written before they were marshalled.",
		}, func() float64 { return float64(responseBudget.Load().waits.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "discovery_xds_response_memory_overruns_total", Help: "Large delta xDS responses marshalled beyond the bound after waiting a second for it.",
		}, func() float64 { return float64(responseBudget.Load().overruns.Load()) }),
	)
	reg.MustRegister(m.streamsWaiting, m.proxies, m.pushes, m.convergence, m.triggers, m.debounce, m.queueTime, m.pushTime,
		m.rejects, m.services, m.configSize, m.streamsClosed, m.streamsRefused, m.waves)
	for _, t := range []string{"cds", "eds", "lds", "rds"} {
		c := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_xds_" + t + "_reject", Help: "Proxies' rejections (NACK) of " + t + " responses.",
		})
		reg.MustRegister(c)
		m.typeRejects[t] = c
	}
	return m
}

func (m *metrics) reject(short string) {
	m.rejects.WithLabelValues(short).Inc()
	if c := m.typeRejects[short]; c != nil {
		c.Inc()
	}
}
