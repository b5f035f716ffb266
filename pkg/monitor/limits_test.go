package monitor

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// Both servers close a keep-alive connection that stays idle after a
// request, and one whose client never finishes its headers, within the
// limits set in Options.
func TestServersCloseIdleAndSlowConnections(t *testing.T) {
	_, mon, rdy := startWith(t, Options{
		Addr: "127.0.0.1:0", ReadyAddr: "127.0.0.1:0",
		IdleTimeout: 200 * time.Millisecond, ReadHeaderTimeout: 200 * time.Millisecond,
	})
	for name, tc := range map[string]struct {
		addr string
		path string
	}{
		"the monitoring server": {strings.TrimPrefix(mon, "http://"), "/metrics"},
		"the readiness server":  {strings.TrimPrefix(rdy, "http://"), "/healthz"},
	} {
		t.Run(name+" closes an idle keep-alive connection", func(t *testing.T) {
			conn := dial(t, tc.addr)
			r := bufio.NewReader(conn)
			if _, err := io.WriteString(conn, "GET "+tc.path+" HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
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
		t.Run(name+" closes a connection whose headers never end", func(t *testing.T) {
			conn := dial(t, tc.addr)
			if _, err := io.WriteString(conn, "GET "+tc.path+" HTTP/1.1\r\nHost: te"); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, conn, bufio.NewReader(conn))
		})
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
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
	// nil (EOF) or a reset: the server closed it.
}

func TestValidateRefusesNegativeLimits(t *testing.T) {
	o := DefaultOptions()
	o.IdleTimeout = -time.Second
	if err := o.Validate(); err == nil {
		t.Fatal("a negative idle timeout was accepted")
	}
}
