package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// CAOptions configure the CA benchmark.
type CAOptions struct {
	Server loadkit.ServerOptions
	// Out holds the server's CA, token file, log and the report.
	Out string
	// Clients is the number of concurrent clients, each with its own TLS
	// connection, identity and key, sending one CSR after another.
	Clients int
	// Duration is the measured window, after every client's first request.
	Duration time.Duration
	// Key is the workload key type: ecdsa (P-256) or rsa (2048).
	Key string
	// Rate, when above 0, sends that many CSRs per second in all (open
	// loop) instead of each client sending as fast as it is answered.
	Rate float64
	// KeepRateLimit leaves the server's CSR rate limit at its default.
	KeepRateLimit bool
}

// DefaultCAOptions: 100 ECDSA clients for 10 s.
func DefaultCAOptions() CAOptions {
	return CAOptions{Server: loadkit.DefaultServerOptions(), Out: "out/bench/ca", Clients: 100, Duration: 10 * time.Second, Key: "ecdsa"}
}

// AddFlags registers the benchmark's flags.
func (o *CAOptions) AddFlags(fs *pflag.FlagSet) {
	o.Server.AddFlags(fs)
	fs.StringVar(&o.Out, "out", o.Out, "directory for the server's CA, token file, log and report")
	fs.IntVar(&o.Clients, "clients", o.Clients, "concurrent clients (one TLS connection and identity each)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "measured window")
	fs.StringVar(&o.Key, "key", o.Key, "workload key type: ecdsa (P-256) or rsa (2048 bits)")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "CSRs per second in all, on schedule (open loop; latency from the scheduled time); 0: every client sends as soon as it is answered (closed loop)")
	fs.BoolVar(&o.KeepRateLimit, "keep-rate-limit", o.KeepRateLimit, "keep the server's default --csr-rate-limit (else it is turned off to measure capacity)")
}

// Validate reports invalid options.
func (o *CAOptions) Validate() error {
	errs := []error{o.Server.Validate()}
	if o.Server.PID != 0 {
		errs = append(errs, errors.New("the CA benchmark starts its own server (it needs the token file): drop --server-pid"))
	}
	if o.Clients < 1 || o.Clients > 10000 {
		errs = append(errs, fmt.Errorf("--clients %d: must be 1 to 10000", o.Clients))
	}
	if o.Duration <= 0 {
		errs = append(errs, errors.New("--duration must be positive"))
	}
	if o.Rate < 0 {
		errs = append(errs, fmt.Errorf("--rate %g: must not be negative", o.Rate))
	}
	if o.Key != "ecdsa" && o.Key != "rsa" {
		errs = append(errs, fmt.Errorf("--key %q: must be ecdsa or rsa", o.Key))
	}
	if o.Out == "" {
		errs = append(errs, errors.New("--out must not be empty"))
	}
	return errors.Join(errs...)
}

