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
