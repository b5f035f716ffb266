package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// WebhookOptions configure the injection webhook benchmark.
type WebhookOptions struct {
	Server loadkit.ServerOptions
	// Out holds the server's CA, log and the report.
	Out string
	// Rate is requests per second, sent on schedule whatever the answers
	// (open loop): latency counts from the scheduled time.
	Rate float64
	// Duration is the measured window.
	Duration time.Duration
	// MaxInFlight bounds concurrent requests; a request that finds no room
	// is counted as an error ("overloaded").
	MaxInFlight int
}

// DefaultWebhookOptions: 200 requests per second for 10 s.
func DefaultWebhookOptions() WebhookOptions {
	return WebhookOptions{Server: loadkit.DefaultServerOptions(), Out: "out/bench/webhook", Rate: 200, Duration: 10 * time.Second, MaxInFlight: 256}
}

// AddFlags registers the benchmark's flags.
func (o *WebhookOptions) AddFlags(fs *pflag.FlagSet) {
	o.Server.AddFlags(fs)
	fs.StringVar(&o.Out, "out", o.Out, "directory for the server's CA, log and report")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "requests per second (open loop)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "measured window")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", o.MaxInFlight, "most concurrent requests")
}

// Validate reports invalid options.
func (o *WebhookOptions) Validate() error {
	errs := []error{o.Server.Validate()}
	if o.Server.PID != 0 {
		errs = append(errs, errors.New("the webhook benchmark starts its own server: drop --server-pid"))
	}
	if o.Rate <= 0 || o.Rate > 100000 {
		errs = append(errs, fmt.Errorf("--rate %g: must be above 0 and at most 100000", o.Rate))
	}
	if o.Duration <= 0 || o.MaxInFlight < 1 {
		errs = append(errs, errors.New("--duration and --max-in-flight must be positive"))
	}
	if o.Out == "" {
		errs = append(errs, errors.New("--out must not be empty"))
	}
	return errors.Join(errs...)
}

func newWebhookCommand() *cobra.Command {
	o := DefaultWebhookOptions()
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Injection webhook latency at a fixed request rate over HTTPS",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := RunWebhook(cmd.Context(), o, cmd.OutOrStdout())
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// admissionReview is a pod creation as the API server sends it: a
// Deployment's pod that opts in with sidecar.istio.io/inject=true.
func admissionReview() []byte {
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{
			"generateName": "reviews-v1-7d9f-", "namespace": "bench",
			"labels": map[string]any{"app": "reviews", "version": "v1", "sidecar.istio.io/inject": "true"},
		},
		"spec": map[string]any{"serviceAccountName": "reviews", "containers": []any{map[string]any{
			"name": "reviews", "image": "example/reviews:1",
			"ports": []any{map[string]any{"containerPort": 9080, "name": "http"}},
		}}},
	}
	review := map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": "bench", "kind": map[string]any{"group": "", "version": "v1", "kind": "Pod"},
			"resource":  map[string]any{"group": "", "version": "v1", "resource": "pods"},
			"namespace": "bench", "operation": "CREATE", "object": pod,
		},
	}
	b, _ := json.Marshal(review) // maps of strings and numbers always marshal
	return b
}

// RunWebhook starts discovery serve and POSTs AdmissionReviews to /inject
// at Rate for Duration.
func RunWebhook(ctx context.Context, o WebhookOptions, out io.Writer) (*LatencyReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	out = orDiscard(out)
	configDir := filepath.Join(o.Out, "config")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		return nil, err
	}
	server, err := loadkit.StartServer(ctx, o.Server, configDir, o.Out)
	if err != nil {
		return nil, err
	}
	defer server.Stop()
	pool, err := readRoot(server.CADir)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: o.MaxInFlight, ForceAttemptHTTP2: false,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	url := "https://" + server.Webhook + "/inject"
	body := admissionReview()
	if err := postReview(ctx, client, url, body); err != nil {
		return nil, fmt.Errorf("first request: %w", err)
	}
	rep := &LatencyReport{
		Tool: "discovery-load webhook", Started: time.Now(), Commit: o.Server.ReportCommit(), Machine: loadkit.MachineInfo(), ErrorKind: map[string]int{},
		Params: map[string]any{"rate": o.Rate, "duration": o.Duration.String(), "maxInFlight": o.MaxInFlight},
	}
	rec := newRecorder()
	w := startWindow(server.PID)
	openLoop(ctx, o, func(scheduled time.Time) {
		if err := postReview(ctx, client, url, body); err != nil {
			rec.fail(errKind(err))
			return
		}
		rec.ok(time.Since(scheduled))
	}, rec)
	w.stop(rep)
	rec.fill(rep, time.Since(w.start).Seconds())
	rep.Notes = append(rep.Notes, "open loop: requests leave on schedule whatever the answers; latency counts from the scheduled time; HTTP/1.1 keep-alive connections")
	return rep, rep.write(o.Out, out)
}

// openLoop calls send at Rate for Duration, each in its own goroutine.
func openLoop(ctx context.Context, o WebhookOptions, send func(time.Time), rec *recorder) {
	sem := make(chan struct{}, o.MaxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	n := int(o.Rate * o.Duration.Seconds())
	for i := 0; i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		select {
		case sem <- struct{}{}:
		default:
			rec.fail("overloaded")
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			send(due)
		}()
	}
	wg.Wait()
}

func postReview(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	if !bytes.Contains(b, []byte(`"patchType":"JSONPatch"`)) {
		return errNotInjected
	}
	return nil
}

var errNotInjected = errors.New("not injected")

func errKind(err error) string {
	if errors.Is(err, errNotInjected) {
		return "not injected"
	}
	var ue interface{ Timeout() bool }
	if errors.As(err, &ue) && ue.Timeout() {
		return "timeout"
	}
	return "error"
}
