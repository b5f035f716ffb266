package ca

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// MaxCertTTLLimit is the longest --max-cert-ttl accepted: 90 days.
const MaxCertTTLLimit = 90 * 24 * time.Hour

// Options configure the CA. TrustDomain, Namespace and Revision come from the
// serve command's own flags; the rest are the CA's flags.
type Options struct {
	// TrustDomain is the SPIFFE trust domain (for example cluster.local).
	TrustDomain string
	// Namespace is where the control plane runs: the CA Secrets live there
	// and the serving certificate names istiod.<ns>.svc.
	Namespace string
	// Revision is the control plane's revision; "" or "default" for none.
	Revision string

	// Dir holds the CA in file mode (no API server): ca-cert.pem,
	// ca-key.pem, cert-chain.pem, root-cert.pem. A self-signed root is
	// created there when it is empty.
	Dir string
	// TokenFile (file mode) lists accepted bearer tokens, one per line:
	// "<token>,<namespace>,<service account>".
	TokenFile string
	// TokenAudience is the audience a service-account token must carry.
	TokenAudience string
	// TokenCacheTTL is how long a successful TokenReview is reused.
	TokenCacheTTL time.Duration
	// DefaultCertTTL is the lifetime of a workload certificate when the
	// request does not say.
	DefaultCertTTL time.Duration
	// MaxCertTTL is the longest lifetime granted; a request for more is
	// refused. At most MaxCertTTLLimit.
	MaxCertTTL time.Duration
	// KeyType is the key of a self-signed root: ECDSA (P-256) or RSA (2048).
	KeyType string
	// Impersonators are the service accounts ("<ns>/<sa>") allowed to ask for
	// another identity with the request metadata field ImpersonatedIdentity.
	Impersonators []string
	// CSRRateLimit is the number of CSRs per second one replica accepts;
	// beyond it (after a burst of CSRBurst) callers get RESOURCE_EXHAUSTED.
	// 0 disables the limit.
	CSRRateLimit float64
	// CSRBurst is the burst allowed above CSRRateLimit.
	CSRBurst int
	// ServingCertTTL is the lifetime of the control plane's own serving
	// certificate; it is renewed at half of it.
	ServingCertTTL time.Duration
	// RootPollInterval is how often file mode looks for a changed CA directory.
	RootPollInterval time.Duration
	// ExtraServingNames are further DNS names or IP addresses in the
	// serving certificate, for callers that reach the control plane by
	// another name (a remote installation's address, a webhook URL).
	ExtraServingNames []string
	// PublishToSystemNamespaces also publishes istio-ca-root-cert to
	// kube-system, kube-public and kube-node-lease.
	PublishToSystemNamespaces bool
}

// DefaultOptions are the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		TrustDomain:      "cluster.local",
		Namespace:        "istio-system",
		TokenAudience:    "istio-ca",
		TokenCacheTTL:    30 * time.Second,
		DefaultCertTTL:   24 * time.Hour,
		MaxCertTTL:       24 * time.Hour,
		KeyType:          KeyTypeECDSA,
		CSRRateLimit:     100,
		CSRBurst:         200,
		ServingCertTTL:   24 * time.Hour,
		RootPollInterval: 10 * time.Second,
	}
}

// AddFlags registers the CA's flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Dir, "ca-dir", o.Dir, "file mode: directory holding the CA (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem); a self-signed root is created there if empty")
	fs.StringVar(&o.TokenFile, "ca-token-file", o.TokenFile, "file mode: file of accepted bearer tokens, one \"token,namespace,serviceaccount\" per line")
	fs.StringVar(&o.TokenAudience, "token-audience", o.TokenAudience, "audience a service-account token must carry to be accepted by the CA")
	fs.DurationVar(&o.TokenCacheTTL, "token-review-cache-ttl", o.TokenCacheTTL, "how long a successful TokenReview is reused (0: no cache)")
	fs.DurationVar(&o.DefaultCertTTL, "default-cert-ttl", o.DefaultCertTTL, "lifetime of a workload certificate when the request does not ask for one")
	fs.DurationVar(&o.MaxCertTTL, "max-cert-ttl", o.MaxCertTTL, "longest workload certificate lifetime granted; longer requests are refused (at most 90 days)")
	fs.StringVar(&o.KeyType, "ca-key-type", o.KeyType, "key type of a self-signed root: ECDSA (P-256) or RSA (2048 bits)")
	fs.StringSliceVar(&o.Impersonators, "impersonators", o.Impersonators, "service accounts (namespace/name) allowed to request certificates for other identities (ImpersonatedIdentity)")
	fs.Float64Var(&o.CSRRateLimit, "csr-rate-limit", o.CSRRateLimit, "CSRs per second this replica signs; beyond it callers get RESOURCE_EXHAUSTED (0: no limit)")
	fs.IntVar(&o.CSRBurst, "csr-burst", o.CSRBurst, "CSRs allowed in a burst above --csr-rate-limit")
	fs.DurationVar(&o.ServingCertTTL, "serving-cert-ttl", o.ServingCertTTL, "lifetime of the control plane's own TLS certificate (renewed at half of it)")
	fs.StringSliceVar(&o.ExtraServingNames, "serving-cert-extra-names", o.ExtraServingNames, "further DNS names or IP addresses for the control plane's serving certificate (for proxies or webhooks that reach it by another name, such as a remote installation's address)")
	fs.BoolVar(&o.PublishToSystemNamespaces, "ca-publish-system-namespaces", o.PublishToSystemNamespaces, "also publish istio-ca-root-cert to kube-system, kube-public and kube-node-lease")
}

