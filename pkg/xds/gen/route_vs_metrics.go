package gen

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// dupDomainCounter counts the reports of VirtualServices that sidecars
// ignore because another one for the same host comes first. Istio shows
// the same condition as the gauge pilot_vservice_dup_domain, recomputed
// on every push; generation here is per class and incremental, so a
// counter of reports (once per host and set of VirtualService versions)
// is what can be kept honestly, under a name of its own.
type dupDomainCounter struct {
	mu      sync.Mutex
	n       float64
	counter prometheus.Counter
}

func (d *dupDomainCounter) inc() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if d.counter != nil {
		d.counter.Inc()
	}
}

// register adds discovery_xds_vservice_dup_domain_total to reg, with the
// reports made before.
func (d *dupDomainCounter) register(reg prometheus.Registerer) error {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "discovery_xds_vservice_dup_domain_total",
		Help: "Reports of VirtualServices that sidecars ignore because another VirtualService for the same host comes first " +
			"(once per host and set of VirtualService versions; Istio's gauge pilot_vservice_dup_domain shows the same condition).",
	})
	if err := reg.Register(c); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c.Add(d.n)
	d.counter = c
	return nil
}
