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
		{"token-a", string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}})), codes.OK},
		{"token-a", string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}})), codes.OK},
		{"token-unknown", "x", codes.Unauthenticated},
		{"token-a", "garbage", codes.InvalidArgument},
		{"token-a", string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idB}})), codes.PermissionDenied},
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
	if n := testutil.CollectAndCount(reg); n != 10 {
		t.Errorf("%d metrics registered, want 10", n)
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
