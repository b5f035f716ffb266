package dataplane

import (
	"sort"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

const (
	reviewsVIP = "10.96.0.22"
	reviewsSAN = "spiffe://cluster.local/ns/default/sa/reviews"
)

var reviewsDomains = []string{"reviews.default.svc.cluster.local", "reviews.default.svc.cluster.local:9080", "reviews", "reviews:9080", reviewsVIP, reviewsVIP + ":9080"}

// istiodShape is reviews as istiod shapes it: one listener for the port,
// one RouteConfiguration named after the port, clusters named
// outbound|PORT|SUBSET|HOST.
func istiodShape(t *testing.T) *Config {
	jason := prefixRoute("jason", "/", "outbound|9080|v2|reviews.default.svc.cluster.local")
	jason.Match.Headers = []*routev3.HeaderMatcher{exactHeader("end-user", "jason")}
	split := weighted(prefixRoute("split", "/", ""), map[string]uint32{
		"outbound|9080|v2|reviews.default.svc.cluster.local": 80, "outbound|9080|v3|reviews.default.svc.cluster.local": 20,
	})
	return &Config{
		Listeners: []*listenerv3.Listener{
			captureListener(t, "PassthroughCluster"),
			portListener("0.0.0.0_9080", "0.0.0.0", 9080, httpChain(t, "", hcm(t, "9080"))),
		},
		Routes: []*routev3.RouteConfiguration{routeConfig("9080",
			vhost("reviews.default.svc.cluster.local:9080", reviewsDomains, jason, split),
			vhost("allow_any", []string{"*"}, prefixRoute("allow_any", "/", "PassthroughCluster")),
		)},
		Clusters: []*clusterT{
			istioMTLS(t, edsCluster("outbound|9080|v2|reviews.default.svc.cluster.local", ""), "outbound_.9080_.v2_.reviews.default.svc.cluster.local", reviewsSAN),
			istioMTLS(t, edsCluster("outbound|9080|v3|reviews.default.svc.cluster.local", ""), "outbound_.9080_.v3_.reviews.default.svc.cluster.local", reviewsSAN),
			originalDst("PassthroughCluster"),
		},
		Endpoints: []*claT{
			cla("outbound|9080|v2|reviews.default.svc.cluster.local", "10.1.0.14:9080+mtls"),
			cla("outbound|9080|v3|reviews.default.svc.cluster.local", "10.1.0.15:9080+mtls"),
		},
	}
}

// discoveryShape is the same behaviour under other names: a filter chain
// per service address, one RouteConfiguration per service port, other
// cluster and EDS names, the weights written out of a total of 1000.
func discoveryShape(t *testing.T) *Config {
	jason := prefixRoute("r1", "/", "c-v2")
	jason.Match.Headers = []*routev3.HeaderMatcher{exactHeader("end-user", "jason")}
	split := weighted(prefixRoute("r2", "/", ""), map[string]uint32{"c-v3": 200, "c-v2": 800})
	chain := httpChain(t, "reviews:9080", hcm(t, "reviews.default.svc.cluster.local:9080"))
	chain.FilterChainMatch = &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{{AddressPrefix: reviewsVIP, PrefixLen: wrapperspb.UInt32(32)}}}
	l := portListener("port-9080", "0.0.0.0", 9080, chain)
	l.DefaultFilterChain = tcpChain(t, "passthrough", "pass")
	return &Config{
		Listeners: []*listenerv3.Listener{captureListener(t, "pass"), l},
		Routes: []*routev3.RouteConfiguration{routeConfig("reviews.default.svc.cluster.local:9080",
			vhost("reviews", reviewsDomains, jason, split))},
		Clusters: []*clusterT{
			istioMTLS(t, edsCluster("c-v2", "eds-v2"), "outbound_.9080_.v2_.reviews.default.svc.cluster.local", reviewsSAN),
			istioMTLS(t, edsCluster("c-v3", "eds-v3"), "outbound_.9080_.v3_.reviews.default.svc.cluster.local", reviewsSAN),
			originalDst("pass"),
		},
		Endpoints: []*claT{cla("eds-v2", "10.1.0.14:9080+mtls"), cla("eds-v3", "10.1.0.15:9080+mtls")},
	}
}

