package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the xDS server.
type Options struct {
	// DebounceAfter is how long the World must be quiet before a push.
	DebounceAfter time.Duration
	// DebounceMax is the longest a change waits for a push.
	DebounceMax time.Duration
	// PushConcurrency is how many proxies are prepared for a push at once.
	PushConcurrency int
	// SendTimeout closes a stream whose proxy does not read a response
	// within this time (0: never).
	SendTimeout time.Duration
	// MaxUnackedPushes closes a stream whose proxy has not answered its
	// last response while this many further pushes for it came and went.
	MaxUnackedPushes int
	// PushStatusSize is how many pushes /debug/push_status remembers.
	PushStatusSize int
	// TrustDomain is the SPIFFE trust domain of workload identities (the
	// serve command's --trust-domain); "" means cluster.local.
	TrustDomain string
}

// DefaultOptions returns the defaults the flags show.
func DefaultOptions() Options {
	return Options{
		DebounceAfter:    100 * time.Millisecond,
		DebounceMax:      10 * time.Second,
		PushConcurrency:  16,
		SendTimeout:      30 * time.Second,
		MaxUnackedPushes: 100,
		PushStatusSize:   100,
	}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	d := DefaultOptions()
	fs.DurationVar(&o.DebounceAfter, "debounce-after", d.DebounceAfter, "push once the configuration has been quiet for this long")
	fs.DurationVar(&o.DebounceMax, "debounce-max", d.DebounceMax, "push at the latest this long after a change, even if changes keep coming")
	fs.IntVar(&o.PushConcurrency, "push-concurrency", d.PushConcurrency, "proxies prepared for a push at once")
	fs.DurationVar(&o.SendTimeout, "xds-send-timeout", d.SendTimeout, "close an xDS stream whose proxy does not read a response within this time (0: never)")
	fs.IntVar(&o.MaxUnackedPushes, "xds-max-unacked-pushes", d.MaxUnackedPushes, "close an xDS stream whose proxy leaves its last response unanswered through this many pushes")
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.DebounceAfter <= 0 {
		errs = append(errs, fmt.Errorf("--debounce-after must be positive, got %s", o.DebounceAfter))
	}
	if o.DebounceMax < o.DebounceAfter {
		errs = append(errs, fmt.Errorf("--debounce-max (%s) must be at least --debounce-after (%s)", o.DebounceMax, o.DebounceAfter))
	}
	if o.PushConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--push-concurrency must be at least 1, got %d", o.PushConcurrency))
	}
	if o.SendTimeout < 0 {
		errs = append(errs, fmt.Errorf("--xds-send-timeout must not be negative, got %s", o.SendTimeout))
	}
	if o.MaxUnackedPushes < 1 {
		errs = append(errs, fmt.Errorf("--xds-max-unacked-pushes must be at least 1, got %d", o.MaxUnackedPushes))
	}
	return errors.Join(errs...)
}
