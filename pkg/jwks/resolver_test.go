package jwks

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	securityapi "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

const (
	keysA = `{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`
	keysB = `{"keys":[{"kty":"RSA","kid":"b","n":"AQAB","e":"AQAB"}]}`
)

// jwksServer serves a key set that the test can change, count and take
// down, on loopback.
type jwksServer struct {
	*httptest.Server
	mu     sync.Mutex
	body   string
	status int
	hits   atomic.Int64
}

func newJWKSServer(t *testing.T, body string) *jwksServer {
	t.Helper()
	s := &jwksServer{body: body, status: 200}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body, status := s.body, s.status
		s.mu.Unlock()
		if r.URL.Path == "/.well-known/openid-configuration" {
			body = `{"issuer":"` + s.URL + `","jwks_uri":"` + s.URL + `/keys"}`
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(body string, status int) {
	s.mu.Lock()
	s.body, s.status = body, status
	s.mu.Unlock()
}

func fastOptions() Options {
	o := DefaultOptions()
	o.RefreshInterval = 100 * time.Millisecond
	o.RefreshIntervalOnFailure = 50 * time.Millisecond
	o.MaxRefreshIntervalOnFailure = 200 * time.Millisecond
	o.RetryInterval = 10 * time.Millisecond
	o.Retries = 1
	o.DefaultTimeout = time.Second
	return o
}

func policy(name, issuer, uri string) model.Event {
	ra := &securityv1.RequestAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: "1"},
		Spec:       securityapi.RequestAuthentication{JwtRules: []*securityapi.JWTRule{{Issuer: issuer, JwksUri: uri}}},
	}
	ra.SetGroupVersionKind(model.KindRequestAuthentication.GroupVersionKind())
	return model.Event{Key: model.Key{Kind: model.KindRequestAuthentication, Namespace: "default", Name: name}, Object: ra}
}