func newCACommand() *cobra.Command {
	o := DefaultCAOptions()
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "CSRs per second and latency against discovery serve's CA over gRPC + TLS",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := RunCA(cmd.Context(), o, cmd.OutOrStdout())
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// caClient is one workload: a connection, a token and a CSR for its
// identity.
type caClient struct {
	conn  *grpc.ClientConn
	pb    pb.IstioCertificateServiceClient
	token string
	req   *pb.IstioCertificateRequest
}

// RunCA starts discovery serve in file mode with a token file, has every
// client send one CSR (connection set up), then measures for Duration.
func RunCA(ctx context.Context, o CAOptions, out io.Writer) (*LatencyReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	out = orDiscard(out)
	configDir := filepath.Join(o.Out, "config")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		return nil, err
	}
	tokens := filepath.Join(o.Out, "tokens")
	var lines []string
	for i := 0; i < o.Clients; i++ {
		lines = append(lines, fmt.Sprintf("bench-token-%d,ns-%d,sa-%d", i, i%50, i))
	}
	if err := os.WriteFile(tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	extra := []string{"--ca-token-file", tokens}
	if !o.KeepRateLimit {
		extra = append(extra, "--csr-rate-limit=0", "--csr-rate-limit-per-identity=0")
	}
	server, err := loadkit.StartServer(ctx, o.Server, configDir, o.Out, extra...)
	if err != nil {
		return nil, err
	}
	defer server.Stop()
	clients, err := newCAClients(o, server)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range clients {
			_ = c.conn.Close()
		}
	}()
	rep := &LatencyReport{
		Tool: "discovery-load ca", Started: time.Now(), Commit: o.Server.ReportCommit(), Machine: loadkit.MachineInfo(), ErrorKind: map[string]int{},
		Params: map[string]any{"clients": o.Clients, "key": o.Key, "duration": o.Duration.String(), "rateLimit": o.KeepRateLimit, "rate": o.Rate},
	}
	// Warm up: every client connects (TLS handshake) and is served once.
	if err := runCAClients(ctx, clients, time.Time{}, 0, newRecorder()); err != nil {
		return nil, fmt.Errorf("first CSR: %w", err)
	}
	rec := newRecorder()
	w := startWindow(server.PID)
	deadline := time.Now().Add(o.Duration)
	_ = runCAClients(ctx, clients, deadline, o.Rate, rec)
	w.stop(rep)
	rec.fill(rep, time.Since(w.start).Seconds())
	rep.Notes = append(rep.Notes, "each client has its own TLS connection (set up before the window), bearer token and key")
	if o.Rate > 0 {
		rep.Notes = append(rep.Notes, "open loop: CSRs leave on schedule; latency counts from the scheduled time")
	} else {
		rep.Notes = append(rep.Notes, "closed loop: a client sends its next CSR as soon as the previous answer arrives, so the server is saturated and latency includes its queue")
	}
	return rep, rep.write(o.Out, out)
}

func newCAClients(o CAOptions, server *loadkit.Server) ([]*caClient, error) {
	pool, err := readRoot(server.CADir)
	if err != nil {
		return nil, err
	}
	tlsCfg := &tls.Config{RootCAs: pool, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
	var out []*caClient
	for i := 0; i < o.Clients; i++ {
		csr, err := makeCSR(o.Key, fmt.Sprintf("spiffe://cluster.local/ns/ns-%d/sa/sa-%d", i%50, i))
		if err != nil {
			return nil, err
		}
		conn, err := grpc.NewClient(server.Secure, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		if err != nil {
			return nil, err
		}
		out = append(out, &caClient{
			conn: conn, pb: pb.NewIstioCertificateServiceClient(conn), token: fmt.Sprintf("bench-token-%d", i),
			req: &pb.IstioCertificateRequest{Csr: string(csr), ValidityDuration: 86400},
		})
	}
	return out, nil
}

func makeCSR(keyType, uri string) ([]byte, error) {
	var key crypto.Signer
	var err error
	if keyType == "rsa" {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// runCAClients has each client send CSRs until deadline (zero: one each).
// With rate > 0 the clients share that many requests per second, each on
// its own schedule (open loop: latency counts from the scheduled time);
// otherwise each sends as soon as its previous answer arrives. It returns
// the first error of a one-shot run.
func runCAClients(ctx context.Context, clients []*caClient, deadline time.Time, rate float64, rec *recorder) error {
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	start := time.Now()
	var every time.Duration
	if rate > 0 {
		every = time.Duration(float64(len(clients)) / rate * float64(time.Second))
	}
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
			due := start.Add(every * time.Duration(i) / time.Duration(len(clients)))
			for first := true; first || due.Before(deadline); first = false {
				if every > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(time.Until(due)):
					}
				} else {
					due = time.Now()
				}
				if ctx.Err() != nil {
					return
				}
				if err := c.send(rctx); err != nil {
					rec.fail(status.Code(err).String())
					select {
					case errc <- err:
					default:
					}
					if deadline.IsZero() {
						return
					}
				} else {
					rec.ok(time.Since(due))
				}
				due = due.Add(every)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// send asks for one certificate and checks the chain has the leaf and its
// issuer at least.
func (c *caClient) send(ctx context.Context) error {
	resp, err := c.pb.CreateCertificate(ctx, c.req)
	if err == nil && len(resp.GetCertChain()) < 2 {
		err = fmt.Errorf("chain of %d certificates", len(resp.GetCertChain()))
	}
	return err
}
