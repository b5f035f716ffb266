package status

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	verdicts *prometheus.CounterVec // discovery_status_verdicts_total{result}
	writes   *prometheus.CounterVec // discovery_status_writes_total{condition,result}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_status_verdicts_total",
			Help: "Proxy verdicts (NACKs, and ACKs while rejections are outstanding) seen by the status reporter, by result: queued, dropped (queue full).",
		}, []string{"result"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_status_writes_total",
			Help: "Reports on Istio resources, by condition status (True: rejected, False: accepted again) and result: written, failed, event_failed (condition written, Event not), suppressed (within --status-nack-interval), logged (no cluster).",
		}, []string{"condition", "result"}),
	}
	for _, c := range []prometheus.Collector{m.verdicts, m.writes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

type auditMetrics struct {
	configs *prometheus.GaugeVec   // discovery_config_unsupported_fields{kind,field}
	refused *prometheus.GaugeVec   // discovery_config_refused{kind}
	writes  *prometheus.CounterVec // discovery_status_unsupported_writes_total{result}
}

func newAuditMetrics(reg prometheus.Registerer) (*auditMetrics, error) {
	m := &auditMetrics{
		configs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "discovery_config_unsupported_fields",
			Help: "Istio configs known now that set a field discovery does not support yet (it has no effect), by kind and field " +
				"(list indexes left out, as in discovery_xds_unsupported_fields_total); field \"*\" counts configs of a kind discovery does not read at all. " +
				"Every replica counts every config, whether or not a proxy uses it; discovery_xds_unsupported_fields_total counts resource versions as the xDS generator meets them.",
		}, []string{"kind", "field"}),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "discovery_config_refused",
			Help: "Istio configs known now with values Envoy refuses (" + RefusedConditionType + "): what is built from them fails closed, by kind.",
		}, []string{"kind"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_status_unsupported_writes_total",
			Help: "Reconciliations of the " + UnsupportedConditionType + " and " + RefusedConditionType + " conditions on Istio resources (leader only), by result: " +
				"set, cleared, unchanged (already right), stale (a newer generation exists), gone (deleted), failed (retried with back-off).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.configs, m.refused, m.writes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
