package file

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	errors     prometheus.Gauge
	objects    prometheus.Gauge
	held       prometheus.Gauge
	dirMissing prometheus.Gauge
	reloads    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		errors: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "discovery_config_file_errors",
			Help: "Documents of the config directory that are not loaded (bad documents, duplicates, unreadable files).",
		}),
		objects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "discovery_config_file_objects",
			Help: "Objects in force from the config directory.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "discovery_config_file_held",
			Help: "Config files whose earlier objects stay in force because the file read empty or is missing from a directory just replaced (--config-dir-empty-grace).",
		}),
		dirMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "discovery_config_file_dir_missing",
			Help: "1 while the config directory is gone (the objects last read from it stay in force), else 0.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_config_file_reloads_total",
			Help: "Reads of the config directory, by result: ok, errors (some documents failed), failed (the directory could not be read, or is gone: counted once until it is back).",
		}, []string{"result"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.errors, m.objects, m.held, m.dirMissing, m.reloads} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
