package jwks

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the Resolver. The defaults are istiod's.
type Options struct {
	// RefreshInterval is how often a key set is fetched again
	// (PILOT_JWT_PUB_KEY_REFRESH_INTERVAL).
	RefreshInterval time.Duration
	// RefreshIntervalOnFailure is the wait after a failed refresh,
	// doubled on each further failure up to MaxRefreshIntervalOnFailure.
	RefreshIntervalOnFailure    time.Duration
	MaxRefreshIntervalOnFailure time.Duration
	// RetryInterval separates the Retries retries of a refresh, and the
	// first fetch of a key set from its first refresh when it failed.
	RetryInterval time.Duration
	Retries       int
	// EvictionDuration is how long the last good keys are kept while
	// every refresh fails.
	EvictionDuration time.Duration
	// DefaultTimeout bounds a fetch whose rule sets no timeout;
	// MaxTimeout bounds every fetch.
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// MaxBytes is the largest response body read.
	MaxBytes int64
	// CABundle is a PEM file of further roots to trust for https URIs
	// (istiod reads /cacerts/extra.pem).
	CABundle string
	// InsecureSkipVerify skips https certificate checks
	// (JWKS_RESOLVER_INSECURE_SKIP_VERIFY).
	InsecureSkipVerify bool
	// BlockedCIDRs are addresses no fetch may connect to
	// (BLOCKED_CIDRS_IN_JWKS_URIS).
	BlockedCIDRs []string
	// Concurrency bounds the fetches in flight.
	Concurrency int
}

// DefaultOptions are istiod's settings.
func DefaultOptions() Options {
	return Options{
		RefreshInterval:             20 * time.Minute,
		RefreshIntervalOnFailure:    time.Minute,
		MaxRefreshIntervalOnFailure: time.Hour,
		RetryInterval:               time.Second,
		Retries:                     7,
		EvictionDuration:            7 * 24 * time.Hour,
		DefaultTimeout:              5 * time.Second,
		MaxTimeout:                  30 * time.Second,
		MaxBytes:                    1 << 20,
		Concurrency:                 8,
	}
}

// AddFlags registers the resolver's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.RefreshInterval, "jwks-refresh-interval", o.RefreshInterval,
		"How often the JWKS of a RequestAuthentication jwksUri is fetched again (istiod's PILOT_JWT_PUB_KEY_REFRESH_INTERVAL).")
	fs.DurationVar(&o.MaxTimeout, "jwks-max-timeout", o.MaxTimeout, "Upper bound of a JWKS fetch, whatever the rule's timeout.")
	fs.Int64Var(&o.MaxBytes, "jwks-max-bytes", o.MaxBytes, "Largest JWKS (or OpenID configuration) body read; a larger one fails the fetch.")
	fs.StringVar(&o.CABundle, "jwks-ca-bundle", o.CABundle, "PEM file of further root certificates to trust when fetching https JWKS URIs (istiod: /cacerts/extra.pem).")
	fs.BoolVar(&o.InsecureSkipVerify, "jwks-insecure-skip-verify", o.InsecureSkipVerify, "Do not verify the certificates of https JWKS servers (istiod's JWKS_RESOLVER_INSECURE_SKIP_VERIFY).")
	fs.StringSliceVar(&o.BlockedCIDRs, "jwks-blocked-cidrs", o.BlockedCIDRs, "CIDR ranges a JWKS fetch may not connect to (istiod's BLOCKED_CIDRS_IN_JWKS_URIS).")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{
		"refresh interval": o.RefreshInterval, "refresh interval on failure": o.RefreshIntervalOnFailure,
		"max refresh interval on failure": o.MaxRefreshIntervalOnFailure, "retry interval": o.RetryInterval,
		"eviction duration": o.EvictionDuration, "default timeout": o.DefaultTimeout, "max timeout": o.MaxTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("jwks: the %s must be positive", name))
		}
	}
	if o.MaxBytes <= 0 || o.Concurrency <= 0 || o.Retries < 0 {
		errs = append(errs, errors.New("jwks: max bytes and concurrency must be positive, retries not negative"))
	}
	if _, err := o.blocked(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (o *Options) blocked() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range o.BlockedCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("jwks: blocked CIDR %q: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
