package kube

import (
	"errors"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the Kubernetes source.
type Options struct {
	// ResyncPeriod makes every informer hand its whole cache to the Sink
	// again this often; 0 (the default) turns resyncs off. The Store skips
	// objects that did not change, so a resync costs CPU and publishes
	// nothing; it exists to repair a Sink that missed an event.
	ResyncPeriod time.Duration
	// MeshNamespace and MeshConfigMap name the mesh's ConfigMap (istio
	// in the control plane's namespace), watched alone and handed over as
	// KindConfigMap events; empty turns it off. Set by the wiring.
	MeshNamespace, MeshConfigMap string
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options { return Options{} }

// AddFlags registers the options' flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.ResyncPeriod, "kube-resync-period", o.ResyncPeriod,
		"How often informers re-deliver every cached Kubernetes object (0 disables resyncs)")
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.ResyncPeriod < 0 {
		return errors.New("--kube-resync-period must not be negative")
	}
	if o.ResyncPeriod > 0 && o.ResyncPeriod < time.Second {
		return errors.New("--kube-resync-period must be 0 (off) or at least 1s")
	}
	return nil
}
