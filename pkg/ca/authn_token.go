package ca

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// maxCachedTokens bounds each TokenReview cache (accepted and rejected
// tokens apart, so a flood of junk cannot evict the tokens of workloads).
const maxCachedTokens = 10000

// reviewTimeout bounds one TokenReview, so a slow API server fails requests
// instead of holding them.
const reviewTimeout = 10 * time.Second

// tokenExpiryMargin: an accepted token is not reused from the cache in the
// last moments before its exp, so a cached result never outlives it.
const tokenExpiryMargin = 30 * time.Second

// tokenReviewAuthn accepts a Kubernetes service-account token for the
// audience, checked by the API server with a TokenReview. What can be
// refused without asking is refused first: a bearer that is not a JWT (a
// service-account token always is), an expired one, one the API server
// rejected moments ago (cached), or one from a caller over its failure
// budget. Reviews are cached by the token's SHA-256, never the token.
type tokenReviewAuthn struct {
	client      kubernetes.Interface
	audience    string
	trustDomain string
	cache       *tokenCache
	budget      *failureBudget // nil: none
	metrics     *metrics
	now         func() time.Time
}

var _ Authenticator = (*tokenReviewAuthn)(nil)

func (*tokenReviewAuthn) Name() string { return "token-review" }

func (t *tokenReviewAuthn) Authenticate(ctx context.Context) (Identity, error) {
	token, err := bearerToken(ctx)
	if err != nil {
		return Identity{}, err
	}
	exp, hasExp, err := parseJWT(token)
	if err != nil {
		t.metrics.unreviewed.WithLabelValues("malformed").Inc()
		return Identity{}, err
	}
	now := t.now()
	if hasExp && !exp.After(now) {
		t.metrics.unreviewed.WithLabelValues("expired").Inc()
		return Identity{}, fmt.Errorf("token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if a, ok := t.cache.get(token, now); ok {
		t.metrics.reviewCacheHits.WithLabelValues(reviewResult(a.err)).Inc()
		return a.id, a.err
	}
	h, err := t.budget.admit(ctx)
	if err != nil {
		label := "global_budget"
		if errors.Is(err, errPeerBudget) {
			label = "peer_budget"
		}
		t.metrics.unreviewed.WithLabelValues(label).Inc()
		return Identity{}, err
	}
	id, definite, err := t.review(ctx, token)
	t.metrics.reviews.WithLabelValues(reviewResult(err)).Inc()
	if err != nil && definite {
		h.charge()
	} else {
		h.release()
	}
	switch {
	case err == nil:
		until := now.Add(t.cache.ttl)
		if hasExp && exp.Add(-tokenExpiryMargin).Before(until) {
			until = exp.Add(-tokenExpiryMargin)
		}
		t.cache.put(token, id, nil, until, now)
	case definite:
		t.cache.put(token, Identity{}, err, now.Add(t.cache.negativeTTL), now)
		return Identity{}, settledError{err} // charged by the hold
	default:
		return Identity{}, settledError{err} // the API server's failure, not the caller's
	}
	return id, nil
}

// review asks the API server; definite says the answer is about the token
// (not a failure to ask), so it may be cached.
func (t *tokenReviewAuthn) review(ctx context.Context, token string) (Identity, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := t.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{t.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, false, fmt.Errorf("TokenReview: %s", clip(err.Error()))
	}
	st := review.Status
	if !st.Authenticated {
		return Identity{}, true, fmt.Errorf("token rejected by the API server: %s", clip(orUnknown(st.Error)))
	}
	if len(st.Audiences) > 0 && !slices.Contains(st.Audiences, t.audience) {
		return Identity{}, true, fmt.Errorf("token audiences %s do not include %q", clip(fmt.Sprint(st.Audiences)), t.audience)
	}
	id, err := identityFromUsername(st.User.Username, t.trustDomain)
	return id, err != nil, err
}

func reviewResult(err error) string {
	if err == nil {
		return "authenticated"
	}
	return "rejected"
}

func orUnknown(s string) string {
	if s == "" {
		return "not authenticated"
	}
	return s
}

// parseJWT checks that token is shaped as a JWT (three base64url parts,
// the first two JSON objects) and reads its exp claim without verifying
// anything: only used to refuse a token early or to bound the cache,
// never to accept one. The error never quotes the token.
func parseJWT(token string) (exp time.Time, hasExp bool, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false, fmt.Errorf("bearer token is not a JWT: %d parts, want 3", len(parts))
	}
	var header map[string]any
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	for i, into := range []any{&header, &claims, nil} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || len(b) == 0 {
			return time.Time{}, false, fmt.Errorf("bearer token is not a JWT: part %d is not base64url", i+1)
		}
		if into != nil && json.Unmarshal(b, into) != nil {
			return time.Time{}, false, fmt.Errorf("bearer token is not a JWT: part %d is not a JSON object", i+1)
		}
	}
	if claims.Exp == nil {
		return time.Time{}, false, nil
	}
	sec, err := claims.Exp.Int64()
	if err != nil {
		return time.Time{}, false, errors.New("bearer token is not a JWT: exp is not an integer")
	}
	return time.Unix(sec, 0), true, nil
}

// tokenCache remembers TokenReview answers, keyed by the token's SHA-256
// (the token itself is not kept): accepted tokens for ttl (never past the
// token's own expiry), rejected ones for negativeTTL, in maps of their own.
type tokenCache struct {
	ttl, negativeTTL time.Duration
	accepted         *expiringMap[[sha256.Size]byte, Identity]
	rejected         *expiringMap[[sha256.Size]byte, error]
}

func newTokenCache(ttl, negativeTTL time.Duration) *tokenCache {
	return &tokenCache{
		ttl: ttl, negativeTTL: negativeTTL,
		accepted: newExpiringMap[[sha256.Size]byte, Identity](maxCachedTokens),
		rejected: newExpiringMap[[sha256.Size]byte, error](maxCachedTokens),
	}
}

// answer is a cached TokenReview: an identity, or the rejection's error.
type answer struct {
	id  Identity
	err error
}

// get returns the cached answer for token.
func (c *tokenCache) get(token string, now time.Time) (answer, bool) {
	if c.ttl <= 0 && c.negativeTTL <= 0 {
		return answer{}, false
	}
	k := sha256.Sum256([]byte(token))
	if id, ok := c.accepted.get(k, now); ok {
		return answer{id: id}, true
	}
	if err, ok := c.rejected.get(k, now); ok {
		return answer{err: fmt.Errorf("%w (rejected moments ago, not reviewed again)", err)}, true
	}
	return answer{}, false
}

// put caches id (err nil) or the rejection err until the given time.
func (c *tokenCache) put(token string, id Identity, err error, until, now time.Time) {
	if !now.Before(until) {
		return
	}
	k := sha256.Sum256([]byte(token))
	switch {
	case err == nil && c.ttl > 0:
		c.accepted.put(k, id, until, now)
	case err != nil && c.negativeTTL > 0:
		c.rejected.put(k, err, until, now)
	}
}