func reviewsRequests() map[string]Request {
	return map[string]Request{
		"split":   {Mode: Outbound, DstIP: reviewsVIP, DstPort: 9080, Authority: "reviews:9080", Path: "/reviews/1"},
		"jason":   {Mode: Outbound, DstIP: reviewsVIP, DstPort: 9080, Authority: "reviews:9080", Headers: map[string]string{"end-user": "jason"}},
		"fqdn":    {Mode: Outbound, DstIP: reviewsVIP, DstPort: 9080, Authority: "reviews.default.svc.cluster.local:9080"},
		"tcp":     {Mode: Outbound, DstIP: "192.0.2.1", DstPort: 443, Protocol: TCP},
		"unknown": {Mode: Outbound, DstIP: "192.0.2.1", DstPort: 8443, Protocol: TCP},
	}
}

func TestDifferentNamesSameBehaviourDecideAlike(t *testing.T) {
	a, b := istiodShape(t), discoveryShape(t)
	for name, req := range reviewsRequests() {
		t.Run(name, func(t *testing.T) {
			da, db := Evaluate(a, req), Evaluate(b, req)
			if diff := Diff(da, db); len(diff) > 0 {
				t.Errorf("decisions differ:\n%s\nistiod shape: %v\ndiscovery shape: %v", strings.Join(diff, "\n"), da.Trace, db.Trace)
			}
			if da.Outcome != Forward {
				t.Errorf("outcome %s (%s), want forward", da.Outcome, da.Reason)
			}
		})
	}
	split := Evaluate(a, reviewsRequests()["split"])
	if len(split.Upstreams) != 2 || split.Upstreams[0].Weight+split.Upstreams[1].Weight != 1000000 {
		t.Errorf("split upstreams %s", split.Summary())
	}
	for _, u := range split.Upstreams {
		if ep := u.Cluster.Endpoints; len(ep) != 1 || !strings.HasPrefix(ep[0].TLS, "tls sni=outbound_.9080_.v") {
			t.Errorf("endpoint TLS %v, want Istio mTLS through the tlsMode socket match", ep)
		}
	}
}

// mutate returns a copy of the discovery-shaped config changed by fn.
func mutate(t *testing.T, fn func(*Config)) *Config {
	c := discoveryShape(t)
	cp := &Config{}
	for _, l := range c.Listeners {
		cp.Listeners = append(cp.Listeners, proto.Clone(l).(*listenerv3.Listener))
	}
	for _, r := range c.Routes {
		cp.Routes = append(cp.Routes, proto.Clone(r).(*routev3.RouteConfiguration))
	}
	for _, x := range c.Clusters {
		cp.Clusters = append(cp.Clusters, proto.Clone(x).(*clusterT))
	}
	for _, e := range c.Endpoints {
		cp.Endpoints = append(cp.Endpoints, proto.Clone(e).(*claT))
	}
	fn(cp)
	return cp
}

func TestOneFieldChangeDecidesDifferently(t *testing.T) {
	tests := map[string]struct {
		change  func(*Config)
		request string
		want    string // a fact of the changed decision
	}{
		"a weight": {
			change: func(c *Config) {
				c.Routes[0].VirtualHosts[0].Routes[1].GetRoute().GetWeightedClusters().Clusters[0].Weight = wrapperspb.UInt32(700)
			},
			request: "split", want: "weight: 777777", // 700 of 900
		},
		"a header match": {
			change: func(c *Config) {
				c.Routes[0].VirtualHosts[0].Routes[0].Match.Headers = []*routev3.HeaderMatcher{exactHeader("end-user", "json")}
			},
			request: "jason", want: "weight: 800000",
		},
		"a SAN": {
			change: func(c *Config) {
				ctx := c.Clusters[0].TransportSocketMatches[0].TransportSocket
				var tls tlsT
				if err := ctx.GetTypedConfig().UnmarshalTo(&tls); err != nil {
					t.Fatal(err)
				}
				tls.CommonTlsContext.GetCombinedValidationContext().DefaultValidationContext.MatchSubjectAltNames[0] = &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "spiffe://cluster.local/ns/default/sa/ratings"}}
				ctx.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, &tls)}
			},
			request: "jason", want: "sa/ratings",
		},
		"a route timeout": {
			change: func(c *Config) {
				c.Routes[0].VirtualHosts[0].Routes[1].GetRoute().Timeout = nil
			},
			request: "split", want: "policy: timeout=15s",
		},
		"an endpoint": {
			change: func(c *Config) {
				c.Endpoints[1] = cla("eds-v3", "10.1.0.16:9080+mtls")
			},
			request: "split", want: "10.1.0.16:9080",
		},
	}
	base := discoveryShape(t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := reviewsRequests()[tc.request]
			before, after := Evaluate(base, req), Evaluate(mutate(t, tc.change), req)
			diff := Diff(before, after)
			if len(diff) == 0 {
				t.Fatalf("the change is not seen: %s", after.Summary())
			}
			if !strings.Contains(strings.Join(diff, "\n"), tc.want) {
				t.Errorf("diff does not mention %q:\n%s", tc.want, strings.Join(diff, "\n"))
			}
		})
	}
}

