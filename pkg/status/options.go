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
}

// DefaultOptions returns the defaults the flags show.
func DefaultOptions() Options {
	return Options{QueueSize: 1024, Interval: time.Minute, WriteTimeout: 10 * time.Second}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	d := DefaultOptions()
	fs.IntVar(&o.QueueSize, "status-queue-size", d.QueueSize, "proxy verdicts (ACK/NACK) waiting to be reported on Istio resources before new ones are dropped")
	fs.DurationVar(&o.Interval, "status-nack-interval", d.Interval, "least time between two reports (status condition and Event) of rejections of the same generation of one Istio resource")
	fs.DurationVar(&o.WriteTimeout, "status-write-timeout", d.WriteTimeout, "timeout of one status or Event write to the API server")
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
	return errors.Join(errs...)
}
