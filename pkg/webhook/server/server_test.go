package server

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// runServer serves h on a loopback port with ca's certificate until the
// test ends, and returns the server's https base URL.
func runServer(t testing.TB, ca *testCA, inject, validate http.Handler) string {
	t.Helper()
	s, err := New(DefaultOptions(), ca.tls, inject, validate, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return serveOnLoopback(t, s)
}

// serveOnLoopback runs s on a free loopback port until the test ends.
func serveOnLoopback(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "https://" + ln.Addr().String()
}

func TestServerServesOverTLSAndRefusesPlainHTTP(t *testing.T) {
	ca := newTestCA(t)
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "path "+r.URL.Path) })
	base := runServer(t, ca, echo, echo)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for _, path := range []string{"/inject", "/validate"} {
		res, err := client.Post(base+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "path "+path {
			t.Errorf("%s answered %q", path, b)
		}
	}
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	res, err := (&http.Client{Transport: plain, Timeout: 10 * time.Second}).Get("http" + strings.TrimPrefix(base, "https") + "/inject")
	if err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was served")
		}
	}
	if _, err := New(DefaultOptions(), &tls.Config{}, echo, echo, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a TLS config without a certificate was accepted")
	}
}