// Validate reports every invalid field at once.
func (o *Options) Validate() error {
	var errs []error
	if o.TrustDomain == "" || strings.ContainsAny(o.TrustDomain, "/:@ ") {
		errs = append(errs, fmt.Errorf("trust domain %q is not a valid SPIFFE trust domain", o.TrustDomain))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("namespace is required"))
	}
	if o.TokenAudience == "" {
		errs = append(errs, errors.New("--token-audience must not be empty"))
	}
	if o.MaxCertTTL <= 0 || o.MaxCertTTL > MaxCertTTLLimit {
		errs = append(errs, fmt.Errorf("--max-cert-ttl %s must be above 0 and at most %s", o.MaxCertTTL, MaxCertTTLLimit))
	}
	if o.DefaultCertTTL <= 0 || o.DefaultCertTTL > o.MaxCertTTL {
		errs = append(errs, fmt.Errorf("--default-cert-ttl %s must be above 0 and at most --max-cert-ttl %s", o.DefaultCertTTL, o.MaxCertTTL))
	}
	if o.KeyType != KeyTypeECDSA && o.KeyType != KeyTypeRSA {
		errs = append(errs, fmt.Errorf("--ca-key-type %q must be %s or %s", o.KeyType, KeyTypeECDSA, KeyTypeRSA))
	}
	for _, s := range o.Impersonators {
		if ns, sa, ok := strings.Cut(s, "/"); !ok || ns == "" || sa == "" || strings.Contains(sa, "/") {
			errs = append(errs, fmt.Errorf("--impersonators entry %q is not namespace/serviceaccount", s))
		}
	}
	if o.CSRRateLimit < 0 || (o.CSRRateLimit > 0 && o.CSRBurst < 1) {
		errs = append(errs, fmt.Errorf("--csr-rate-limit %g must be >= 0 and --csr-burst %d >= 1", o.CSRRateLimit, o.CSRBurst))
	}
	if o.TokenCacheTTL < 0 {
		errs = append(errs, fmt.Errorf("--token-review-cache-ttl %s must not be negative", o.TokenCacheTTL))
	}
	if o.ServingCertTTL < 10*time.Minute || o.ServingCertTTL > MaxCertTTLLimit {
		errs = append(errs, fmt.Errorf("--serving-cert-ttl %s must be between 10m and %s", o.ServingCertTTL, MaxCertTTLLimit))
	}
	if o.RootPollInterval <= 0 {
		errs = append(errs, errors.New("root poll interval must be above 0"))
	}
	for _, n := range o.ExtraServingNames {
		if net.ParseIP(n) == nil && (n == "" || strings.ContainsAny(n, "/:@ ")) {
			errs = append(errs, fmt.Errorf("--serving-cert-extra-names entry %q is neither a DNS name nor an IP address", n))
		}
	}
	if o.TokenFile != "" && o.Dir == "" {
		errs = append(errs, errors.New("--ca-token-file is for file mode and needs --ca-dir"))
	}
	return errors.Join(errs...)
}

// servingNames are the DNS names of the control plane's serving certificate.
func (o *Options) servingNames() []string {
	names := []string{"istiod." + o.Namespace + ".svc", "discovery." + o.Namespace + ".svc"}
	if o.Revision != "" && o.Revision != "default" {
		names = append(names, "istiod-"+o.Revision+"."+o.Namespace+".svc", "discovery-"+o.Revision+"."+o.Namespace+".svc")
	}
	return append(names, o.ExtraServingNames...)
}
