package ca

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

func TestExpiringMapStaysBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newExpiringMap[int, int](64)
	for i := range 1000 {
		m.put(i, i, now.Add(time.Hour), now)
		if m.len() > 64 {
			t.Fatalf("%d entries after %d puts, want at most 64", m.len(), i+1)
		}
	}
	if _, ok := m.get(999, now); !ok {
		t.Fatal("the newest entry was evicted")
	}
	if _, ok := m.get(999, now.Add(time.Hour)); ok {
		t.Fatal("an expired entry was returned")
	}
	// Expired entries go first: the live ones stay.
	m = newExpiringMap[int, int](4)
	m.put(1, 1, now.Add(time.Hour), now)
	m.put(2, 2, now.Add(time.Second), now)
	m.put(3, 3, now.Add(time.Second), now)
	m.put(4, 4, now.Add(time.Second), now)
	m.put(5, 5, now.Add(time.Hour), now.Add(time.Minute))
	if _, ok := m.get(1, now.Add(time.Minute)); !ok || m.len() != 2 {
		t.Fatalf("after eviction: %d entries, live entry kept %v", m.len(), ok)
	}
}

func withPeer(ctx context.Context, ip string, port int) context.Context {
	return peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}})
}

func TestFailureBudget(t *testing.T) {
	tests := map[string]struct {
		global, perPeer float64
		failures        map[string]int // failed authentications per peer, before the check
		peer            string
		want            error
	}{
		"reviews a peer within its budget": {
			global: 10, perPeer: 1, failures: map[string]int{"10.0.0.1": 4}, peer: "10.0.0.1",
		},
		"refuses a peer over its own budget": {
			global: 10, perPeer: 1, failures: map[string]int{"10.0.0.1": 5}, peer: "10.0.0.1", want: errPeerBudget,
		},
		"refuses a peer that failed recently once the global budget is spent": {
			global: 10, perPeer: 1, failures: map[string]int{"10.0.0.2": 1, "10.0.0.3": 3, "10.0.0.4": 3, "10.0.0.5": 3}, peer: "10.0.0.2",
			want: errGlobalBudget,
		},
		"still reviews a peer without recent failures when the global budget is spent": {
			global: 10, perPeer: 1, failures: map[string]int{"10.0.0.3": 4, "10.0.0.4": 4, "10.0.0.5": 4}, peer: "10.0.0.9",
		},
		"refuses every peer once the global budget is spent without per-peer budgets": {
			global: 10, failures: map[string]int{"10.0.0.3": 10}, peer: "10.0.0.9", want: errGlobalBudget,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			o.AuthnFailureRateLimit, o.AuthnFailureBurst = tc.global, 10
			o.AuthnFailureRateLimitPerPeer, o.AuthnFailureBurstPerPeer = tc.perPeer, 5
			b := newFailureBudget(o)
			now := time.Unix(1000, 0)
			b.now = func() time.Time { return now }
			for ip, n := range tc.failures {
				for i := range n {
					b.fail(withPeer(t.Context(), ip, 40000+i)) // each from a new connection
				}
			}
			h, err := b.admit(withPeer(t.Context(), tc.peer, 50000))
			if !errors.Is(err, tc.want) {
				t.Fatalf("admit: %v, want %v", err, tc.want)
			}
			h.release()
			// The buckets fill again: every peer is reviewed after a while.
			now = now.Add(time.Minute)
			if _, err := b.admit(withPeer(t.Context(), tc.peer, 50000)); err != nil {
				t.Fatalf("a minute later: %v", err)
			}
		})
	}
}

func TestReviewsInFlightHoldTheBudget(t *testing.T) {
	o := DefaultOptions()
	o.AuthnFailureRateLimit, o.AuthnFailureBurst = 10, 10
	o.AuthnFailureRateLimitPerPeer, o.AuthnFailureBurstPerPeer = 1, 5
	b := newFailureBudget(o)
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	ctx := withPeer(t.Context(), "10.0.0.1", 1)
	var holds []*hold
	for range 5 {
		h, err := b.admit(ctx)
		if err != nil {
			t.Fatalf("review %d of the burst: %v", len(holds)+1, err)
		}
		holds = append(holds, h)
	}
	if _, err := b.admit(ctx); !errors.Is(err, errPeerBudget) {
		t.Fatalf("a sixth review while five are in flight: %v, want %v", err, errPeerBudget)
	}
	// Successful reviews give their tokens back; failed ones keep them.
	for _, h := range holds[:3] {
		h.release()
	}
	for _, h := range holds[3:] {
		h.charge()
	}
	for i := range 3 {
		if _, err := b.admit(ctx); err != nil {
			t.Fatalf("review %d after three succeeded: %v", i+1, err)
		}
	}
	if _, err := b.admit(ctx); !errors.Is(err, errPeerBudget) {
		t.Fatalf("after two failures and three reviews in flight: %v, want %v", err, errPeerBudget)
	}
	if n := len(b.inflight); n != 2 {
		t.Fatalf("%d buckets with reviews in flight, want 2 (the peer's and the global one)", n)
	}
}

func TestPerIdentityLimitLeavesOtherIdentitiesAlone(t *testing.T) {
	o := testOptions()
	o.CSRRateLimit, o.CSRBurst = 0.001, 5
	o.CSRRateLimitPerIdentity, o.CSRBurstPerIdentity = 0.001, 2
	c := newTestCA(t, o, &logBuffer{})
	client := dial(t, serve(t, c), c.RootPEM(), "istio-system", nil)
	idC, idD := "spiffe://cluster.local/ns/app/sa/c", "spiffe://cluster.local/ns/app/sa/d"
	var got []string
	for _, call := range []struct{ token, id string }{
		{"token-a", idA}, {"token-a", idA}, {"token-a", idA}, // A: its burst of 2, then refused
		{"token-b", idB}, {"token-b", idB}, // B: A's refusals took nothing from the replica's 5
		{"token-node", idA}, // ztunnel for A: A's budget, not ztunnel's
		{"token-node", idC}, // the replica's fifth
		{"token-node", idD}, // the replica's budget is spent
	} {
		req := &pb.IstioCertificateRequest{Csr: string(makeCSR(t, ecKey(t), csrSpec{uris: []string{call.id}}))}
		if call.token == "token-node" {
			req.Metadata, _ = structpb.NewStruct(map[string]any{ImpersonatedIdentityKey: call.id})
		}
		_, err := client.CreateCertificate(ctxWithToken(t.Context(), tok(call.token)), req)
		got = append(got, fmt.Sprintf("%s:%s", call.id[len("spiffe://cluster.local/ns/app/sa/"):], status.Code(err)))
	}
	want := "a:OK a:OK a:ResourceExhausted b:OK b:OK a:ResourceExhausted c:OK d:ResourceExhausted"
	if strings.Join(got, " ") != want {
		t.Fatalf("outcomes\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	if n, m := testutil.ToFloat64(c.metrics.throttled), testutil.ToFloat64(c.metrics.identityThrottled); n != 3 || m != 2 {
		t.Fatalf("throttled %v, of which per identity %v; want 3 and 2", n, m)
	}
	// D's token, taken before the replica's budget refused it, was given back.
	if lim, ok := c.service.limits.identities.peek("app/d", time.Now()); !ok || lim.Tokens() < 1.99 {
		t.Fatalf("D's bucket: kept %v, tokens %v; want 2", ok, lim.Tokens())
	}
}
