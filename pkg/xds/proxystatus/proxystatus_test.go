package proxystatus

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const syncz = `[
  {"proxy": "reviews-1.default", "node": "sidecar~10.0.0.2~reviews-1.default~default.svc.cluster.local", "class": "sidecar/envoy/default/", "delta": true,
   "connected": "2026-01-01T00:00:00Z",
   "types": {"cds": {"sentVersion": "a", "sentNonce": "1", "ackedVersion": "a"},
             "lds": {"sentVersion": "b", "sentNonce": "2", "ackedVersion": "a", "nacks": 1, "lastNack": {"nonce": "2", "message": "bad"}},
             "eds": {"sentVersion": "c", "sentNonce": "3", "ackedVersion": "b"}}},
  {"proxy": "client.ns1", "node": "sidecar~10.0.0.1~client.ns1~ns1.svc.cluster.local", "class": "sidecar/grpc/ns1/", "delta": false,
   "connected": "2026-01-01T00:00:30Z",
   "types": {"lds": {"sentVersion": "x", "sentNonce": "1", "ackedVersion": "x"}}}
]`

func TestFetchAndWrite(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/syncz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(syncz))
	}))
	defer web.Close()
	proxies, err := Fetch(context.Background(), web.Client(), web.URL)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Write(&out, proxies, time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	want := `NAME               TYPE     CDS       LDS     EDS       RDS       PROTOCOL  CONNECTED
client.ns1         sidecar  NOT SENT  SYNCED  NOT SENT  NOT SENT  sotw      30s
reviews-1.default  sidecar  SYNCED    NACKED  STALE     NOT SENT  delta     1m0s
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestFetchReportsServerErrors(t *testing.T) {
	tests := map[string]struct {
		handler http.HandlerFunc
		want    string
	}{
		"a status other than 200 is an error with the body": {
			func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", http.StatusServiceUnavailable) }, "503 Service Unavailable: nope",
		},
		"a body that is not syncz JSON is an error": {
			func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }, "read syncz",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			web := httptest.NewServer(tc.handler)
			defer web.Close()
			_, err := Fetch(context.Background(), web.Client(), web.URL)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