func TestVirtualHostDomainOrder(t *testing.T) {
	rc := routeConfig("r",
		vhost("catch-all", []string{"*"}),
		vhost("prefix", []string{"api.*"}),
		vhost("short-suffix", []string{"*.com"}),
		vhost("long-suffix", []string{"*.example.com"}),
		vhost("exact", []string{"api.example.com"}),
	)
	tests := map[string]string{
		"api.example.com":  "exact",        // exact beats every wildcard
		"www.example.com":  "long-suffix",  // the longest suffix wildcard
		"www.other.com":    "short-suffix", // a suffix wildcard beats a prefix wildcard
		"api.other.org":    "prefix",       // a prefix wildcard beats "*"
		"example.com":      "short-suffix", // *.example.com needs a label before it
		"API.EXAMPLE.COM":  "exact",        // domains match without case
		"other":            "catch-all",    // "*" takes the rest
		".example.com":     "short-suffix", // *.example.com does not match the empty label
		"x.api.example.c":  "catch-all",    // api.* needs the prefix at the start
		"api.":             "catch-all",    // the wildcard does not match the empty string
		"apix":             "catch-all",    // api.* needs the dot
		"a.example.com":    "long-suffix",  // one label is enough
		"example.com.":     "catch-all",    // a trailing dot is another name
		"*.example.com":    "long-suffix",  // a literal star is an ordinary label
		"api.example.co":   "prefix",       // the prefix wildcard catches what the suffixes miss
		"b.api.example.c":  "catch-all",    // neither wildcard
		"api.example.com.": "prefix",       // a trailing dot defeats the exact match
	}
	for host, want := range tests {
		if got := pickVirtualHost(rc.VirtualHosts, host); got.GetName() != want {
			t.Errorf("%s: virtual host %q, want %q", host, got.GetName(), want)
		}
	}
}

func TestRouteOrderIsFirstMatchNotMostSpecific(t *testing.T) {
	c := discoveryShape(t)
	vh := c.Routes[0].VirtualHosts[0]
	wide := prefixRoute("wide", "/", "c-v3")
	narrow := prefixRoute("narrow", "/reviews", "c-v2")
	vh.Routes = []*routev3.Route{wide, narrow}
	d := Evaluate(c, reviewsRequests()["split"])
	if !strings.Contains(strings.Join(d.Trace, " "), `route "wide"`) {
		t.Errorf("first route should win: %v", d.Trace)
	}
}

