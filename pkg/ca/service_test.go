package ca

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

// fakeTokens is what the fake API server's TokenReview knows.
var fakeTokens = map[string]authenticationv1.TokenReviewStatus{
	"token-a":              {Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:app:a"}, Audiences: []string{"istio-ca"}},
	"token-b":              {Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:app:b"}, Audiences: []string{"istio-ca"}},
	"token-node":           {Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:istio-system:ztunnel"}, Audiences: []string{"istio-ca"}},
	"token-other-audience": {Error: `token audiences ["vault"] is invalid for the target audiences ["istio-ca"]`},
	"token-audiences-unchecked": {
		Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:app:a"},
		Audiences: []string{"vault"},
	},
	"token-user": {Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}, Audiences: []string{"istio-ca"}},
}

// tok is the bearer of the fake token name: JWT-shaped (as service-account
// tokens are, so it reaches the TokenReview), unsigned, without exp.
func tok(name string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"name":%q}`, name))) + ".c2ln"
}

// fakeName is the name tok encoded in token, or token itself.
func fakeName(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return token
	}
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct{ Name string }
	if json.Unmarshal(b, &claims) != nil || claims.Name == "" {
		return token
	}
	return claims.Name
}

// fakeClient answers TokenReviews from fakeTokens and counts them.
func fakeClient(reviews *int) *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if reviews != nil {
			*reviews++
		}
		if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "istio-ca" {
			return true, nil, fmt.Errorf("review for audiences %v", tr.Spec.Audiences)
		}
		st, ok := fakeTokens[fakeName(tr.Spec.Token)]
		if !ok {
			st = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		tr.Status = st
		return true, tr, nil
	})
	return client
}

// jwt builds an unsigned JWT-shaped token expiring at exp.
func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"exp":%d,"sub":"system:serviceaccount:app:a"}`, exp.Unix()))) + ".c2ln"
}

func testOptions() Options {
	o := DefaultOptions()
	o.Impersonators = []string{"istio-system/ztunnel"}
	o.CSRRateLimit, o.CSRRateLimitPerIdentity = 0, 0
	o.RefusalLogBurst = 0 // the tests read the reason of every refusal
	return o
}

