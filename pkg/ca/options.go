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
	// TokenCacheTTL is how long a successful TokenReview is reused (never
	// past the token's exp).
	TokenCacheTTL time.Duration
	// TokenNegativeCacheTTL is how long a token the API server rejected is
	// refused without asking again. Short: a token is not rejected and then
	// accepted, except around the creation of its service account or pod.
	TokenNegativeCacheTTL time.Duration
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
	// CSRRateLimitPerIdentity is the number of CSRs per second one identity
	// (namespace/service account of the certificate) may have signed by one
	// replica, after a burst of CSRBurstPerIdentity; 0 disables it. It
	// keeps one workload (or a crash-looping Deployment) from spending the
	// replica's budget. The default is far above real use: pilot-agent asks
	// about once or twice a day per pod, and all pods of a Deployment share
	// one identity, so the burst lets 100 pods start at once and the rate
	// lets a scale-up of 1,000 pods through in about 90 s (agents retry).
	CSRRateLimitPerIdentity float64
	// CSRBurstPerIdentity is the burst allowed above CSRRateLimitPerIdentity.
	CSRBurstPerIdentity int
	// AuthnFailureRateLimit is the rate of failed authentications (CSRs and
	// xDS streams) whose cost the replica accepts, after a burst of
	// AuthnFailureBurst. Once it is spent, callers that failed recently are
	// refused without a TokenReview; callers with no recent failure are
	// still reviewed. It never touches the CSR budget. 0 disables it.
	AuthnFailureRateLimit float64
	// AuthnFailureBurst is the burst allowed above AuthnFailureRateLimit.
	AuthnFailureBurst int
	// AuthnFailureRateLimitPerPeer is the same budget for one peer address;
	// once spent, that address is refused without a TokenReview (client
	// certificates and cached tokens from it still pass). 0 disables it
	// (for callers that reach the CA through one NAT or gateway address).
	AuthnFailureRateLimitPerPeer float64
	// AuthnFailureBurstPerPeer is the burst allowed above
	// AuthnFailureRateLimitPerPeer.
	AuthnFailureBurstPerPeer int
	// RefusalLogBurst is how many refusals of one reason are logged in full
	// per RefusalLogInterval; the rest are counted and summed up in one line.
	// 0 logs every refusal.
	RefusalLogBurst int
	// RefusalLogInterval is the window of RefusalLogBurst.
	RefusalLogInterval time.Duration
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
		TrustDomain:           "cluster.local",
		Namespace:             "istio-system",
		TokenAudience:         "istio-ca",
		TokenCacheTTL:         30 * time.Second,
		TokenNegativeCacheTTL: 5 * time.Second,
		DefaultCertTTL:        24 * time.Hour,
		MaxCertTTL:            24 * time.Hour,
		KeyType:               KeyTypeECDSA,
		CSRRateLimit:          100,
		CSRBurst:              200,

		CSRRateLimitPerIdentity:      10,
		CSRBurstPerIdentity:          100,
		AuthnFailureRateLimit:        10,
		AuthnFailureBurst:            50,
		AuthnFailureRateLimitPerPeer: 1,
		AuthnFailureBurstPerPeer:     10,
		RefusalLogBurst:              10,
		RefusalLogInterval:           10 * time.Second,

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
	fs.DurationVar(&o.TokenNegativeCacheTTL, "token-review-negative-cache-ttl", o.TokenNegativeCacheTTL, "how long a token the API server rejected is refused without another TokenReview (0: no cache)")
	fs.Float64Var(&o.CSRRateLimitPerIdentity, "csr-rate-limit-per-identity", o.CSRRateLimitPerIdentity, "CSRs per second this replica signs for one identity (namespace/service account, shared by a Deployment's pods); beyond it RESOURCE_EXHAUSTED (0: no limit)")
	fs.IntVar(&o.CSRBurstPerIdentity, "csr-burst-per-identity", o.CSRBurstPerIdentity, "CSRs allowed in a burst above --csr-rate-limit-per-identity (pods of one identity starting at once)")
	fs.Float64Var(&o.AuthnFailureRateLimit, "authn-failure-rate-limit", o.AuthnFailureRateLimit, "failed authentications per second (CSRs and xDS) worth a TokenReview; once spent, callers that failed recently are refused without one (0: no limit)")
	fs.IntVar(&o.AuthnFailureBurst, "authn-failure-burst", o.AuthnFailureBurst, "failed authentications allowed in a burst above --authn-failure-rate-limit")
	fs.Float64Var(&o.AuthnFailureRateLimitPerPeer, "authn-failure-rate-limit-per-peer", o.AuthnFailureRateLimitPerPeer, "failed authentications per second from one peer IP worth a TokenReview (0: no per-peer limit, e.g. behind a NAT or gateway)")
	fs.IntVar(&o.AuthnFailureBurstPerPeer, "authn-failure-burst-per-peer", o.AuthnFailureBurstPerPeer, "failed authentications allowed in a burst above --authn-failure-rate-limit-per-peer")
	fs.IntVar(&o.RefusalLogBurst, "ca-refusal-log-burst", o.RefusalLogBurst, "refused certificate requests of one reason logged in full per --ca-refusal-log-interval; the rest are counted and summarized (0: log all)")
	fs.DurationVar(&o.RefusalLogInterval, "ca-refusal-log-interval", o.RefusalLogInterval, "window of --ca-refusal-log-burst")
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
	errs = append(errs, o.validateLimits()...)
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

// validateLimits checks the caches, rate limits and the refusal log.
func (o *Options) validateLimits() []error {
	var errs []error
	if o.TokenCacheTTL < 0 || o.TokenNegativeCacheTTL < 0 {
		errs = append(errs, fmt.Errorf("--token-review-cache-ttl %s and --token-review-negative-cache-ttl %s must not be negative",
			o.TokenCacheTTL, o.TokenNegativeCacheTTL))
	}
	limits := []struct {
		name  string
		rate  float64
		burst int
	}{
		{"csr-rate-limit", o.CSRRateLimit, o.CSRBurst},
		{"csr-rate-limit-per-identity", o.CSRRateLimitPerIdentity, o.CSRBurstPerIdentity},
		{"authn-failure-rate-limit", o.AuthnFailureRateLimit, o.AuthnFailureBurst},
		{"authn-failure-rate-limit-per-peer", o.AuthnFailureRateLimitPerPeer, o.AuthnFailureBurstPerPeer},
	}
	for _, l := range limits {
		if l.rate < 0 || (l.rate > 0 && l.burst < 1) {
			burst := strings.Replace(l.name, "rate-limit", "burst", 1)
			errs = append(errs, fmt.Errorf("--%s %g must be >= 0 and --%s %d >= 1", l.name, l.rate, burst, l.burst))
		}
	}
	if o.RefusalLogBurst < 0 || (o.RefusalLogBurst > 0 && o.RefusalLogInterval <= 0) {
		errs = append(errs, fmt.Errorf("--ca-refusal-log-burst %d must be >= 0 and --ca-refusal-log-interval %s above 0",
			o.RefusalLogBurst, o.RefusalLogInterval))
	}
	return errs
}

// servingNames are the DNS names of the control plane's serving certificate.
func (o *Options) servingNames() []string {
	names := []string{"istiod." + o.Namespace + ".svc", "discovery." + o.Namespace + ".svc"}
	if o.Revision != "" && o.Revision != "default" {
		names = append(names, "istiod-"+o.Revision+"."+o.Namespace+".svc", "discovery-"+o.Revision+"."+o.Namespace+".svc")
	}
	return append(names, o.ExtraServingNames...)
}
