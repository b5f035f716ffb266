package ca

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// maxCachedTokens bounds the TokenReview cache.
const maxCachedTokens = 10000

// reviewTimeout bounds one TokenReview, so a slow API server fails requests
// instead of holding them.
const reviewTimeout = 10 * time.Second

// tokenReviewAuthn accepts a Kubernetes service-account token for the
// audience, checked by the API server with a TokenReview. Successful reviews
// are reused for cacheTTL (never beyond the token's own expiry).
type tokenReviewAuthn struct {
	client      kubernetes.Interface
	audience    string
	trustDomain string
	cache       *tokenCache
	now         func() time.Time
}

var _ Authenticator = (*tokenReviewAuthn)(nil)

func (*tokenReviewAuthn) Name() string { return "token-review" }

func (t *tokenReviewAuthn) Authenticate(ctx context.Context) (Identity, error) {
	token, err := bearerToken(ctx)
	if err != nil {
		return Identity{}, err
	}
	now := t.now()
	exp, hasExp := jwtExpiry(token)
	if hasExp && !exp.After(now) {
		return Identity{}, fmt.Errorf("token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if id, ok := t.cache.get(token, now); ok {
		return id, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	review, err := t.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{t.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("TokenReview: %w", err)
	}
	st := review.Status
	if !st.Authenticated {
		return Identity{}, fmt.Errorf("token rejected by the API server: %s", orUnknown(st.Error))
	}
	if len(st.Audiences) > 0 && !slices.Contains(st.Audiences, t.audience) {
		return Identity{}, fmt.Errorf("token audiences %v do not include %q", st.Audiences, t.audience)
	}
	id, err := identityFromUsername(st.User.Username, t.trustDomain)
	if err != nil {
		return Identity{}, err
	}
	until := now.Add(t.cache.ttl)
	if hasExp && exp.Before(until) {
		until = exp
	}
	t.cache.put(token, id, until, now)
	return id, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "not authenticated"
	}
	return s
}

// jwtExpiry reads the exp claim of a JWT without verifying it: only used to
// refuse a token early or to bound the cache, never to accept one.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	sec, err := claims.Exp.Int64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// tokenCache remembers identities proven by TokenReview, keyed by the
// token's SHA-256 (the token itself is not kept).
type tokenCache struct {
	ttl time.Duration

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedIdentity
}

type cachedIdentity struct {
	id    Identity
	until time.Time
}

func newTokenCache(ttl time.Duration) *tokenCache {
	return &tokenCache{ttl: ttl, entries: map[[sha256.Size]byte]cachedIdentity{}}
}

func (c *tokenCache) get(token string, now time.Time) (Identity, bool) {
	if c.ttl <= 0 {
		return Identity{}, false
	}
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !now.Before(e.until) {
		return Identity{}, false
	}
	return e.id, true
}

func (c *tokenCache) put(token string, id Identity, until, now time.Time) {
	if c.ttl <= 0 || !now.Before(until) {
		return
	}
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxCachedTokens {
		for k, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCachedTokens {
			clear(c.entries)
		}
	}
	c.entries[k] = cachedIdentity{id: id, until: until}
}