func newTestCA(t testing.TB, o Options, logs *logBuffer) *CA {
	t.Helper()
	c, err := New(t.Context(), o, fakeClient(nil), newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	idA = "spiffe://cluster.local/ns/app/sa/a"
	idB = "spiffe://cluster.local/ns/app/sa/b"
)

func TestCreateCertificateRefusals(t *testing.T) {
	logs := &logBuffer{}
	c := newTestCA(t, testOptions(), logs)
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", nil)
	good := string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}}))

	tests := map[string]struct {
		token    string
		csr      string
		ttl      int64
		metadata map[string]any
		code     codes.Code
		reason   string // in the log
	}{
		"refuses a call without any credential": {
			csr: good, code: codes.Unauthenticated, reason: "no client certificate and no bearer token",
		},
		"refuses a token for another audience": {
			token: tok("token-other-audience"), csr: good, code: codes.Unauthenticated, reason: "is invalid for the target audiences",
		},
		"refuses a token whose reviewed audiences lack istio-ca": {
			token: tok("token-audiences-unchecked"), csr: good, code: codes.Unauthenticated, reason: `do not include \"istio-ca\"`,
		},
		"refuses an expired token without asking the API server": {
			token: jwt(time.Now().Add(-time.Minute)), csr: good, code: codes.Unauthenticated, reason: "token expired at",
		},
		"refuses a bearer that is not a JWT without asking the API server": {
			token: "token-a", csr: good, code: codes.Unauthenticated, reason: "bearer token is not a JWT: 1 parts",
		},
		"refuses a token the API server does not know": {
			token: tok("token-unknown-secret"), csr: good, code: codes.Unauthenticated, reason: "invalid bearer token",
		},
		"refuses a user token that is not a service account": {
			token: tok("token-user"), csr: good, code: codes.Unauthenticated, reason: "is not a service account",
		},
		"refuses sa A's token with a CSR for sa B": {
			token: tok("token-a"), csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idB}})), code: codes.PermissionDenied,
			reason: "CSR asks for",
		},
		"refuses a CSR with an extra DNS SAN": {
			token: tok("token-a"), csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}, dns: []string{"evil.example.com"}})),
			code: codes.InvalidArgument, reason: "1 DNS, 0 IP and 0 email SANs",
		},
		"refuses a CSR with an IP SAN": {
			token: tok("token-a"), csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA}, ips: []net.IP{net.IPv4(127, 0, 0, 1)}})),
			code: codes.InvalidArgument, reason: "0 DNS, 1 IP and 0 email SANs",
		},
		"refuses a CSR with two URI SANs": {
			token: tok("token-a"), csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idA, idB}})),
			code: codes.InvalidArgument, reason: "2 URI SANs",
		},
		"refuses a CSR with no SAN": {
			token: tok("token-a"), csr: string(makeCSR(t, ecKey(t), csrSpec{})), code: codes.InvalidArgument, reason: "0 URI SANs",
		},
		"refuses a CSR with a bad signature": {
			token: tok("token-a"), csr: string(badSignatureCSR(t, idA)), code: codes.InvalidArgument, reason: "CSR signature",
		},
		"refuses an RSA 1024 key": {
			token: tok("token-a"), csr: string(makeCSR(t, rsaKey(t, 1024), csrSpec{uris: []string{idA}})),
			code: codes.InvalidArgument, reason: "RSA key of 1024 bits",
		},
		"refuses a TTL above the maximum": {
			token: tok("token-a"), csr: good, ttl: int64((24*time.Hour + time.Second) / time.Second), code: codes.InvalidArgument,
			reason: "above the maximum 24h0m0s",
		},
		"refuses a negative TTL": {
			token: tok("token-a"), csr: good, ttl: -1, code: codes.InvalidArgument, reason: "negative validity_duration",
		},
		"refuses an empty CSR": {
			token: tok("token-a"), csr: "", code: codes.InvalidArgument, reason: "empty CSR",
		},
		"refuses a garbage CSR": {
			token: tok("token-a"), csr: "not a certificate request at all", code: codes.InvalidArgument, reason: "CSR is not PEM",
		},
		"refuses a PEM block that is not a CSR": {
			token: tok("token-a"), csr: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", code: codes.InvalidArgument,
			reason: `PEM block is \"CERTIFICATE\"`,
		},
		"refuses a PEM CSR whose body is garbage": {
			token: tok("token-a"), csr: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
			code: codes.InvalidArgument, reason: "parse CSR",
		},
		"refuses a 1 MiB request": {
			token: tok("token-a"), csr: good + strings.Repeat("A", 1<<20), code: codes.InvalidArgument, reason: "over the limit of 32768",
		},
		"refuses impersonation by a caller not in the list": {
			token: tok("token-a"), csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{idB}})), metadata: map[string]any{ImpersonatedIdentityKey: idB},
			code: codes.PermissionDenied, reason: "may not impersonate",
		},
		"refuses impersonation of another trust domain": {
			token: tok("token-node"), csr: good, metadata: map[string]any{ImpersonatedIdentityKey: "spiffe://other.domain/ns/app/sa/a"},
			code: codes.PermissionDenied, reason: `trust domain \"other.domain\"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := len(logs.String())
			ctx := t.Context()
			if tc.token != "" {
				ctx = ctxWithToken(ctx, tc.token)
			}
			req := &pb.IstioCertificateRequest{Csr: tc.csr, ValidityDuration: tc.ttl}
			if tc.metadata != nil {
				md, err := structpb.NewStruct(tc.metadata)
				if err != nil {
					t.Fatal(err)
				}
				req.Metadata = md
			}
			_, err := client.CreateCertificate(ctx, req)
			st, _ := status.FromError(err)
			if st.Code() != tc.code {
				t.Fatalf("code %s (%v), want %s", st.Code(), err, tc.code)
			}
			if want := opaqueMessage(tc.code); st.Message() != want {
				t.Fatalf("message %q, want the opaque %q", st.Message(), want)
			}
			if strings.Contains(st.Message(), "token") || strings.Contains(st.Message(), "spiffe://") || len(st.Message()) > 80 {
				t.Fatalf("message %q is not opaque", st.Message())
			}
			log := logs.String()[before:]
			if !strings.Contains(log, tc.reason) {
				t.Fatalf("log lacks the reason %q:\n%s", tc.reason, log)
			}
			if tc.token != "" && strings.Contains(log, tc.token) {
				t.Fatalf("log contains the token:\n%s", log)
			}
			if strings.Contains(log, "-----BEGIN") || (tc.csr != "" && strings.Contains(log, tc.csr)) {
				t.Fatalf("log contains the CSR:\n%s", log)
			}
		})
	}
}

// opaqueMessage is the one message callers see for code.
func opaqueMessage(code codes.Code) string {
	for _, r := range []Reason{ReasonUnauthenticated, ReasonPermissionDenied, ReasonInvalidRequest, ReasonThrottled, ReasonInternal} {
		if c, msg := r.code(); c == code {
			return msg
		}
	}
	return ""
}
