package ca

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func TestParseJWT(t *testing.T) {
	exp := time.Unix(1900000000, 0)
	tests := map[string]struct {
		token   string
		wantErr string
		wantExp bool
	}{
		"reads the exp of a JWT":                   {token: jwt(exp), wantExp: true},
		"accepts a JWT without exp":                {token: tok("token-a")},
		"refuses a bearer with one part":           {token: "token-a", wantErr: "1 parts"},
		"refuses a bearer with four parts":         {token: tok("token-a") + ".x", wantErr: "4 parts"},
		"refuses a part that is not base64url":     {token: "e30.e30.not*base64", wantErr: "part 3 is not base64url"},
		"refuses an empty signature":               {token: "e30.e30.", wantErr: "part 3 is not base64url"},
		"refuses padded base64":                    {token: "e30=.e30.c2ln", wantErr: "part 1 is not base64url"},
		"refuses a header that is not JSON":        {token: "bm90.e30.c2ln", wantErr: "part 1 is not a JSON object"},
		"refuses claims that are a JSON array":     {token: "e30.W10.c2ln", wantErr: "part 2 is not a JSON object"},
		"refuses an exp that is not a number":      {token: "e30.eyJleHAiOiJzb29uIn0.c2ln", wantErr: "part 2 is not a JSON object"},
		"refuses an exp that is not an integer":    {token: "e30.eyJleHAiOjEuNX0.c2ln", wantErr: "exp is not an integer"},
		"never quotes the token in its refusal":    {token: "secret-part.secret-part.secret-part", wantErr: "part 1 is not a JSON object"},
		"refuses a bearer made of three dots only": {token: "..", wantErr: "part 1 is not base64url"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, hasExp, err := parseJWT(tc.token)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the refusal quotes the token: %v", err)
				}
				return
			}
			if err != nil || hasExp != tc.wantExp || (hasExp && !got.Equal(exp)) {
				t.Fatalf("exp %v (%v), err %v", got, hasExp, err)
			}
		})
	}
}

// reviewer is a tokenReviewAuthn on the fake API server with a clock the
// test moves; reviews counts TokenReviews and down makes them fail.
type reviewer struct {
	authn   *tokenReviewAuthn
	now     time.Time
	reviews int
	down    bool
}

func newReviewer(t *testing.T) *reviewer {
	t.Helper()
	r := &reviewer{now: time.Unix(1700000000, 0)}
	client := fakeClient(&r.reviews)
	client.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		if r.down {
			r.reviews++
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	r.authn = &tokenReviewAuthn{
		client: client, audience: "istio-ca", trustDomain: "cluster.local",
		cache: newTokenCache(30*time.Second, 5*time.Second), metrics: newMetrics(nil), now: func() time.Time { return r.now },
	}
	return r
}

func (r *reviewer) authenticate(t *testing.T, token string) error {
	t.Helper()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
	_, err := r.authn.Authenticate(ctx)
	return err
}

func TestTokenReviewCache(t *testing.T) {
	type step struct {
		after   time.Duration // the clock moves on by this first
		token   string
		down    bool // the API server cannot be reached
		ok      bool
		reviews int // TokenReviews so far
	}
	enc := base64.RawURLEncoding.EncodeToString
	// token-a, expiring 50 s from the start: cached for 20 s, not 30 s.
	expiring := enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"name":"token-a","exp":1700000050}`)) + ".c2ln"
	tests := map[string][]step{
		"reviews an accepted token once within the cache TTL, again after it": {
			{token: tok("token-a"), ok: true, reviews: 1},
			{after: 29 * time.Second, token: tok("token-a"), ok: true, reviews: 1},
			{after: time.Second, token: tok("token-a"), ok: true, reviews: 2},
		},
		"reviews a rejected token once within the negative TTL, again after it": {
			{token: tok("token-unknown"), reviews: 1},
			{after: 4 * time.Second, token: tok("token-unknown"), reviews: 1},
			{after: time.Second, token: tok("token-unknown"), reviews: 2},
		},
		"does not cache a failure to reach the API server": {
			{token: tok("token-a"), down: true, reviews: 1},
			{token: tok("token-a"), down: true, reviews: 2},
			{token: tok("token-a"), ok: true, reviews: 3},
		},
		"does not reuse an accepted token in the last 30 s before its exp": {
			{token: expiring, ok: true, reviews: 1},
			{after: 19 * time.Second, token: expiring, ok: true, reviews: 1},
			{after: time.Second, token: expiring, ok: true, reviews: 2},
			{after: 10 * time.Second, token: expiring, ok: true, reviews: 3},
			{token: expiring, ok: true, reviews: 4},
		},
		"refuses a bearer that is not a JWT without a review": {
			{token: "token-a", reviews: 0},
		},
		"refuses an expired token without a review": {
			{token: jwt(time.Unix(1700000000, 0).Add(-time.Second)), reviews: 0},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			r := newReviewer(t)
			for i, s := range steps {
				r.now = r.now.Add(s.after)
				r.down = s.down
				err := r.authenticate(t, s.token)
				if (err == nil) != s.ok || r.reviews != s.reviews {
					t.Fatalf("step %d: err %v, %d reviews; want ok %v, %d reviews", i, err, r.reviews, s.ok, s.reviews)
				}
			}
		})
	}
}

func TestRejectedTokensDoNotEvictAcceptedOnes(t *testing.T) {
	c := newTokenCache(time.Hour, time.Minute)
	now := time.Unix(1700000000, 0)
	c.put("t", Identity{"cluster.local", "app", "a"}, nil, now.Add(time.Hour), now)
	for i := range 2 * maxCachedTokens {
		c.put(fmt.Sprintf("junk-%d", i), Identity{}, errors.New("rejected"), now.Add(time.Minute), now)
	}
	if _, ok := c.get("t", now); !ok {
		t.Fatal("a flood of rejected tokens evicted an accepted one")
	}
	if n := c.rejected.len(); n > maxCachedTokens {
		t.Fatalf("%d rejected tokens cached, want at most %d", n, maxCachedTokens)
	}
}
