package gen

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// A test signer: an RS256 key, its JWKS, and tokens it signs (the
// standard library is enough: RFC 7515 compact serialization).
type signer struct {
	kid string
	key *rsa.PrivateKey
}

var (
	signersOnce sync.Once
	signers     [2]*signer // [0] the issuer's, [1] a forger's
)

func testSigners(t testing.TB) (issuer, forger *signer) {
	t.Helper()
	signersOnce.Do(func() {
		for i, kid := range []string{"issuer-key", "issuer-key"} {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			signers[i] = &signer{kid: kid, key: k}
		}
	})
	return signers[0], signers[1]
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwks is the signer's public key set.
func (s *signer) jwks() string {
	pub := s.key.PublicKey
	b, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{
		"kty": "RSA", "kid": s.kid, "alg": "RS256", "use": "sig",
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}})
	return string(b)
}

// token signs claims (exp an hour from now unless set).
func (s *signer) token(claims map[string]any) string {
	if _, ok := claims["exp"]; !ok {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
	}
	h, _ := json.Marshal(map[string]any{"alg": "RS256", "typ": "JWT", "kid": s.kid})
	p, _ := json.Marshal(claims)
	in := b64(h) + "." + b64(p)
	sum := sha256.Sum256([]byte(in))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, sum[:])
	if err != nil {
		panic(err)
	}
	return in + "." + b64(sig)
}

// jwtEval decides what Envoy's jwt_authn filter does with a request: the
// tokens of each provider's locations, verified (RS256 against the
// provider's inline JWKS, issuer, audiences, expiry), the requirement of
// the first rule matching the path evaluated as Envoy does (a provider:
// its token present and valid; allow_missing: no token in any provider's
// locations, or one that validates; requires_any, requires_all).
type jwtEval struct{ t testing.TB }

// verify returns the payload metadata of the validated tokens (the last
// provider's that validated, as one request rarely has two) and whether
// the request passes.
func (e jwtEval) verify(cfg *jwtv3.JwtAuthentication, rq request) (map[string]any, bool) {
	if rq.method == "OPTIONS" && cfg.GetBypassCorsPreflight() && rq.headers["origin"] != "" && rq.headers["access-control-request-method"] != "" {
		return nil, true
	}
	type result struct {
		present bool
		payload map[string]any // nil: not valid
	}
	results := map[string]result{}
	for name, p := range cfg.GetProviders() {
		toks := tokensOf(p, rq)
		r := result{present: len(toks) > 0}
		for _, tok := range toks {
			if pl := e.validate(p, tok); pl != nil {
				r.payload = pl
				break
			}
		}
		results[name] = r
	}
	var eval func(*jwtv3.JwtRequirement) bool
	eval = func(q *jwtv3.JwtRequirement) bool {
		switch x := q.GetRequiresType().(type) {
		case *jwtv3.JwtRequirement_ProviderName:
			return results[x.ProviderName].payload != nil
		case *jwtv3.JwtRequirement_AllowMissing:
			anyPresent, anyValid := false, false
			for _, r := range results {
				anyPresent = anyPresent || r.present
				anyValid = anyValid || r.payload != nil
			}
			return !anyPresent || anyValid
		case *jwtv3.JwtRequirement_RequiresAny:
			for _, c := range x.RequiresAny.GetRequirements() {
				if eval(c) {
					return true
				}
			}
			return false
		case *jwtv3.JwtRequirement_RequiresAll:
			for _, c := range x.RequiresAll.GetRequirements() {
				if !eval(c) {
					return false
				}
			}
			return true
		}
		e.t.Fatalf("requirement %v not evaluated", q)
		return false
	}
	for _, rule := range cfg.GetRules() {
		if !strings.HasPrefix(rq.path, rule.GetMatch().GetPrefix()) {
			continue
		}
		if !eval(rule.GetRequires()) {
			return nil, false
		}
		break
	}
	var payload map[string]any
	for _, r := range results {
		if r.payload != nil {
			payload = r.payload
		}
	}
	return payload, true
}