func TestFilterChainMatchOrder(t *testing.T) {
	chain := func(name string, m *listenerv3.FilterChainMatch) *listenerv3.FilterChain {
		fc := tcpChain(t, name, name)
		fc.FilterChainMatch = m
		return fc
	}
	cidr := func(p string, n uint32) []*corev3.CidrRange {
		return []*corev3.CidrRange{{AddressPrefix: p, PrefixLen: wrapperspb.UInt32(n)}}
	}
	l := withTLSInspector(t, portListener("l", "0.0.0.0", 443,
		chain("port", &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(443), PrefixRanges: cidr("10.0.0.0", 8)}),
		chain("host", &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(443), PrefixRanges: cidr("10.1.2.3", 32)}),
		chain("sni-exact", &listenerv3.FilterChainMatch{ServerNames: []string{"a.example.com"}}),
		chain("sni-wild", &listenerv3.FilterChainMatch{ServerNames: []string{"*.example.com"}}),
		chain("tls", &listenerv3.FilterChainMatch{TransportProtocol: "tls"}),
		chain("empty", &listenerv3.FilterChainMatch{}),
	))
	l.DefaultFilterChain = tcpChain(t, "default", "default")
	tests := map[string]struct {
		in   chainInput
		want string
	}{
		"the destination port narrows first, then the longest prefix": {
			in: chainInput{dstIP: "10.1.2.3", dstPort: 443, transport: "raw_buffer"}, want: "host",
		},
		"a shorter prefix when the longer does not hold the address": {
			in: chainInput{dstIP: "10.9.9.9", dstPort: 443, sni: "a.example.com", transport: "tls"}, want: "port",
		},
		"an exact server name beats a wildcard": {
			in: chainInput{dstIP: "192.0.2.1", dstPort: 80, sni: "a.example.com", transport: "tls"}, want: "sni-exact",
		},
		"a wildcard server name": {
			in: chainInput{dstIP: "192.0.2.1", dstPort: 80, sni: "b.example.com", transport: "tls"}, want: "sni-wild",
		},
		"a chain without server names when none matches, then transport": {
			in: chainInput{dstIP: "192.0.2.1", dstPort: 80, sni: "other.org", transport: "tls"}, want: "tls",
		},
		"the empty match takes plaintext": {
			in: chainInput{dstIP: "192.0.2.1", dstPort: 80, transport: "raw_buffer"}, want: "empty",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fc, err := matchFilterChain(l, tc.in)
			if err != "" || fc.GetName() != tc.want {
				t.Errorf("chain %q (%s), want %q", fc.GetName(), err, tc.want)
			}
		})
	}
	t.Run("a chain that constrains a field and fails it is out, even when others are empty", func(t *testing.T) {
		l := portListener("l", "0.0.0.0", 80, chain("port", &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(81)}))
		l.DefaultFilterChain = tcpChain(t, "default", "default")
		if fc, _ := matchFilterChain(l, chainInput{dstPort: 80}); fc.GetName() != "default" {
			t.Errorf("chain %q, want the default chain", fc.GetName())
		}
		l.DefaultFilterChain = nil
		if _, err := matchFilterChain(l, chainInput{dstPort: 80}); err != "no filter chain" {
			t.Errorf("got %q, want no filter chain", err)
		}
	})
	t.Run("two chains that match alike are ambiguous", func(t *testing.T) {
		l := portListener("l", "0.0.0.0", 80, chain("a", nil), chain("b", nil))
		if _, err := matchFilterChain(l, chainInput{dstPort: 80}); !strings.Contains(err, "ambiguous") {
			t.Errorf("got %q, want ambiguous", err)
		}
	})
}

func TestOriginalDestinationHandOff(t *testing.T) {
	c := discoveryShape(t)
	exact := portListener("exact", "192.0.2.7", 9080, tcpChain(t, "exact", "pass"))
	c.Listeners = append(c.Listeners, exact)
	d := Evaluate(c, Request{Mode: Outbound, DstIP: "192.0.2.7", DstPort: 9080, Protocol: TCP})
	if !strings.Contains(strings.Join(d.Trace, " "), "listener exact") {
		t.Errorf("the listener of the exact address should win over 0.0.0.0: %v", d.Trace)
	}
	d = Evaluate(c, Request{Mode: Outbound, DstIP: "192.0.2.7", DstPort: 7777, Protocol: TCP})
	if !strings.Contains(strings.Join(d.Trace, " "), "listener capture") || d.Outcome != Forward {
		t.Errorf("without a listener for the port the capture listener keeps the connection: %v", d.Trace)
	}
}

