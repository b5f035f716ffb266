package status

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the Reporter.
type Options struct {
	// QueueSize is how many verdicts wait for the Reporter before new ones
	// are dropped.
	QueueSize int
	// Interval is the least time between two reports (condition write and
	// Event) on one config for the same generation.
	Interval time.Duration
	// WriteTimeout bounds one write to the API server.
	WriteTimeout time.Duration
	// UnsupportedQPS and UnsupportedBurst limit the Auditor's status
	// reconciliations (each a read, and a write when something changed).
	UnsupportedQPS   float64
	UnsupportedBurst int
}

// DefaultOptions returns the defaults the flags show.
func DefaultOptions() Options {
	return Options{QueueSize: 1024, Interval: time.Minute, WriteTimeout: 10 * time.Second, UnsupportedQPS: 5, UnsupportedBurst: 20}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	d := DefaultOptions()
	fs.IntVar(&o.QueueSize, "status-queue-size", d.QueueSize, "proxy verdicts (ACK/NACK) waiting to be reported on Istio resources before new ones are dropped")
	fs.DurationVar(&o.Interval, "status-nack-interval", d.Interval, "least time between two reports (status condition and Event) of rejections of the same generation of one Istio resource")
	fs.DurationVar(&o.WriteTimeout, "status-write-timeout", d.WriteTimeout, "timeout of one status or Event write to the API server")
	fs.Float64Var(&o.UnsupportedQPS, "status-unsupported-qps", d.UnsupportedQPS, "most status updates per second of the "+UnsupportedConditionType+" condition (fields discovery ignores) on Istio resources")
	fs.IntVar(&o.UnsupportedBurst, "status-unsupported-burst", d.UnsupportedBurst, "burst of status updates of the "+UnsupportedConditionType+" condition above --status-unsupported-qps")
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.QueueSize < 1 {
		errs = append(errs, fmt.Errorf("--status-queue-size must be at least 1, got %d", o.QueueSize))
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("--status-nack-interval must not be negative, got %s", o.Interval))
	}
	if o.WriteTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--status-write-timeout must be positive, got %s", o.WriteTimeout))
	}
	if o.UnsupportedQPS <= 0 {
		errs = append(errs, fmt.Errorf("--status-unsupported-qps must be positive, got %v", o.UnsupportedQPS))
	}
	if o.UnsupportedBurst < 1 {
		errs = append(errs, fmt.Errorf("--status-unsupported-burst must be at least 1, got %d", o.UnsupportedBurst))
	}
	return errors.Join(errs...)
}
