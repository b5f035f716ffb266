package meshconfig

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reloads *prometheus.CounterVec
	invalid prometheus.Gauge
	ignored *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_mesh_config_reloads_total",
			Help: "MeshConfig reads, by result: applied (a new MeshConfig is in force), unchanged, invalid (refused; the last good one stays in force).",
		}, []string{"result"}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "discovery_mesh_config_invalid",
			Help: "1 while the MeshConfig last read was refused (the last good one is in force), else 0.",
		}),
		ignored: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "discovery_mesh_config_ignored_fields",
			Help: "1 for each field the MeshConfig in force sets that discovery does not apply (see /debug/meshz).",
		}, []string{"field"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reloads, m.invalid, m.ignored} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}