func TestInboundMTLSAndRBAC(t *testing.T) {
	inbound := func(filters ...*hcmFilterT) *Config {
		h := hcm(t, "")
		h.HttpFilters = append(filters, h.HttpFilters...)
		h.RouteSpecifier = &hcmRouteConfigT{RouteConfig: routeConfig("inbound|9080||",
			vhost("inbound", []string{"*"}, prefixRoute("default", "/", "inbound|9080||")))}
		l := &listenerv3.Listener{Name: "in", Address: addr("0.0.0.0", InboundCapturePort),
			FilterChains: []*listenerv3.FilterChain{inboundMTLSChain(t, "mtls", 9080, h)}}
		return &Config{Listeners: []*listenerv3.Listener{withTLSInspector(t, l)}, Clusters: []*clusterT{originalDst("inbound|9080||")}}
	}
	peer := "spiffe://cluster.local/ns/default/sa/productpage"
	req := Request{Mode: Inbound, DstIP: "10.1.0.14", DstPort: 9080, TLS: MutualTLS, Peer: peer, Authority: "reviews:9080", Path: "/admin/x"}
	tests := map[string]struct {
		cfg  *Config
		req  Request
		want string // summary prefix
	}{
		"mTLS from a peer is accepted": {cfg: inbound(), req: req, want: "forward"},
		"plaintext finds no chain on a port that only takes TLS": {
			cfg: inbound(), req: Request{Mode: Inbound, DstIP: "10.1.0.14", DstPort: 9080, Authority: "reviews:9080"},
			want: "reset (no filter chain)",
		},
		"an ALLOW policy that matches the principal lets it through": {
			cfg: inbound(rbacFilter(t, rbacv3.RBAC_ALLOW, map[string]*rbacv3.Policy{"p": principalPolicy(peer)})), req: req, want: "forward",
		},
		"an ALLOW policy that matches nothing denies": {
			cfg: inbound(rbacFilter(t, rbacv3.RBAC_ALLOW, map[string]*rbacv3.Policy{"p": principalPolicy("spiffe://cluster.local/ns/x/sa/y")})),
			req: req, want: "local 403 (rbac: denied)",
		},
		"DENY runs first and wins over ALLOW": {
			cfg: inbound(rbacFilter(t, rbacv3.RBAC_DENY, map[string]*rbacv3.Policy{"admin": pathPolicy("/admin")}),
				rbacFilter(t, rbacv3.RBAC_ALLOW, map[string]*rbacv3.Policy{"p": principalPolicy(peer)})),
			req: req, want: "local 403 (rbac: denied)",
		},
		"a LOG policy changes nothing": {
			cfg: inbound(rbacFilter(t, rbacv3.RBAC_LOG, map[string]*rbacv3.Policy{"admin": pathPolicy("/admin")})), req: req, want: "forward",
		},
		"an authenticated principal needs a client certificate": {
			cfg:  inbound(rbacFilter(t, rbacv3.RBAC_ALLOW, map[string]*rbacv3.Policy{"p": principalPolicy(peer)})),
			req:  Request{Mode: Inbound, DstIP: "10.1.0.14", DstPort: 9080, TLS: SimpleTLS, Authority: "reviews:9080"},
			want: "reset (tls handshake: client certificate required)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := Evaluate(tc.cfg, tc.req)
			if !strings.HasPrefix(d.Summary(), tc.want) {
				t.Errorf("got %s, want %s (trace %v)", d.Summary(), tc.want, d.Trace)
			}
		})
	}
}

