package ca

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

func TestMetricsCountOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := New(t.Context(), testOptions(), fakeClient(nil), newLogger(&logBuffer{}), reg)
	if err != nil {
		t.Fatal(err)
	}
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", nil)
	calls := []struct {
		token, csr string
		code       codes.Code
	}{
		{tok("token-a"), string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}})), codes.OK},
		{tok("token-a"), string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}})), codes.OK},
		{tok("token-unknown"), "x", codes.Unauthenticated},
		{tok("token-a"), "garbage", codes.InvalidArgument},
		{tok("token-a"), string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idB}})), codes.PermissionDenied},
	}
	for i, call := range calls {
		_, err := client.CreateCertificate(ctxWithToken(t.Context(), call.token), &pb.IstioCertificateRequest{Csr: call.csr})
		if status.Code(err) != call.code {
			t.Fatalf("call %d: %v, want %s", i, err, call.code)
		}
	}
	want := map[string]float64{
		"citadel_server_csr_count":                    5,
		"citadel_server_success_cert_issuance_count":  2,
		"citadel_server_authentication_failure_count": 1,
		"citadel_server_csr_parsing_err_count":        1,
		"citadel_server_id_extraction_err_count":      1,
		"citadel_server_root_cert_expiry_timestamp":   float64(c.authority.Bundle().Root.NotAfter.Unix()),
		"citadel_server_cert_chain_expiry_timestamp":  float64(c.authority.Bundle().Root.NotAfter.Unix()),
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		m := f.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			got[f.GetName()] = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			got[f.GetName()] = m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			got[f.GetName()] = float64(m.GetHistogram().GetSampleCount())
		}
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
	if got["citadel_server_csr_sign_duration_seconds"] != 2 {
		t.Errorf("signing latency has %v samples, want 2", got["citadel_server_csr_sign_duration_seconds"])
	}
	checkLabelledCounts(t, c)
	// 10 citadel_server_* series, the per-identity throttle counter and
	// the 6 labelled series above.
	if n := testutil.CollectAndCount(reg); n != 17 {
		t.Errorf("%d metrics registered, want 17", n)
	}
}

func TestDebugCA(t *testing.T) {
	c := newTestCA(t, testOptions(), &logBuffer{})
	mux := http.NewServeMux()
	c.RegisterDebug(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/ca", nil))
	var st caStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if st.Mode != "kubernetes:istio-ca-secret" || !st.SelfSigned || st.ChainLength != 1 || len(st.ServingNames) != 2 || st.ServingNotAfter.IsZero() {
		t.Fatalf("status %+v", st)
	}
}

// checkLabelledCounts checks the discovery_ca_* series of the calls of
// TestMetricsCountOutcomes.
func checkLabelledCounts(t *testing.T, c *CA) {
	t.Helper()
	vecs := map[string]float64{
		"refusals unauthenticated":   testutil.ToFloat64(c.metrics.refusals.WithLabelValues("unauthenticated")),
		"refusals invalid_request":   testutil.ToFloat64(c.metrics.refusals.WithLabelValues("invalid_request")),
		"refusals permission_denied": testutil.ToFloat64(c.metrics.refusals.WithLabelValues("permission_denied")),
		"reviews authenticated":      testutil.ToFloat64(c.metrics.reviews.WithLabelValues("authenticated")),
		"reviews rejected":           testutil.ToFloat64(c.metrics.reviews.WithLabelValues("rejected")),
		"cache hits authenticated":   testutil.ToFloat64(c.metrics.reviewCacheHits.WithLabelValues("authenticated")),
	}
	for name, v := range map[string]float64{
		"refusals unauthenticated": 1, "refusals invalid_request": 1, "refusals permission_denied": 1,
		"reviews authenticated": 1, "reviews rejected": 1, "cache hits authenticated": 3,
	} {
		if vecs[name] != v {
			t.Errorf("%s = %v, want %v", name, vecs[name], v)
		}
	}
}
