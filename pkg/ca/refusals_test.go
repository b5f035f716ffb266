package ca

import (
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

func TestClip(t *testing.T) {
	tests := map[string]struct {
		in, want string
	}{
		"keeps a short string":         {in: "spiffe://cluster.local/ns/app/sa/a", want: "spiffe://cluster.local/ns/app/sa/a"},
		"keeps a string of the bound":  {in: strings.Repeat("a", maxFieldLog), want: strings.Repeat("a", maxFieldLog)},
		"cuts a long one with a mark":  {in: strings.Repeat("a", 1000), want: strings.Repeat("a", maxFieldLog) + "...[872 bytes truncated]"},
		"cuts between runes, not in":   {in: strings.Repeat("a", maxFieldLog-1) + "é" + "bbb", want: strings.Repeat("a", maxFieldLog-1) + "...[5 bytes truncated]"},
		"keeps the empty string empty": {in: "", want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := clip(tc.in)
			if got != tc.want || !utf8.ValidString(got) {
				t.Fatalf("clip = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRefusalLogLimitsRepeatedRefusals(t *testing.T) {
	logs := &logBuffer{}
	m := newMetrics(nil)
	l := newRefusalLog(newLogger(logs), 3, 10*time.Second, m)
	now := time.Unix(1700000000, 0)
	l.now = func() time.Time { return now }
	count := func(r Reason, n int) (logged int) {
		for range n {
			if l.allow(r) {
				logged++
			}
		}
		return logged
	}
	if got := count(ReasonUnauthenticated, 100); got != 3 {
		t.Fatalf("%d of 100 refusals logged in full, want 3", got)
	}
	if got := count(ReasonInvalidRequest, 2); got != 2 {
		t.Fatalf("another reason has its own budget: %d of 2 logged", got)
	}
	if strings.Contains(logs.String(), "suppressed") {
		t.Fatal("a summary before the interval is over")
	}
	now = now.Add(10 * time.Second)
	if got := count(ReasonUnauthenticated, 1); got != 1 {
		t.Fatal("the next interval's first refusal was not logged")
	}
	if !strings.Contains(logs.String(), "suppressed 97 certificate request refusals (reason unauthenticated)") {
		t.Fatalf("no summary of the 97 suppressed refusals:\n%s", logs)
	}
	count(ReasonUnauthenticated, 5)
	l.flush(true)
	if !strings.Contains(logs.String(), "suppressed 3 certificate request refusals (reason unauthenticated)") {
		t.Fatalf("the final flush did not sum up the last interval:\n%s", logs)
	}
	if n := strings.Count(logs.String(), `msg="suppressed`); n != 2 {
		t.Fatalf("%d summary lines, want 2 (none for a reason with nothing suppressed)", n)
	}
	if v := testutil.ToFloat64(m.logsSuppressed.WithLabelValues("unauthenticated")); v != 100 {
		t.Fatalf("suppressed counter %v, want 100", v)
	}
}

func TestUntrustedStringsAreClippedInTheLog(t *testing.T) {
	logs := &logBuffer{}
	c := newTestCA(t, testOptions(), logs)
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", nil)
	long := strings.Repeat("x", 10000)
	longURI := "spiffe://cluster.local/ns/app/sa/" + long
	tests := map[string]struct {
		token    string
		csr      string
		metadata map[string]any
	}{
		"clips a CSR's long URI SAN": {
			token: "token-a", csr: longSANCSR(t, longURI),
		},
		"clips a long ImpersonatedIdentity that is not a SPIFFE ID": {
			token: "token-node", csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}})),
			metadata: map[string]any{ImpersonatedIdentityKey: "spiffe://cluster.local/" + long},
		},
		"clips a long ImpersonatedIdentity that does not parse as a URL": {
			token: "token-node", csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}})),
			metadata: map[string]any{ImpersonatedIdentityKey: "spiffe://%zz" + long},
		},
		"clips a long trust domain in an ImpersonatedIdentity": {
			token: "token-node", csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}})),
			metadata: map[string]any{ImpersonatedIdentityKey: "spiffe://" + strings.Repeat("d", 5000) + "/ns/app/sa/a"},
		},
		"clips a long PEM type": {
			token: "token-a", csr: "-----BEGIN " + long[:5000] + "-----\nAAAA\n-----END " + long[:5000] + "-----\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := len(logs.String())
			req := &pb.IstioCertificateRequest{Csr: tc.csr}
			if tc.metadata != nil {
				req.Metadata, _ = structpb.NewStruct(tc.metadata)
			}
			if _, err := client.CreateCertificate(ctxWithToken(t.Context(), tok(tc.token)), req); err == nil {
				t.Fatal("accepted")
			}
			log := logs.String()[before:]
			if len(log) > 2*maxDetailLog || !strings.Contains(log, "bytes truncated]") {
				t.Fatalf("log of %d bytes, want a clipped line:\n%.600s", len(log), log)
			}
		})
	}
}

// longSANCSR is a CSR whose only URI SAN is uri.
func longSANCSR(t *testing.T, uri string) string {
	t.Helper()
	if _, err := url.Parse(uri); err != nil {
		t.Fatal(err)
	}
	return string(makeCSR(t, ecKey(t), csrSpec{uris: []string{uri}}))
}