func TestHeaderMatcherCorners(t *testing.T) {
	req := Request{Headers: map[string]string{"x-a": "abc"}}
	tests := map[string]struct {
		m    *routev3.HeaderMatcher
		want bool
	}{
		"exact":                          {exactHeader("x-a", "abc"), true},
		"a missing header never matches": {exactHeader("x-b", ""), false},
		"inverted, a missing header matches": {
			&routev3.HeaderMatcher{Name: "x-b", InvertMatch: true, HeaderMatchSpecifier: &routev3.HeaderMatcher_PrefixMatch{PrefixMatch: "a"}}, true,
		},
		"treated as empty, a missing header matches the empty string": {
			&routev3.HeaderMatcher{Name: "x-b", TreatMissingHeaderAsEmpty: true, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
				StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: ""}}}}, true,
		},
		"present": {&routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}, true},
		"absent by present_match false": {
			&routev3.HeaderMatcher{Name: "x-b", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}, true,
		},
		"a regex matches the whole value": {
			&routev3.HeaderMatcher{Name: "x-a", HeaderMatchSpecifier: &routev3.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherv3.RegexMatcher{Regex: "b"}}}, false,
		},
		"pseudo-header :method": {exactHeader(":method", "GET"), true},
	}
	for name, tc := range tests {
		if got := matchHeader(tc.m, req.withDefaults()); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestRouteActions(t *testing.T) {
	base := func(r *routev3.Route) *Config {
		c := discoveryShape(t)
		c.Routes[0].VirtualHosts[0].Routes = []*routev3.Route{r}
		return c
	}
	req := Request{Mode: Outbound, DstIP: reviewsVIP, DstPort: 9080, Authority: "reviews:9080", Path: "/api/v1/items?x=1"}
	t.Run("prefix rewrite keeps the rest of the path and the query", func(t *testing.T) {
		r := prefixRoute("r", "/api/v1/", "c-v2")
		r.GetRoute().PrefixRewrite = "/api/"
		r.GetRoute().HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: "reviews.internal"}
		d := Evaluate(base(r), req)
		if u := d.Upstreams[0]; u.Path != "/api/items?x=1" || u.Authority != "reviews.internal" {
			t.Errorf("path %q authority %q", u.Path, u.Authority)
		}
	})
	t.Run("regex rewrite substitutes groups", func(t *testing.T) {
		r := prefixRoute("r", "/", "c-v2")
		r.GetRoute().RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: "^/api/v1/(.*)$"}, Substitution: "/v2/\\1"}
		if u := Evaluate(base(r), req).Upstreams[0]; u.Path != "/v2/items?x=1" {
			t.Errorf("path %q", u.Path)
		}
	})
	t.Run("a redirect builds the location", func(t *testing.T) {
		r := &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Redirect{Redirect: &routev3.RedirectAction{
				SchemeRewriteSpecifier: &routev3.RedirectAction_HttpsRedirect{HttpsRedirect: true},
				HostRedirect:           "www.example.com", PathRewriteSpecifier: &routev3.RedirectAction_PathRedirect{PathRedirect: "/new"},
				ResponseCode: routev3.RedirectAction_PERMANENT_REDIRECT,
			}}}
		// A host_redirect replaces the Host with its port (Envoy's
		// RouteEntryImplBase::newUri appends only port_redirect's).
		d := Evaluate(base(r), req)
		if d.Status != 308 || d.Location != "https://www.example.com/new?x=1" {
			t.Errorf("got %s", d.Summary())
		}
		// Without one the request's port stays, unless port_redirect
		// replaces it.
		r.GetRedirect().HostRedirect = ""
		if d := Evaluate(base(r), req); d.Location != "https://"+req.Authority+"/new?x=1" {
			t.Errorf("no host_redirect: got %s", d.Summary())
		}
		r.GetRedirect().PortRedirect = 8443
		host, _, _ := strings.Cut(req.Authority, ":")
		if d := Evaluate(base(r), req); d.Location != "https://"+host+":8443/new?x=1" {
			t.Errorf("port_redirect: got %s", d.Summary())
		}
	})
	t.Run("a direct response", func(t *testing.T) {
		r := &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 418,
				Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "teapot"}}}}}
		if d := Evaluate(base(r), req); d.Status != 418 || d.Body != "teapot" {
			t.Errorf("got %s %q", d.Summary(), d.Body)
		}
	})
	t.Run("the virtual host's retry policy applies when the route has none", func(t *testing.T) {
		c := base(prefixRoute("r", "/", "c-v2"))
		c.Routes[0].VirtualHosts[0].RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(3)}
		d := Evaluate(c, req)
		if !strings.Contains(strings.Join(d.Policy, " "), "retries=3 on=[5xx]") {
			t.Errorf("policy %v", d.Policy)
		}
	})
	t.Run("an unset timeout is Envoy's 15s, a zero timeout disables it", func(t *testing.T) {
		r := prefixRoute("r", "/", "c-v2")
		r.GetRoute().Timeout = nil
		if d := Evaluate(base(r), req); !strings.Contains(strings.Join(d.Policy, " "), "timeout=15s") {
			t.Errorf("policy %v", d.Policy)
		}
		r.GetRoute().Timeout = durationpb.New(0)
		if d := Evaluate(base(r), req); !strings.Contains(strings.Join(d.Policy, " "), "timeout=0s") {
			t.Errorf("policy %v", d.Policy)
		}
	})
	t.Run("a route naming a missing cluster is Envoy's 503", func(t *testing.T) {
		d := Evaluate(base(prefixRoute("r", "/", "nope")), req)
		if d.Status != 503 || d.Reason != "cluster not found" {
			t.Errorf("got %s", d.Summary())
		}
	})
	t.Run("cluster_not_found_response_code answers a missing cluster", func(t *testing.T) {
		r := prefixRoute("r", "/", "nope")
		r.GetRoute().ClusterNotFoundResponseCode = routev3.RouteAction_INTERNAL_SERVER_ERROR
		if d := Evaluate(base(r), req); d.Status != 500 || d.Reason != "cluster not found" {
			t.Errorf("got %s", d.Summary())
		}
		r.GetRoute().ClusterNotFoundResponseCode = routev3.RouteAction_NOT_FOUND
		if d := Evaluate(base(r), req); d.Status != 404 {
			t.Errorf("got %s", d.Summary())
		}
		// A share of a split: the missing cluster's answer is part of
		// the decision, the served share still forwards.
		split := weighted(prefixRoute("r", "/", ""), map[string]uint32{"c-v2": 1, "nope": 1})
		split.GetRoute().ClusterNotFoundResponseCode = routev3.RouteAction_INTERNAL_SERVER_ERROR
		d := Evaluate(base(split), req)
		if d.Outcome != Forward || !strings.Contains(d.Summary(), "missing cluster (500)") {
			t.Errorf("got %s", d.Summary())
		}
		split.GetRoute().ClusterNotFoundResponseCode = routev3.RouteAction_SERVICE_UNAVAILABLE
		if d2 := Evaluate(base(split), req); d2.Summary() == d.Summary() {
			t.Errorf("a split answering 503 for its missing share decides as one answering 500: %s", d2.Summary())
		}
	})
	t.Run("a cluster without endpoints is Envoy's 503", func(t *testing.T) {
		c := base(prefixRoute("r", "/", "c-v2"))
		c.Endpoints[0] = cla("eds-v2")
		if d := Evaluate(c, req); d.Status != 503 || d.Reason != "no healthy upstream" {
			t.Errorf("got %s", d.Summary())
		}
	})
	t.Run("no route is a 404", func(t *testing.T) {
		d := Evaluate(base(prefixRoute("r", "/other", "c-v2")), req)
		if d.Status != 404 || d.Reason != "no route" {
			t.Errorf("got %s", d.Summary())
		}
	})
}

