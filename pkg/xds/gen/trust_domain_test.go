package gen

import (
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// withTrust is a Generator with DefaultOptions and that trust domain.
func withTrust(t *testing.T, domain string, aliases ...string) *Generator {
	t.Helper()
	o := DefaultOptions(quietLog())
	o.TrustDomain, o.TrustDomainAliases = domain, aliases
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestTrustDomainOptionRejectsInvalidDomains(t *testing.T) {
	for name, tc := range map[string]struct {
		domain  string
		aliases []string
	}{
		"an empty alias":              {domain: "example.org", aliases: []string{""}},
		"a domain with a path":        {domain: "example.org/ns"},
		"a domain with a port":        {domain: "example.org:443"},
		"an upper-case domain":        {domain: "Example.org"},
		"a valid domain, a bad alias": {domain: "example.org", aliases: []string{"old domain"}},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions(quietLog())
			o.TrustDomain, o.TrustDomainAliases = tc.domain, tc.aliases
			if _, err := New(o); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if got := newForTest(quietLog()).TrustDomain(); got != DefaultTrustDomain {
		t.Errorf("no trust domain given: %q, want %q", got, DefaultTrustDomain)
	}
	if got := withTrust(t, "", "old.example").trustIn(nil).domains(); !slices.Equal(got, []string{DefaultTrustDomain, "old.example"}) {
		t.Errorf("aliases without a domain: domains %v, want the default domain and the alias", got)
	}
	g := withTrust(t, "prod.example_1-a", "old.example", "prod.example_1-a", "old.example")
	if got := g.trustIn(nil).domains(); !slices.Equal(got, []string{"prod.example_1-a", "old.example"}) {
		t.Errorf("domains %v: want the domain, then each other alias once", got)
	}
}

// Istio's trust domain migration of principals (its trustdomain package's
// cases, restated).
func TestAuthzPrincipals(t *testing.T) {
	tests := map[string]struct {
		domain  string
		aliases []string
		in      []string
		want    []string
	}{
		"the default domain keeps principals as written": {
			domain: DefaultTrustDomain, in: []string{"cluster.local/ns/foo/sa/bar", "other/ns/foo/sa/bar"},
			want: []string{"cluster.local/ns/foo/sa/bar", "other/ns/foo/sa/bar"},
		},
		"cluster.local stands for the trust domain": {
			domain: "td2", in: []string{"cluster.local/ns/foo/sa/bar"}, want: []string{"td2/ns/foo/sa/bar"},
		},
		"the trust domain and each alias": {
			domain: "td2", aliases: []string{"td1", "td0"}, in: []string{"td1/ns/foo/sa/bar"},
			want: []string{"td2/ns/foo/sa/bar", "td1/ns/foo/sa/bar", "td0/ns/foo/sa/bar"},
		},
		"another domain is kept as it is": {
			domain: "td2", aliases: []string{"td1"}, in: []string{"elsewhere/ns/foo/sa/bar"}, want: []string{"elsewhere/ns/foo/sa/bar"},
		},
		"principals that name no domain are kept": {
			domain: "td2", aliases: []string{"td1"}, in: []string{"*", "*/ns/foo/sa/bar", "ns/foo/sa/bar", "*-suffix"},
			want: []string{"*", "*/ns/foo/sa/bar", "ns/foo/sa/bar", "*-suffix"},
		},
		"a *suffix domain stays for the domains it matches and names the others": {
			domain: "new-td", aliases: []string{"old-td", "other"}, in: []string{"*-td/ns/foo/sa/bar"},
			want: []string{"*-td/ns/foo/sa/bar", "other/ns/foo/sa/bar"},
		},
		"a prefix* domain names every domain": {
			domain: "td2", aliases: []string{"td1"}, in: []string{"td*/ns/foo/sa/bar"},
			want: []string{"td2/ns/foo/sa/bar", "td1/ns/foo/sa/bar"},
		},
		"wildcard accounts keep their wildcard": {
			domain: "td2", in: []string{"cluster.local/ns/foo/sa/*"}, want: []string{"td2/ns/foo/sa/*"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := withTrust(t, tc.domain, tc.aliases...)
			if got := g.trustIn(nil).authzPrincipals(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTrustDomainInClusterIdentities(t *testing.T) {
	g := withTrust(t, "prod.example", "legacy.example")
	want := func(ns, sa string) []string {
		return []string{"spiffe://legacy.example/ns/" + ns + "/sa/" + sa, "spiffe://prod.example/ns/" + ns + "/sa/" + sa}
	}
	store, err := worldtest.LoadFile("testdata/headless-mtls/input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := g.Class(store.World(), sidecar(t, "default"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Auto mTLS of an EDS cluster, and an ORIGINAL_DST cluster's mTLS.
	for cluster, w := range map[string][]string{
		ClusterName(80, "", "api.default.svc.cluster.local"): {
			"spiffe://legacy.example/ns/default/sa/api", "spiffe://legacy.example/ns/default/sa/api-canary",
			"spiffe://prod.example/ns/default/sa/api", "spiffe://prod.example/ns/default/sa/api-canary",
		},
		ClusterName(5432, "", dbHost): want("default", "db"),
	} {
		if _, sans := socketSANs(t, meshSocket(classCluster(t, cc, cluster))); !slices.Equal(sans, w) {
			t.Errorf("%s verifies %v, want %v", cluster, sans, w)
		}
	}
	// A proxyless gRPC client's ISTIO_MUTUAL cluster.
	store, err = worldtest.LoadFile("testdata/grpc-mtls/input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, p := loadCase(t, "testdata/grpc-mtls")
	gc, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := classCluster(t, gc, ClusterName(7070, "", "echo.ns1.svc.cluster.local"))
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatalf("gRPC cluster %s: %v", c.GetName(), err)
	}
	var got []string
	for _, m := range ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchSubjectAltNames() { //nolint:staticcheck // grpc-go's field
		got = append(got, m.GetExact())
	}
	w := append(want("ns1", "echo"), want("ns1", "echo-legacy")...)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		t.Errorf("gRPC cluster verifies %v, want %v", got, w)
	}
}

func TestTrustDomainInAuthorizationPrincipals(t *testing.T) {
	evs, err := worldtest.Decode([]byte(ratingsWorld + `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: viewer, namespace: default}
spec:
  rules:
  - from: [{source: {principals: ["cluster.local/ns/default/sa/productpage", "partner.example/ns/default/sa/partner"]}}]
  - when: [{key: source.principal, values: ["cluster.local/ns/monitoring/sa/prometheus"]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.1.0.30~ratings-v1-a.default~default.svc.cluster.local",
		map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "ratings"}})
	if err != nil {
		t.Fatal(err)
	}
	g := withTrust(t, "prod.example", "old.example")
	cc, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules := chainRBAC(t, g.Proxy(store.World(), p, cc), "inbound|9080||")
	ev := rbacEval{t}
	for principal, allowed := range map[string]bool{
		"spiffe://prod.example/ns/default/sa/productpage":    true,
		"spiffe://old.example/ns/default/sa/productpage":     true, // an alias
		"spiffe://cluster.local/ns/default/sa/productpage":   false,
		"spiffe://partner.example/ns/default/sa/partner":     true, // another domain, as written
		"spiffe://prod.example/ns/default/sa/partner":        false,
		"spiffe://prod.example/ns/monitoring/sa/prometheus":  true, // a when condition
		"spiffe://old.example/ns/monitoring/sa/prometheus":   true,
		"spiffe://cluster.local/ns/monitoring/sa/prometheus": false,
	} {
		rq := request{principal: principal, ip: "10.1.0.7", method: "GET", path: "/", host: "ratings", port: 9080}
		if got := ev.allowed(rules, rq); got != allowed {
			t.Errorf("%s: allowed %v, want %v", principal, got, allowed)
		}
	}
}
