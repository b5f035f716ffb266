package ca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
)

// CA is the certificate authority of one replica: its roots, the
// IstioCertificateService, and the control plane's serving certificate.
type CA struct {
	opts      Options
	client    kubernetes.Interface
	log       *slog.Logger
	metrics   *metrics
	roots     rootSource
	authority *Authority
	service   *service
	serving   *servingCert
}

// New loads (or, the first time, creates) the CA's roots and issues the
// serving certificate, so the CA can serve as soon as it returns. With a nil
// client the CA runs in file mode and needs opts.Dir.
func New(ctx context.Context, opts Options, client kubernetes.Interface, log *slog.Logger, reg prometheus.Registerer) (*CA, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log = log.With("component", "ca")
	c := &CA{opts: opts, client: client, log: log, metrics: newMetrics(reg)}
	switch {
	case opts.Dir != "":
		c.roots = &dirRoots{
			dir: opts.Dir, trustDomain: opts.TrustDomain, keyType: opts.KeyType,
			interval: opts.RootPollInterval, log: log, now: time.Now,
		}
	case client != nil:
		c.roots = &kubeRoots{
			client: client, namespace: opts.Namespace, trustDomain: opts.TrustDomain,
			keyType: opts.KeyType, log: log, now: time.Now,
		}
	default:
		return nil, errors.New("ca: no Kubernetes client and no --ca-dir")
	}
	b, err := c.roots.load(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	c.authority = NewAuthority(b)
	c.metrics.observeBundle(b)
	if c.service, err = c.newService(); err != nil {
		return nil, err
	}
	c.serving = &servingCert{authority: c.authority, names: opts.servingNames(), ttl: opts.ServingCertTTL, log: log, now: time.Now}
	if err := c.serving.issue(); err != nil {
		return nil, err
	}
	log.Info("CA ready", "root", b.Root.Subject.String(), "selfSigned", b.SelfSigned(),
		"rootNotAfter", b.Root.NotAfter.UTC().Format(time.RFC3339))
	return c, nil
}

func (c *CA) newService() (*service, error) {
	o := c.opts
	budget := newFailureBudget(o)
	authns := []Authenticator{&clientCertAuthn{authority: c.authority, trustDomain: o.TrustDomain}}
	if c.client != nil && o.Dir == "" {
		authns = append(authns, &tokenReviewAuthn{
			client: c.client, audience: o.TokenAudience, trustDomain: o.TrustDomain,
			cache: newTokenCache(o.TokenCacheTTL, o.TokenNegativeCacheTTL), budget: budget, metrics: c.metrics, now: time.Now,
		})
	}
	if o.TokenFile != "" {
		f, err := newFileTokenAuthn(o.TokenFile, o.TrustDomain)
		if err != nil {
			return nil, err
		}
		authns = append(authns, f)
	}
	s := &service{
		log: c.log, signer: c.authority, authn: &authenticators{list: authns, budget: budget}, trustDomain: o.TrustDomain,
		defaultTTL: o.DefaultCertTTL, maxTTL: o.MaxCertTTL, impersonators: map[string]bool{},
		limits: newCSRLimits(o), refusals: newRefusalLog(c.log, o.RefusalLogBurst, o.RefusalLogInterval, c.metrics), metrics: c.metrics,
	}
	for _, i := range o.Impersonators {
		s.impersonators[i] = true
	}
	return s, nil
}

// Start follows changes of the CA's roots and renews the serving
// certificate until ctx ends. Every replica runs it.
func (c *CA) Start(ctx context.Context) error {
	changed := make(chan struct{}, 1)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return c.roots.watch(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	})
	g.Go(func() error { return c.serving.run(ctx) })
	g.Go(func() error { return c.service.refusals.run(ctx) })
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				c.reload(ctx)
			}
		}
	})
	return g.Wait()
}

// reload reads the roots again; a bad or unreadable source keeps the bundle
// in force.
func (c *CA) reload(ctx context.Context) {
	b, err := c.roots.load(ctx, c.authority.Bundle())
	if err != nil {
		c.log.Error("reload CA: keeping the current one", "err", err)
		return
	}
	if c.authority.Set(b) {
		c.metrics.observeBundle(b)
		c.log.Info("CA changed", "root", b.Root.Subject.String(), "selfSigned", b.SelfSigned(),
			"rootNotAfter", b.Root.NotAfter.UTC().Format(time.RFC3339))
	}
}

// Register adds IstioCertificateService to s (the TLS server on :15012).
func (c *CA) Register(s *grpc.Server) { c.service.register(s) }

// ServerTLSConfig is the TLS config for :15012, shared by xDS and the CA:
// the serving certificate in force (renewed without restart) and client
// certificates verified against the CA when a client presents one.
func (c *CA) ServerTLSConfig() *tls.Config { return serverTLSConfig(c.serving) }

// RootPEM is the root in force, in PEM: what proxies must trust.
func (c *CA) RootPEM() []byte { return c.authority.Bundle().RootPEM() }

// Roots is a pool holding the root in force.
func (c *CA) Roots() *x509.CertPool { return c.authority.Bundle().Pool() }

// Authority is the signer, to watch for root changes (Watch) or to sign.
func (c *CA) Authority() *Authority { return c.authority }

// Authenticate proves who the caller of a gRPC call is, with the same
// credentials the CA accepts: a client certificate it issued, a
// service-account token (TokenReview), or in file mode a listed token. It
// returns the identity and the method that proved it; an error's detail is
// for the log only (untrusted text in it is clipped). The xDS server on
// :15012 uses it for every stream. Failures share the CA's authentication
// failure budget: a caller over it is refused without a TokenReview.
func (c *CA) Authenticate(ctx context.Context) (Identity, string, error) {
	return c.service.authn.authenticate(ctx)
}
