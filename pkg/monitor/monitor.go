// Package monitor serves the process's own health: Prometheus metrics and
// /debug/* on the monitoring port (:15014), and /ready and /healthz on the
// readiness port (:8080).
//
// In: a metrics registry, readiness checks, and debug handlers that other
// packages register on Mux. Out: two HTTP servers that stop gracefully when
// the context ends.
package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
)

// Options configure the monitoring and readiness servers.
type Options struct {
	// Addr is the monitoring address: /metrics and /debug/*.
	Addr string
	// ReadyAddr is the readiness address: /ready and /healthz.
	ReadyAddr string

	// The limits below apply to both servers; zero in any means its default.
	// There is no write timeout: it would cut a long answer such as
	// /debug/config_dump or /debug/configz of a big mesh half-way.

	// ReadHeaderTimeout bounds reading a request's headers, so that a
	// client sending them slowly cannot hold a connection.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (the
	// handlers here take GETs; it bounds a client trickling a body). It
	// does not limit how long a handler runs or writes.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle between requests
	// this long. It is longer than Prometheus's scrape interval, so a
	// scraper keeps its connection.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
}

// Default limits of the monitoring and readiness servers.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 30 * time.Second
	defaultIdleTimeout       = 90 * time.Second
	defaultMaxHeaderBytes    = 64 << 10
)

// DefaultOptions are Istio's ports and the default limits.
func DefaultOptions() Options {
	return Options{
		Addr: ":15014", ReadyAddr: ":8080",
		ReadHeaderTimeout: defaultReadHeaderTimeout, ReadTimeout: defaultReadTimeout,
		IdleTimeout: defaultIdleTimeout, MaxHeaderBytes: defaultMaxHeaderBytes,
	}
}

// withDefaults fills the limits left zero.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = d.ReadTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = d.IdleTimeout
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return o
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "monitoring-address", o.Addr, "Address of the monitoring server: Prometheus /metrics and /debug/* endpoints.")
	fs.StringVar(&o.ReadyAddr, "readiness-address", o.ReadyAddr, "Address of the readiness server: /ready (200 once every config source has synced) and /healthz.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	for flag, addr := range map[string]string{"--monitoring-address": o.Addr, "--readiness-address": o.ReadyAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: %w", flag, addr, err)
		}
	}
	if o.ReadHeaderTimeout < 0 || o.ReadTimeout < 0 || o.IdleTimeout < 0 || o.MaxHeaderBytes < 0 {
		return errors.New("monitoring server: timeouts and the header limit must not be negative")
	}
	return nil
}

// Server is the monitoring and readiness servers.
type Server struct {
	opts Options
	reg  *prometheus.Registry
	log  *slog.Logger
	mux  *http.ServeMux

	mu     sync.Mutex
	checks map[string]func() error
	debug  []string
	// listeners, once bound, so tests can learn ports chosen with :0.
	addrs chan [2]net.Addr
}

// New returns a Server exposing reg on /metrics. It registers the Go and
// process collectors in reg.
func New(opts Options, reg *prometheus.Registry, log *slog.Logger) *Server {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Server{opts: opts.withDefaults(), reg: reg, log: log, mux: http.NewServeMux(), checks: map[string]func() error{}, addrs: make(chan [2]net.Addr, 1)}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.mux.HandleFunc("GET /debug", s.index)
	s.mux.HandleFunc("GET /debug/{$}", s.index)
	return s
}

// HandleDebug registers h at /debug/<name> on the monitoring server.
func (s *Server) HandleDebug(name string, h http.Handler) {
	s.mu.Lock()
	s.debug = append(s.debug, name)
	s.mu.Unlock()
	s.mux.Handle("GET /debug/"+name, h)
}

// Handle registers h at path (GET) on the monitoring server, outside
// /debug: for the few paths Istio's tools read at istiod's monitoring
// port, such as /version.
func (s *Server) Handle(path string, h http.Handler) { s.mux.Handle("GET "+path, h) }

// Mux is the monitoring server's mux, for packages that register their
// own /debug/* handlers.
func (s *Server) Mux() *http.ServeMux { return s.mux }

// AddReadyCheck adds a readiness condition: /ready answers 200 only when
// every check returns nil.
func (s *Server) AddReadyCheck(name string, check func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = check
}

// Ready returns nil when every readiness check passes, or the failures.
func (s *Server) Ready() error {
	s.mu.Lock()
	names := make([]string, 0, len(s.checks))
	for n := range s.checks {
		names = append(names, n)
	}
	checks := s.checks
	s.mu.Unlock()
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		if err := checks[n](); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	if err := s.Ready(); err != nil {
		http.Error(w, "not ready:\n"+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	names := append([]string(nil), s.debug...)
	s.mu.Unlock()
	sort.Strings(names)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "debug endpoints:\n  /debug/%s\n", strings.Join(names, "\n  /debug/"))
}

// Addrs returns the bound monitoring and readiness addresses once Start
// has bound them.
func (s *Server) Addrs(ctx context.Context) (monitoring, readiness net.Addr, err error) {
	select {
	case a := <-s.addrs:
		s.addrs <- a
		return a[0], a[1], nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// httpServer serves h within the Options' limits.
func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    s.opts.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// Start serves until ctx ends, then shuts both servers down gracefully.
func (s *Server) Start(ctx context.Context) error {
	mon, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("monitoring server: %w", err)
	}
	rdy, err := net.Listen("tcp", s.opts.ReadyAddr)
	if err != nil {
		mon.Close()
		return fmt.Errorf("readiness server: %w", err)
	}
	s.addrs <- [2]net.Addr{mon.Addr(), rdy.Addr()}
	readyMux := http.NewServeMux()
	readyMux.HandleFunc("GET /ready", s.ready)
	readyMux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	servers := []*http.Server{s.httpServer(s.mux), s.httpServer(readyMux)}
	errc := make(chan error, 2)
	for i, l := range []net.Listener{mon, rdy} {
		go func() { errc <- servers[i].Serve(l) }()
	}
	s.log.Info("monitoring server listening", "addr", mon.Addr().String(), "readiness", rdy.Addr().String())
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(shutdownCtx)
	}
	if first != nil && !errors.Is(first, http.ErrServerClosed) {
		return first
	}
	return nil
}
