package ca

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/internal/testenv"
	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

// validFrom is the address of valid callers; junk comes from another
// loopback address, as pods and an attacker come from different IPs.
const validFrom = "127.0.0.1"

// dialFrom is dial with the client's source address set to ip.
func dialFrom(t testing.TB, addr string, root []byte, ns, ip string) pb.IstioCertificateServiceClient {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) {
		t.Fatal("no root")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "istiod." + ns + ".svc", MinVersion: tls.VersionTLS12}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// validCall is one legitimate request of a flood test: a bearer token and
// the identity it proves.
type validCall struct {
	token, id string
}

// floodOutcome counts the codes valid callers and junk got.
type floodOutcome struct {
	valid, junk map[codes.Code]int
	junkSent    int
	elapsed     time.Duration
}

// mixedJunk is the n-th bearer of a flood: no credential, a random string,
// a random unsigned JWT that expires in an hour, or the same JWT again.
func mixedJunk(n int) string {
	switch n % 4 {
	case 0:
		return ""
	case 1:
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		return "junk-" + base64.RawURLEncoding.EncodeToString(b)
	case 2:
		return randomJWT(n)
	default:
		return repeatedJunkJWT
	}
}

// randomJWT is a new unsigned JWT, expiring in an hour: each costs a
// TokenReview unless the failure budget stops it.
func randomJWT(int) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"x"}`)) + "." +
		enc([]byte(fmt.Sprintf(`{"exp":%d,"jti":%q}`, time.Now().Add(time.Hour).Unix(), enc(b)))) + "." + enc(b)
}

// floodSpec is the junk of a flood: where from, which bearers, how much.
type floodSpec struct {
	from      string
	junk      func(n int) string
	workers   int
	perWorker int
}

var repeatedJunkJWT = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256"}`)) + "." +
	base64.RawURLEncoding.EncodeToString([]byte(`{"exp":4102444800,"sub":"system:serviceaccount:app:a"}`)) + ".c2ln"

// flood sends junk as spec says while the valid calls are made one after
// another from validFrom, spread over the flood. It returns when both are
// done.
func flood(t *testing.T, addr string, root []byte, ns string, valid []validCall, spec floodSpec) floodOutcome {
	t.Helper()
	junkClient := dialFrom(t, addr, root, ns, spec.from)
	validClient := dialFrom(t, addr, root, ns, validFrom)
	junkCSR := string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))
	var (
		mu      sync.Mutex
		out     = floodOutcome{valid: map[codes.Code]int{}, junk: map[codes.Code]int{}}
		sent    atomic.Int64
		stop    atomic.Bool
		started = make(chan struct{})
		once    sync.Once
		wg      sync.WaitGroup
	)
	start := time.Now()
	for w := range spec.workers {
		wg.Go(func() {
			for i := 0; i < spec.perWorker && !stop.Load(); i++ {
				ctx := t.Context()
				if tok := spec.junk(w*spec.perWorker + i); tok != "" {
					ctx = ctxWithToken(ctx, tok)
				}
				_, err := junkClient.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: junkCSR})
				if sent.Add(1) == 50 {
					once.Do(func() { close(started) })
				}
				mu.Lock()
				out.junk[status.Code(err)]++
				mu.Unlock()
			}
		})
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the flood did not start")
	}
	for _, v := range valid {
		_, err := validClient.CreateCertificate(ctxWithToken(t.Context(), v.token),
			&pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{v.id}}))})
		mu.Lock()
		out.valid[status.Code(err)]++
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	out.junkSent, out.elapsed = int(sent.Load()), time.Since(start)
	return out
}

// checkFlood asserts that every valid call was signed and no junk was.
func checkFlood(t *testing.T, out floodOutcome, valid int) {
	t.Helper()
	t.Logf("%d junk requests in %s: %v; valid: %v", out.junkSent, out.elapsed.Round(time.Millisecond), out.junk, out.valid)
	if out.valid[codes.OK] != valid {
		t.Errorf("%d of %d valid requests were signed during the flood (%v)", out.valid[codes.OK], valid, out.valid)
	}
	if out.junk[codes.OK] != 0 {
		t.Errorf("%d junk requests were signed", out.junk[codes.OK])
	}
}

