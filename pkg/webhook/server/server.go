package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the webhook HTTPS server.
type Options struct {
	// Addr is where the server listens, ":15017" by default.
	Addr string
	// ShutdownTimeout bounds how long in-flight requests may finish once
	// the server is asked to stop.
	ShutdownTimeout time.Duration

	// Zero in any limit below means its default.

	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, AdmissionReview body
	// included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers to the end of the
	// answer. The API server waits at most 30s for a webhook
	// (timeoutSeconds), so 30s cuts no answer it would still take.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle between requests
	// this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		Addr: ":15017", ShutdownTimeout: 5 * time.Second,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 90 * time.Second, MaxHeaderBytes: 64 << 10,
	}
}

// withDefaults fills the limits left zero.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	for _, f := range []struct{ v, def *time.Duration }{
		{&o.ReadHeaderTimeout, &d.ReadHeaderTimeout},
		{&o.ReadTimeout, &d.ReadTimeout},
		{&o.WriteTimeout, &d.WriteTimeout},
		{&o.IdleTimeout, &d.IdleTimeout},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return o
}

// AddFlags registers the server's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "webhook-address", o.Addr, "Address of the HTTPS server for the webhooks /inject and /validate.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return fmt.Errorf("--webhook-address %q: %w", o.Addr, err)
	}
	if o.ShutdownTimeout <= 0 {
		return errors.New("webhook server: shutdown timeout must be positive")
	}
	if o.ReadHeaderTimeout < 0 || o.ReadTimeout < 0 || o.WriteTimeout < 0 || o.IdleTimeout < 0 || o.MaxHeaderBytes < 0 {
		return errors.New("webhook server: timeouts and the header limit must not be negative")
	}
	return nil
}

// Server serves /inject and /validate over HTTPS.
type Server struct {
	opts Options
	srv  *http.Server
	log  *slog.Logger
}

// New builds the server. tlsConfig must provide the serving certificate
// (Certificates, GetCertificate or GetConfigForClient); the CA's
// ServerTLSConfig does, and renews the certificate without a restart.
// A nil handler leaves its path unserved.
func New(opts Options, tlsConfig *tls.Config, inject, validate http.Handler, log *slog.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if tlsConfig == nil || (len(tlsConfig.Certificates) == 0 && tlsConfig.GetCertificate == nil && tlsConfig.GetConfigForClient == nil) {
		return nil, errors.New("webhook server: the TLS config has no certificate")
	}
	tc := tlsConfig.Clone()
	if tc.MinVersion < tls.VersionTLS12 {
		tc.MinVersion = tls.VersionTLS12
	}
	mux := http.NewServeMux()
	if inject != nil {
		mux.Handle("/inject", inject)
		mux.Handle("/inject/", inject) // Istio's clients may add a path suffix
	}
	if validate != nil {
		mux.Handle("/validate", validate)
		mux.Handle("/validate/", validate)
	}
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	log = log.With("component", "webhook-server")
	return &Server{
		opts: opts,
		log:  log,
		srv: &http.Server{
			Handler:           mux,
			TLSConfig:         tc,
			ReadHeaderTimeout: opts.ReadHeaderTimeout,
			ReadTimeout:       opts.ReadTimeout,
			WriteTimeout:      opts.WriteTimeout,
			IdleTimeout:       opts.IdleTimeout,
			MaxHeaderBytes:    opts.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
	}, nil
}

// Start listens on Options.Addr and serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("webhook server: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then lets in-flight requests finish
// (up to ShutdownTimeout). It returns nil after a clean stop.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("serving webhooks", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- s.srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("webhook server shutdown: %w", err)
	}
	return nil
}
