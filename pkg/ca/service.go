package ca

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

// MaxRequestBytes bounds a whole CreateCertificate request (CSR and metadata).
const MaxRequestBytes = 32 << 10

// ImpersonatedIdentityKey is the request metadata field in which a trusted
// node agent names the identity (a SPIFFE ID) it asks a certificate for.
const ImpersonatedIdentityKey = "ImpersonatedIdentity"

// service implements IstioCertificateService.
type service struct {
	pb.UnimplementedIstioCertificateServiceServer

	log           *slog.Logger
	signer        Signer
	authn         *authenticators
	trustDomain   string
	defaultTTL    time.Duration
	maxTTL        time.Duration
	impersonators map[string]bool // "<ns>/<sa>"
	limits        *csrLimits
	refusals      *refusalLog
	metrics       *metrics
}

var _ pb.IstioCertificateServiceServer = (*service)(nil)

// register adds the service to s.
func (s *service) register(g *grpc.Server) { pb.RegisterIstioCertificateServiceServer(g, s) }

// CreateCertificate authenticates the caller, checks the CSR against the
// caller's identity and returns the signed chain, leaf first.
func (s *service) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	start := time.Now()
	s.metrics.csrs.Inc()
	chain, log, err := s.create(ctx, req)
	if err != nil {
		return nil, s.refusal(ctx, log, err)
	}
	s.metrics.issued.Inc()
	s.metrics.signLatency.Observe(time.Since(start).Seconds())
	return &pb.IstioCertificateResponse{CertChain: chain}, nil
}

// create returns the chain, or an error; log carries what is known of the
// caller so far. The order is the cost: what is cheap to refuse is refused
// first, and only authenticated callers spend the CSR budgets (their
// identity's and the replica's), so unauthenticated junk cannot take them.
func (s *service) create(ctx context.Context, req *pb.IstioCertificateRequest) ([]string, *slog.Logger, error) {
	log := s.log
	if p, ok := peer.FromContext(ctx); ok {
		log = log.With("peer", p.Addr.String())
	}
	if n := proto.Size(req); n > MaxRequestBytes {
		return nil, log, refuse(ReasonInvalidRequest, nil, "request of %d bytes is over the limit of %d", n, MaxRequestBytes)
	}
	caller, method, err := s.authn.authenticate(ctx)
	if err != nil {
		s.metrics.authnFailures.Inc()
		return nil, log, err
	}
	log = log.With("caller", caller.SPIFFEID(), "authn", method)
	subject, err := s.subject(caller, req)
	if err != nil {
		s.metrics.idErrors.Inc()
		return nil, log, err
	}
	if scope, err := s.limits.admit(subject); err != nil {
		s.metrics.throttled.Inc()
		if scope == scopeIdentity {
			s.metrics.identityThrottled.Inc()
		}
		return nil, log.With("identity", subject.SPIFFEID()), err
	}
	ttl, err := s.ttl(req.GetValidityDuration())
	if err != nil {
		return nil, log, err
	}
	csr, err := ParseCSR([]byte(req.GetCsr()))
	if err != nil {
		s.metrics.parseErrors.Inc()
		return nil, log, err
	}
	if err := checkSANs(csr, subject); err != nil {
		s.metrics.idErrors.Inc()
		return nil, log, err
	}
	chain, leaf, err := s.signer.SignWorkload(csr.PublicKey, subject, ttl)
	if err != nil {
		s.metrics.signErrors.Inc()
		return nil, log, err
	}
	log.Debug("issued certificate", "identity", subject.SPIFFEID(), "serial", leaf.SerialNumber.Text(16),
		"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	return chain, log, nil
}

// subject is the identity the certificate is for: the caller's own, or the
// ImpersonatedIdentity when the caller is a trusted node agent.
func (s *service) subject(caller Identity, req *pb.IstioCertificateRequest) (Identity, error) {
	v, ok := req.GetMetadata().GetFields()[ImpersonatedIdentityKey]
	if !ok {
		return caller, nil
	}
	if !s.impersonators[caller.key()] {
		return Identity{}, refuse(ReasonPermissionDenied, nil, "caller may not impersonate (not in --impersonators)")
	}
	target, err := ParseSPIFFEID(v.GetStringValue())
	if err != nil {
		return Identity{}, refuse(ReasonInvalidRequest, err, "ImpersonatedIdentity")
	}
	if target.TrustDomain != s.trustDomain {
		return Identity{}, refuse(ReasonPermissionDenied, nil, "ImpersonatedIdentity is in trust domain %q, not %q", clip(target.TrustDomain), s.trustDomain)
	}
	return target, nil
}

// ttl turns the requested validity (seconds, 0 for the default) into a
// lifetime; above the maximum the request is refused.
func (s *service) ttl(seconds int64) (time.Duration, error) {
	switch {
	case seconds == 0:
		return s.defaultTTL, nil
	case seconds < 0:
		return 0, refuse(ReasonInvalidRequest, nil, "negative validity_duration %d", seconds)
	case seconds > int64(s.maxTTL/time.Second):
		return 0, refuse(ReasonInvalidRequest, nil, "validity_duration %ds is above the maximum %s", seconds, s.maxTTL)
	}
	return time.Duration(seconds) * time.Second, nil
}

// refusal counts the refusal, logs its full reason (unless the refusals of
// that reason are over the log limit; untrusted text in it is clipped) and
// returns the opaque status for the caller.
func (s *service) refusal(ctx context.Context, log *slog.Logger, err error) error {
	r := reasonOf(err)
	code, msg := r.code()
	s.metrics.refusals.WithLabelValues(r.String()).Inc()
	if !s.refusals.allow(r) {
		return status.Error(code, msg)
	}
	level := slog.LevelWarn
	if r == ReasonInternal {
		level = slog.LevelError
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Reason: r, Detail: "internal", Err: err}
	}
	log.Log(ctx, level, "certificate request refused", "code", code.String(), "reason", clipTo(e.Error(), maxDetailLog))
	return status.Error(code, msg)
}