func TestHeaderMutationOrder(t *testing.T) {
	hv := func(k, v string, act corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: act}
	}
	l := headerLevels{
		route: &routev3.Route{RequestHeadersToAdd: []*corev3.HeaderValueOption{hv("x-a", "route", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}},
		vhost: &routev3.VirtualHost{RequestHeadersToAdd: []*corev3.HeaderValueOption{hv("x-a", "vhost", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}},
		rc:    &routev3.RouteConfiguration{RequestHeadersToRemove: []string{"x-debug"}},
	}
	got, _ := l.mutations(Request{Headers: map[string]string{"x-debug": "1"}})
	if strings.Join(got, ";") != "-x-debug;x-a: vhost" {
		t.Errorf("got %v: the less specific level applies last and wins", got)
	}
	l.rc.MostSpecificHeaderMutationsWins = true
	got, _ = l.mutations(Request{})
	if strings.Join(got, ";") != "-x-debug (absent);x-a: route" {
		t.Errorf("got %v: with most_specific_header_mutations_wins the route's value wins", got)
	}
}

func TestGRPCClient(t *testing.T) {
	h := hcm(t, "svc:7070")
	api := &listenerv3.Listener{Name: "svc.ns.svc.cluster.local:7070", ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, h)}}
	r := prefixRoute("r", "", "outbound|7070||svc")
	r.GetRoute().MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(5e9)}
	c := &Config{
		Listeners: []*listenerv3.Listener{api},
		Routes:    []*routev3.RouteConfiguration{routeConfig("svc:7070", vhost("svc", []string{"svc.ns.svc.cluster.local:7070"}, r))},
		Clusters:  []*clusterT{edsCluster("outbound|7070||svc", "")},
		Endpoints: []*claT{cla("outbound|7070||svc", "10.1.0.9:7070")},
	}
	req := Request{Mode: GRPC, Target: "svc.ns.svc.cluster.local:7070", Protocol: HTTP2, Path: "/pkg.Svc/Call"}
	d := Evaluate(c, req)
	if d.Outcome != Forward || !strings.Contains(strings.Join(d.Policy, " "), "grpc timeout=5s") {
		t.Errorf("got %s %v", d.Summary(), d.Policy)
	}
	c.Endpoints[0].Endpoints[0].LoadBalancingWeight = nil
	if d := Evaluate(c, req); !strings.Contains(d.Upstreams[0].Cluster.Endpoints[0].Health, "unusable") {
		t.Errorf("a locality without weight should leave grpc-go no host: %v", d.Upstreams[0].Cluster.Endpoints)
	}
	if d := Evaluate(c, Request{Mode: GRPC, Target: "other:7070", Protocol: HTTP2}); d.Outcome != Fail {
		t.Errorf("an unknown target: %s", d.Summary())
	}
	r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 200}}
	if d := Evaluate(c, req); d.Outcome != Fail {
		t.Errorf("grpc-go fails RPCs on a route it cannot forward: %s", d.Summary())
	}
}
