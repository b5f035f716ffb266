package server

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// The webhook server closes a keep-alive connection that stays idle after
// a request, and one whose client never finishes its headers, within the
// limits set in Options.
func TestServerClosesIdleAndSlowConnections(t *testing.T) {
	ca := newTestCA(t)
	opts := DefaultOptions()
	opts.IdleTimeout, opts.ReadHeaderTimeout = 200*time.Millisecond, 200*time.Millisecond
	s, err := New(opts, ca.tls, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(serveOnLoopback(t, s), "https://")
	dial := func(t *testing.T) *tls.Conn {
		t.Helper()
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	t.Run("an idle keep-alive connection is closed", func(t *testing.T) {
		conn := dial(t)
		r := bufio.NewReader(conn)
		if _, err := io.WriteString(conn, "GET /ready HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Close {
			t.Fatalf("first request: %d, close %v; want 200 on a kept-alive connection", res.StatusCode, res.Close)
		}
		waitClosed(t, conn, r)
	})
	t.Run("a connection whose headers never end is closed", func(t *testing.T) {
		conn := dial(t)
		if _, err := io.WriteString(conn, "POST /validate HTTP/1.1\r\nHost: te"); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, conn, conn)
	})
}

// waitClosed reads until the server closes conn, and fails if it has not
// within a few seconds (far above the limits the test sets).
func waitClosed(t *testing.T, conn net.Conn, r io.Reader) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the server kept the connection open")
	}
}

func TestValidateRefusesNegativeLimits(t *testing.T) {
	o := DefaultOptions()
	o.WriteTimeout = -time.Second
	if err := o.Validate(); err == nil {
		t.Fatal("a negative write timeout was accepted")
	}
}
