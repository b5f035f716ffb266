package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestFileModeFetchesJWKS: discovery serve, in file mode, fetches the key
// set a RequestAuthentication names from a server on loopback, refreshes
// it, and counts a failed fetch once the server fails (Istio's metrics).
func TestFileModeFetchesJWKS(t *testing.T) {
	var failing atomic.Bool
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"keys":[]}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ra := `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  jwtRules: [{issuer: "https://issuer.example", jwksUri: "` + srv.URL + `/keys"}]
`
	if err := os.WriteFile(filepath.Join(dir, "ra.yaml"), []byte(ra), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "--config-dir", dir, "--ca-dir", t.TempDir(), "--jwks-refresh-interval", "200ms")
	p.waitReady(t)
	metric := func(name string) float64 {
		_, body, err := httpGet("http://" + p.monitor + "/metrics")
		if err != nil {
			return -1
		}
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	waitFor(t, 20*time.Second, "a successful JWKS fetch", func() bool {
		return metric("pilot_jwks_resolver_network_fetch_success_total") >= 1
	})
	waitFor(t, 20*time.Second, "a refresh", func() bool { return hits.Load() >= 2 })
	failing.Store(true)
	waitFor(t, 20*time.Second, "a failed JWKS fetch counted", func() bool {
		return metric("pilot_jwks_resolver_network_fetch_fail_total") >= 1
	})
}
