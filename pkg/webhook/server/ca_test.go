package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshplane/discovery/pkg/ca"
)

// TestServerWithTheCAsServingCertificate serves with the CA package's TLS
// config, as the wiring does, and checks that a client trusting only the
// CA root reaches the server under the name the API server uses for a
// service-backed webhook.
func TestServerWithTheCAsServingCertificate(t *testing.T) {
	opts := ca.DefaultOptions()
	opts.Dir = t.TempDir()
	c, err := ca.New(context.Background(), opts, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("CA in file mode: %v", err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s, err := New(DefaultOptions(), c.ServerTLSConfig(), ok, ok, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	base := serveOnLoopback(t, s)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.Roots(), ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(base+"/inject", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("TLS to the webhook server with the CA's certificate: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", res.StatusCode)
	}
	// The patcher's root source, wired from the CA.
	roots := RootSource(func() ([]byte, <-chan struct{}) {
		b, changed := c.Authority().Watch()
		return b.RootPEM(), changed
	})
	if pem, _ := roots(); !strings.Contains(string(pem), "BEGIN CERTIFICATE") {
		t.Fatalf("CA root is not PEM: %q", pem)
	}
}
