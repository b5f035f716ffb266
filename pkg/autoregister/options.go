package autoregister

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Options configure WorkloadEntry auto-registration.
type Options struct {
	// Enabled turns auto-registration on (istiod's
	// PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION); off, a proxy that
	// asks for it is served without an entry, and that is logged.
	Enabled bool
	// GracePeriod is how long an entry outlives its proxy's last stream
	// (istiod's PILOT_WORKLOAD_ENTRY_GRACE_PERIOD): a proxy that
	// reconnects within it keeps its entry.
	GracePeriod time.Duration
	// MaxConnectionAge is the serve command's --max-stream-age: an entry
	// still marked connected 1.5 times that long after its connection was
	// recorded belongs to a replica that died, and the leader's sweep
	// deletes it (istiod's rule). 0 means streams have no age limit.
	MaxConnectionAge time.Duration
	// Replica names this replica in istio.io/workloadController: its
	// Pod's name. Required.
	Replica string
	// RequestTimeout bounds each API call.
	RequestTimeout time.Duration
	// MaxRetryDelay caps the back-off between attempts for one entry.
	MaxRetryDelay time.Duration
}

// DefaultOptions returns istiod's defaults.
func DefaultOptions() Options {
	return Options{Enabled: true, GracePeriod: 10 * time.Second, RequestTimeout: 10 * time.Second, MaxRetryDelay: 30 * time.Second}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	d := DefaultOptions()
	fs.BoolVar(&o.Enabled, "workload-entry-auto-registration", d.Enabled,
		"create a WorkloadEntry from its WorkloadGroup for a proxy whose node metadata names one (AUTO_REGISTER_GROUP) while it is connected, as istiod's PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION; needs a Kubernetes API server")
	fs.DurationVar(&o.GracePeriod, "workload-entry-grace-period", d.GracePeriod,
		"how long an auto-registered WorkloadEntry outlives its proxy's last xDS stream before it is deleted (istiod's PILOT_WORKLOAD_ENTRY_GRACE_PERIOD)")
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.GracePeriod <= 0 {
		errs = append(errs, fmt.Errorf("--workload-entry-grace-period must be positive, got %s", o.GracePeriod))
	}
	if o.RequestTimeout <= 0 || o.MaxRetryDelay <= 0 {
		errs = append(errs, fmt.Errorf("auto-registration request timeout (%s) and retry delay (%s) must be positive", o.RequestTimeout, o.MaxRetryDelay))
	}
	return errors.Join(errs...)
}

// staleAfter is how long an entry may stay marked connected before the
// sweep judges its replica dead: 1.5 times the stream age, as istiod.
func (o *Options) staleAfter() time.Duration {
	if o.MaxConnectionAge <= 0 {
		return 0
	}
	return o.MaxConnectionAge + o.MaxConnectionAge/2
}
