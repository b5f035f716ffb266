package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// servingRetry is the pause after a failed renewal.
const servingRetry = 10 * time.Second

// servingCert is the control plane's own TLS certificate, issued by the CA
// for its service names and renewed at half its life or when the CA changes.
type servingCert struct {
	authority *Authority
	names     []string
	ttl       time.Duration
	log       *slog.Logger
	now       func() time.Time

	cur atomic.Pointer[tls.Certificate]
}

// issue creates a new key and certificate and puts them in force.
func (s *servingCert) issue() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	_, leaf, err := s.authority.signServing(key.Public(), s.names, s.ttl)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	b := s.authority.Bundle()
	cert := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, c := range b.Chain {
		if !c.Equal(b.Root) {
			cert.Certificate = append(cert.Certificate, c.Raw)
		}
	}
	s.cur.Store(cert)
	s.log.Info("issued serving certificate", "names", s.names, "notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// renewAt is when the certificate in force should be replaced.
func (s *servingCert) renewAt() time.Time {
	leaf := s.cur.Load().Leaf
	return leaf.NotBefore.Add(backdate).Add(leaf.NotAfter.Sub(leaf.NotBefore.Add(backdate)) / 2)
}

// run renews the certificate until ctx ends.
func (s *servingCert) run(ctx context.Context) error {
	for {
		_, changed := s.authority.Watch()
		wait := s.renewAt().Sub(s.now())
		if s.cur.Load().Leaf.NotAfter.Before(s.now()) || wait < 0 {
			wait = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
			t.Stop()
		case <-t.C:
		}
		if err := s.issue(); err != nil {
			s.log.Error("renew serving certificate", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(servingRetry):
			}
		}
	}
}

// getCertificate serves the certificate in force.
func (s *servingCert) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := s.cur.Load()
	if c == nil {
		return nil, errors.New("no serving certificate")
	}
	return c, nil
}

// serverTLSConfig is a TLS config for a server on :15012: the serving
// certificate in force, and client certificates verified, if given, against
// the CA in force (the root and the signing certificate).
func serverTLSConfig(s *servingCert) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{
				MinVersion:     tls.VersionTLS12,
				NextProtos:     []string{"h2"},
				GetCertificate: s.getCertificate,
				ClientAuth:     tls.VerifyClientCertIfGiven,
				ClientCAs:      s.authority.Bundle().clientCAs,
			}, nil
		},
	}
}
