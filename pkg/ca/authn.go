package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Authenticator proves who the caller of an RPC is.
type Authenticator interface {
	// Name names the method in logs ("client-cert", "token-review", ...).
	Name() string
	// Authenticate returns the caller's identity; errNoCredential when the
	// call carries no credential of this kind; otherwise an error whose
	// detail is for the log only.
	Authenticate(ctx context.Context) (Identity, error)
}

// errNoCredential says an authenticator found nothing to check.
var errNoCredential = errors.New("no credential")

// authenticate tries each authenticator in order; the first that proves an
// identity wins. The refusal lists why each one failed; settled says an
// authenticator settled the failure budget for it.
func authenticate(ctx context.Context, authns []Authenticator) (Identity, string, bool, error) {
	var why []string
	settled := false
	for _, a := range authns {
		id, err := a.Authenticate(ctx)
		if err == nil {
			return id, a.Name(), false, nil
		}
		settled = settled || errors.Is(err, errSettled)
		if !errors.Is(err, errNoCredential) {
			why = append(why, a.Name()+": "+err.Error())
		}
	}
	if len(why) == 0 {
		return Identity{}, "", false, refuse(ReasonUnauthenticated, nil, "no client certificate and no bearer token")
	}
	return Identity{}, "", settled, refuse(ReasonUnauthenticated, nil, "%s", strings.Join(why, "; "))
}

// authenticators are the credentials the CA accepts, tried in order, and
// the budget that failed authentications share (nil: none).
type authenticators struct {
	list   []Authenticator
	budget *failureBudget
}

// authenticate proves the caller's identity; a failure is charged to the
// failure budget of the caller's address, unless a review settled it.
func (a *authenticators) authenticate(ctx context.Context) (Identity, string, error) {
	id, name, settled, err := authenticate(ctx, a.list)
	if err != nil && !settled {
		a.budget.fail(ctx)
	}
	return id, name, err
}

// clientCertAuthn accepts a TLS client certificate this CA issued: the
// certificate must chain to the current root and carry one SPIFFE URI SAN in
// the trust domain.
type clientCertAuthn struct {
	authority   *Authority
	trustDomain string
}

var _ Authenticator = (*clientCertAuthn)(nil)

func (*clientCertAuthn) Name() string { return "client-cert" }

func (c *clientCertAuthn) Authenticate(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, errNoCredential
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return Identity{}, errNoCredential
	}
	return verifyClientCert(info.State.PeerCertificates, c.authority.Bundle(), c.trustDomain)
}

// verifyClientCert checks a peer's chain (leaf first) against the bundle's
// root and returns the leaf's identity.
func verifyClientCert(certs []*x509.Certificate, b *Bundle, trustDomain string) (Identity, error) {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	for _, c := range b.Chain[1:] {
		inter.AddCert(c)
	}
	leaf := certs[0]
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         b.Pool(),
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		// x509's text quotes names from the peer's certificates.
		return Identity{}, fmt.Errorf("client certificate does not verify: %s", clip(err.Error()))
	}
	if len(leaf.URIs) != 1 {
		return Identity{}, fmt.Errorf("client certificate has %d URI SANs, want 1", len(leaf.URIs))
	}
	id, err := identityFromURI(leaf.URIs[0])
	if err != nil {
		return Identity{}, err
	}
	if id.TrustDomain != trustDomain {
		return Identity{}, fmt.Errorf("client certificate is for trust domain %q, not %q", id.TrustDomain, trustDomain)
	}
	return id, nil
}

// bearerToken returns the token of the call's "authorization: Bearer ..."
// metadata, or errNoCredential.
func bearerToken(ctx context.Context) (string, error) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", errNoCredential
	}
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", errNoCredential
	}
	if len(vals) > 1 {
		return "", errors.New("more than one authorization header")
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", errors.New("authorization header is not a bearer token")
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", errors.New("empty bearer token")
	}
	return token, nil
}