type harness struct {
	store *model.Store
	reg   *prometheus.Registry
	logs  *syncBuffer
	r     *Resolver
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func start(t *testing.T, o Options, evs ...model.Event) *harness {
	t.Helper()
	h := &harness{store: model.NewStore(model.StoreOptions{}), reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	if len(evs) > 0 {
		if _, err := h.store.Apply(evs...); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if h.r, err = New(o, h.store, slog.New(slog.NewTextHandler(h.logs, nil)), h.reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.r.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) keys(issuer, uri string) *model.JWKS { return h.store.World().JWKS(issuer, uri) }

func (h *harness) counter(name string) float64 {
	mfs, _ := h.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// inlined is what generation puts in the proxies' filter for the rule.
func (h *harness) inlined(issuer, uri string) string {
	return gen.RuleJWKS(h.store.World(), &securityapi.JWTRule{Issuer: issuer, JwksUri: uri})
}

// TestResolverFetchesRefreshesAndFailsClosed: a key set a policy names is
// fetched from a server on loopback and inlined; a changed key set
// reaches the World (a Change the push planner sees); a server that
// goes away leaves the last good keys until the eviction period, then
// the policy fails closed (istiod's fake JWKS), with a metric and a log
// line per failed fetch that holds neither keys nor the URI's query.
func TestResolverFetchesRefreshesAndFailsClosed(t *testing.T) {
	srv := newJWKSServer(t, keysA)
	uri := srv.URL + "/keys?secret=q"
	o := fastOptions()
	o.EvictionDuration = 300 * time.Millisecond
	h := start(t, o, policy("jwt", "https://issuer.example", uri))
	var jwksChanges atomic.Int64
	h.store.Subscribe(func(u *model.Update) {
		for _, c := range u.Changes {
			if c.Key.Kind == model.KindJWKS {
				jwksChanges.Add(1)
			}
		}
	})
	eventually(t, "the key set fetched", func() bool { return h.inlined("https://issuer.example", uri) == keysA })
	if h.counter("pilot_jwks_resolver_network_fetch_success_total") < 1 {
		t.Error("no successful fetch counted")
	}

	srv.set(keysB, 200)
	eventually(t, "the changed key set refreshed", func() bool { return h.inlined("https://issuer.example", uri) == keysB })
	if jwksChanges.Load() < 1 {
		t.Error("the changed key set was no Change of the World")
	}
	before := jwksChanges.Load()
	time.Sleep(3 * o.RefreshInterval) // refreshes that find the same keys
	if n := jwksChanges.Load() - before; n != 0 {
		t.Errorf("%d Changes for refreshes that found the same keys, want 0", n)
	}

	srv.set("", 503)
	eventually(t, "a failed refresh counted", func() bool { return h.counter("pilot_jwks_resolver_network_fetch_fail_total") >= 1 })
	if got := h.inlined("https://issuer.example", uri); got != keysB {
		t.Errorf("within the eviction period the last good keys stay; inlined %q", got)
	}
	srv.Close()
	eventually(t, "the policy failing closed", func() bool {
		j := h.keys("https://issuer.example", uri)
		return j != nil && j.Failed && h.inlined("https://issuer.example", uri) == gen.PublicOnlyJwks
	})
	logs := h.logs.String()
	if !strings.Contains(logs, "JWKS fetch failed") {
		t.Errorf("no log line for the failed fetches:\n%s", logs)
	}
	if strings.Contains(logs, "secret=q") || strings.Contains(logs, `"kid"`) || strings.Contains(logs, "AQAB") {
		t.Errorf("the log holds the URI's query or key material:\n%s", logs)
	}
}

// TestResolverFailsClosedFromTheStart: a key set that cannot be fetched
// at all is Failed at once (generation inlines the fake JWKS), and a
// fetch is bounded: a body over MaxBytes, a non-2xx status, a body that
// is no key set and a server that does not answer in time all fail.
func TestResolverFailsClosedFromTheStart(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	for name, tc := range map[string]struct {
		body   string
		status int
		uri    func(s *jwksServer) string
	}{
		"a body larger than MaxBytes":           {body: `{"keys":[` + strings.Repeat(" ", 2048) + `]}`, status: 200},
		"a 500":                                 {body: keysA, status: 500},
		"a body that is no key set":             {body: "-----BEGIN PUBLIC KEY-----", status: 200},
		"a server that does not answer in time": {body: keysA, status: 200, uri: func(*jwksServer) string { return slow.URL + "/keys" }},
		"a server that is gone": {body: keysA, status: 200, uri: func(s *jwksServer) string {
			u := s.URL
			s.Close()
			return u + "/keys"
		}},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newJWKSServer(t, tc.body)
			srv.set(tc.body, tc.status)
			uri := srv.URL + "/keys"
			if tc.uri != nil {
				uri = tc.uri(srv)
			}
			o := fastOptions()
			o.MaxBytes = 1024
			o.DefaultTimeout = 200 * time.Millisecond
			h := start(t, o, policy("jwt", "iss", uri))
			eventually(t, "the key set Failed", func() bool { j := h.keys("iss", uri); return j != nil && j.Failed })
			if got := h.inlined("iss", uri); got != gen.PublicOnlyJwks {
				t.Errorf("inlined %q, want the fake JWKS", got)
			}
			if h.counter("pilot_jwks_resolver_network_fetch_fail_total") < 1 {
				t.Error("the failure is not counted")
			}
		})
	}
}

// TestResolverOpenIDDiscoveryAndRemoval: a rule with an issuer and no
// jwksUri gets the jwks_uri of the issuer's OpenID configuration; a key
// set no policy names any more leaves the World.
func TestResolverOpenIDDiscoveryAndRemoval(t *testing.T) {
	srv := newJWKSServer(t, keysA)
	h := start(t, fastOptions(), policy("jwt", srv.URL, ""))
	eventually(t, "the key set found by OpenID discovery", func() bool { return h.inlined(srv.URL, "") == keysA })
	if _, err := h.store.Apply(model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindRequestAuthentication, Namespace: "default", Name: "jwt"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the key set dropped", func() bool { return h.store.World().JWKSCount() == 0 })
	hits := srv.hits.Load()
	time.Sleep(300 * time.Millisecond)
	if n := srv.hits.Load() - hits; n != 0 {
		t.Errorf("%d fetches after no policy names the key set", n)
	}
}

// TestResolverBlockedCIDRs: a JWKS URI on a blocked address is never
// connected to.
func TestResolverBlockedCIDRs(t *testing.T) {
	srv := newJWKSServer(t, keysA)
	o := fastOptions()
	o.BlockedCIDRs = []string{"127.0.0.0/8", "::1/128"}
	h := start(t, o, policy("jwt", "iss", srv.URL+"/keys"))
	eventually(t, "the key set Failed", func() bool { j := h.keys("iss", srv.URL+"/keys"); return j != nil && j.Failed })
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("%d requests reached a blocked address", n)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Options)
		ok   bool
	}{
		"the defaults are valid":         {edit: func(*Options) {}, ok: true},
		"a zero refresh interval is not": {edit: func(o *Options) { o.RefreshInterval = 0 }},
		"a bad blocked CIDR is not":      {edit: func(o *Options) { o.BlockedCIDRs = []string{"10.0.0.0/33"} }},
		"a zero body limit is not":       {edit: func(o *Options) { o.MaxBytes = 0 }},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			tc.edit(&o)
			if err := o.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}