// tokensOf extracts the tokens where provider p looks: its from_headers,
// from_params and from_cookies, or Envoy's defaults without any.
func tokensOf(p *jwtv3.JwtProvider, rq request) []string {
	headers := p.GetFromHeaders()
	params := p.GetFromParams()
	if len(headers)+len(params)+len(p.GetFromCookies()) == 0 {
		headers = []*jwtv3.JwtHeader{{Name: "Authorization", ValuePrefix: "Bearer "}}
		params = []string{"access_token"}
	}
	var out []string
	for _, h := range headers {
		v, ok := rq.headers[strings.ToLower(h.GetName())]
		if !ok {
			continue
		}
		if pre := h.GetValuePrefix(); pre != "" {
			if !strings.HasPrefix(strings.ToLower(v), strings.ToLower(pre)) {
				continue
			}
			v = v[len(pre):]
		}
		out = append(out, v)
	}
	if _, q, ok := strings.Cut(rq.path, "?"); ok {
		vals, _ := url.ParseQuery(q)
		for _, n := range params {
			out = append(out, vals[n]...)
		}
	}
	for _, c := range strings.Split(rq.headers["cookie"], ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(c), "=")
		for _, n := range p.GetFromCookies() {
			if k == n {
				out = append(out, v)
			}
		}
	}
	return out
}

// validate returns the token's claims when it verifies against p.
func (e jwtEval) validate(p *jwtv3.JwtProvider, tok string) map[string]any {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil
	}
	var hdr struct{ Alg, Kid string }
	if b, err := base64.RawURLEncoding.DecodeString(parts[0]); err != nil || json.Unmarshal(b, &hdr) != nil || hdr.Alg != "RS256" {
		return nil
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil
	}
	var set struct {
		Keys []struct{ Kty, Kid, N, E string }
	}
	if err := json.Unmarshal([]byte(p.GetLocalJwks().GetInlineString()), &set); err != nil {
		e.t.Fatalf("provider %s: inline JWKS does not parse: %v", p.GetIssuer(), err)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	verified := false
	for _, k := range set.Keys {
		if k.Kty != "RSA" || (hdr.Kid != "" && k.Kid != "" && k.Kid != hdr.Kid) {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		ex, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil {
			continue
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(ex).Int64())}
		if rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil
	}
	var claims map[string]any
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &claims) != nil {
		return nil
	}
	if iss := p.GetIssuer(); iss != "" && claims["iss"] != iss {
		return nil
	}
	if exp, ok := claims["exp"].(float64); ok && time.Unix(int64(exp), 0).Before(time.Now()) {
		return nil
	}
	if auds := p.GetAudiences(); len(auds) > 0 {
		var have []string
		switch a := claims["aud"].(type) {
		case string:
			have = []string{a}
		case []any:
			for _, x := range a {
				if s, ok := x.(string); ok {
					have = append(have, s)
				}
			}
		}
		ok := false
		for _, want := range auds {
			for _, h := range have {
				ok = ok || h == want
			}
		}
		if !ok {
			return nil
		}
	}
	// Envoy splits the space-delimited claims into lists in the metadata.
	for _, c := range p.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims() {
		if s, ok := claims[c].(string); ok {
			var l []any
			for _, f := range strings.Fields(s) {
				l = append(l, f)
			}
			claims[c] = l
		}
	}
	return claims
}

// metadata evaluates an RBAC metadata matcher on the jwt_authn payload.
func (e rbacEval) metadata(m *matcherv3.MetadataMatcher, rq request) bool {
	if m.GetFilter() != JWTFilter {
		e.t.Fatalf("metadata of filter %q not evaluated", m.GetFilter())
	}
	var v any
	if rq.jwt != nil {
		v = map[string]any{jwtPayloadKey: rq.jwt}
	}
	for _, seg := range m.GetPath() {
		obj, ok := v.(map[string]any)
		if !ok {
			v = nil
			break
		}
		v = obj[seg.GetKey()]
	}
	got := v != nil && e.value(m.GetValue(), v)
	return got != m.GetInvert()
}

func (e rbacEval) value(m *matcherv3.ValueMatcher, v any) bool {
	switch x := m.GetMatchPattern().(type) {
	case *matcherv3.ValueMatcher_StringMatch:
		s, ok := v.(string)
		return ok && e.str(x.StringMatch, s)
	case *matcherv3.ValueMatcher_ListMatch:
		l, ok := v.([]any)
		if !ok {
			return false
		}
		for _, el := range l {
			if e.value(x.ListMatch.GetOneOf(), el) {
				return true
			}
		}
		return false
	case *matcherv3.ValueMatcher_PresentMatch:
		return x.PresentMatch
	case *matcherv3.ValueMatcher_OrMatch:
		for _, c := range x.OrMatch.GetValueMatchers() {
			if e.value(c, v) {
				return true
			}
		}
		return false
	}
	e.t.Fatalf("value matcher %v not evaluated", m)
	return false
}