// checkFloodLogs asserts that the refusals of a flood were logged within
// the refusal log's limit, summed up in a line, and all counted.
func checkFloodLogs(t *testing.T, c *CA, logs *logBuffer, out floodOutcome) {
	t.Helper()
	c.service.refusals.flush(true)
	text := logs.String()
	lines := strings.Count(text, `msg="certificate request refused"`)
	windows := int(out.elapsed/c.opts.RefusalLogInterval) + 1
	if max := c.opts.RefusalLogBurst * windows; lines > max {
		t.Errorf("%d refusal lines for %d junk requests, want at most %d (%d per %s)", lines, out.junkSent, max,
			c.opts.RefusalLogBurst, c.opts.RefusalLogInterval)
	}
	refused, suppressed := 0.0, 0.0
	for _, r := range []Reason{ReasonUnauthenticated, ReasonPermissionDenied, ReasonInvalidRequest, ReasonThrottled, ReasonInternal} {
		refused += testutil.ToFloat64(c.metrics.refusals.WithLabelValues(r.String()))
		suppressed += testutil.ToFloat64(c.metrics.logsSuppressed.WithLabelValues(r.String()))
	}
	if int(refused) != out.junkSent || int(suppressed) != out.junkSent-lines {
		t.Errorf("metrics count %v refusals and %v suppressed lines; want %d and %d", refused, suppressed, out.junkSent, out.junkSent-lines)
	}
	if !strings.Contains(text, "certificate request refusals (reason unauthenticated)") {
		t.Error("no summary line of the suppressed refusals")
	}
	if len(text) > 64<<10 {
		t.Errorf("%d bytes of log for the flood", len(text))
	}
}

// writeTokenFile writes n tokens for service accounts app/w0..w<n-1> and
// returns the path and the calls that use them.
func writeTokenFile(t *testing.T, n, callsEach int) (string, []validCall) {
	t.Helper()
	var lines []string
	var calls []validCall
	for i := range n {
		tok := fmt.Sprintf("file-token-w%d", i)
		lines = append(lines, fmt.Sprintf("%s,app,w%d", tok, i))
		for range callsEach {
			calls = append(calls, validCall{token: tok, id: fmt.Sprintf("spiffe://cluster.local/ns/app/sa/w%d", i)})
		}
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, calls
}

func TestUnauthenticatedFloodDoesNotSpendTheCSRBudget(t *testing.T) {
	tokens, valid := writeTokenFile(t, 4, 5)
	o := testOptions()
	o.Dir, o.TokenFile = filepath.Join(t.TempDir(), "ca"), tokens
	o.CSRRateLimit, o.CSRBurst = 20, 20
	o.RefusalLogBurst = DefaultOptions().RefusalLogBurst
	logs := &logBuffer{}
	c, err := New(t.Context(), o, nil, newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := flood(t, serve(t, c), c.RootPEM(), "istio-system", valid, floodSpec{from: "127.0.0.2", junk: mixedJunk, workers: 8, perWorker: 2000})
	checkFlood(t, out, len(valid))
	checkFloodLogs(t, c, logs, out)
}

// countingClient is a client of env's API server that counts the
// TokenReviews it sends.
func countingClient(t *testing.T, env *testenv.Env, reviews *atomic.Int64) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
				reviews.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// testFloodOnAPIServer is the finding of issue 13 on a real API server:
// junk tokens and calls without credentials flood the CA while service
// accounts with real tokens ask for certificates.
func testFloodOnAPIServer(t *testing.T, env *testenv.Env) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	createNamespace(t, env.Client, "flood")
	var valid []validCall
	for i := range 4 {
		sa := fmt.Sprintf("w%d", i)
		tok := serviceAccountToken(t, env.Client, "flood", sa, "istio-ca")
		for range 5 {
			valid = append(valid, validCall{token: tok, id: "spiffe://cluster.local/ns/flood/sa/" + sa})
		}
	}
	o := DefaultOptions()
	o.Namespace = "flood"
	o.CSRRateLimit, o.CSRBurst = 20, 20
	var reviews atomic.Int64
	logs := &logBuffer{}
	c, err := New(t.Context(), o, countingClient(t, env, &reviews), newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, c)
	out := flood(t, addr, c.RootPEM(), "flood", valid, floodSpec{from: "127.0.0.2", junk: mixedJunk, workers: 8, perWorker: 2000})
	checkFlood(t, out, len(valid))
	checkFloodLogs(t, c, logs, out)
	t.Logf("%d TokenReviews", reviews.Load())

	// Only new well-formed JWTs, from another address: each would cost a
	// TokenReview, and the peer's failure budget bounds them. The valid
	// tokens are cached by now, so every review counted is junk's.
	waitFor(t, 10*time.Second, "the CSR budget the valid callers spent to fill again", func() bool {
		return c.service.limits.global.Tokens() >= float64(o.CSRBurst)
	})
	reviews.Store(0)
	out = flood(t, addr, c.RootPEM(), "flood", valid, floodSpec{from: "127.0.0.3", junk: randomJWT, workers: 8, perWorker: 500})
	checkFlood(t, out, len(valid))
	bound := o.AuthnFailureBurstPerPeer + int(o.AuthnFailureRateLimitPerPeer*out.elapsed.Seconds()) + 1
	t.Logf("%d TokenReviews for %d junk JWTs (bound %d)", reviews.Load(), out.junkSent, bound)
	if n := int(reviews.Load()); n > bound {
		t.Errorf("%d TokenReviews for %d junk JWTs, want at most %d (the peer's failure budget)", n, out.junkSent, bound)
	}
	for _, v := range valid {
		if strings.Contains(logs.String(), v.token) {
			t.Fatal("a token reached the log")
		}
	}
}
