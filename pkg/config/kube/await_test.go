package kube

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// serveLater starts answering "ok" on addr after d.
func serveLater(t *testing.T, addr string, d time.Duration) {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			return
		}
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

func TestAwaitTransportWaitsForTheAPIServer(t *testing.T) {
	addr := freeAddr(t)
	serveLater(t, addr, 700*time.Millisecond)
	c := &http.Client{Transport: &awaitTransport{next: http.DefaultTransport, min: 50 * time.Millisecond, max: 200 * time.Millisecond}}
	resp, err := c.Get("http://" + addr + "/api/v1/services")
	if err != nil {
		t.Fatalf("a GET while the API server was away failed instead of waiting: %v", err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Errorf("body %q, want ok", b)
	}
}

func TestAwaitTransportGivesUpWithItsContext(t *testing.T) {
	addr := freeAddr(t)
	c := &http.Client{Transport: &awaitTransport{next: http.DefaultTransport, min: 20 * time.Millisecond, max: 50 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	start := time.Now()
	_, err := c.Do(req)
	if err == nil || !unreachable(err) {
		t.Fatalf("err = %v, want the connection's error once the context ended", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("gave up after %v, before its context ended", waited)
	}
}

func TestAwaitTransportSendsWritesOnce(t *testing.T) {
	addr := freeAddr(t)
	c := &http.Client{Transport: &awaitTransport{next: http.DefaultTransport, min: time.Second, max: time.Second}}
	start := time.Now()
	_, err := c.Post("http://"+addr+"/apis", "application/json", strings.NewReader("{}"))
	if err == nil || !unreachable(err) {
		t.Fatalf("err = %v, want the refused connection", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("a POST waited %v: writes are not retried", took)
	}
}
