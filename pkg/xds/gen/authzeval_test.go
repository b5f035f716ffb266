package gen

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// request is what Envoy's RBAC filter sees of a connection or request.
// principal is the peer certificate's URI SAN ("" for plaintext); ip is
// the peer's address (direct_remote_ip); xff is the X-Forwarded-For header
// the request arrived with; remote, the address remote_ip matches, is
// what the HttpConnectionManager makes of both (throughHCM), the peer's
// when unset. method, path, host, headers and xff are empty on TCP.
type request struct {
	principal, ip, method, path, host string
	xff, remote                       string
	port                              uint32
	headers                           map[string]string
	// jwt is the payload jwt_authn validated (its dynamic metadata), nil
	// for none: set by policedChain.status from the chain's JWT filter.
	jwt map[string]any
}

func (rq request) remoteIP() string {
	if rq.remote != "" {
		return rq.remote
	}
	return rq.ip
}

// throughHCM sets rq.remote as Envoy's HttpConnectionManager computes the
// downstream remote address (ConnectionManagerUtility::mutateRequestHeaders):
// with use_remote_address and xff_num_trusted_hops N = 0 it is the peer,
// X-Forwarded-For ignored; with N > 0 the Nth address from the right of
// the X-Forwarded-For the request came with (the one the outermost trusted
// proxy saw), the peer if there are fewer; without use_remote_address
// the (N+1)th from the right, the peer if there are fewer. An address that
// does not parse also falls back to the peer.
func throughHCM(m *hcmv3.HttpConnectionManager, rq request) request {
	rq.remote = rq.ip
	var hops []string
	for _, h := range strings.Split(rq.xff, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hops = append(hops, h)
		}
	}
	n := int(m.GetXffNumTrustedHops())
	skip := n
	if m.GetUseRemoteAddress().GetValue() {
		if n == 0 {
			return rq
		}
		skip = n - 1
	}
	if i := len(hops) - 1 - skip; i >= 0 {
		if a, err := netip.ParseAddr(hops[i]); err == nil {
			rq.remote = a.String()
		}
	}
	return rq
}

// rbacEval evaluates generated RBAC configuration with Envoy's semantics
// for the matchers the generator emits; any other matcher fails the test,
// so a new translation cannot go unevaluated.
type rbacEval struct{ t *testing.T }

func (e rbacEval) str(m *matcherv3.StringMatcher, v string) bool {
	if m.GetIgnoreCase() {
		v = strings.ToLower(v)
	}
	lower := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == lower(p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, lower(p.Prefix))
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, lower(p.Suffix))
	case *matcherv3.StringMatcher_SafeRegex:
		// Envoy's safe_regex matches the whole value.
		return regexp.MustCompile("^(?:" + p.SafeRegex.GetRegex() + ")$").MatchString(v)
	}
	e.t.Fatalf("string matcher %v not evaluated", m)
	return false
}

func (e rbacEval) cidr(r *corev3.CidrRange, ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	p, err := netip.ParseAddr(r.GetAddressPrefix())
	if err != nil {
		e.t.Fatalf("bad CIDR %v", r)
	}
	return netip.PrefixFrom(p, int(r.GetPrefixLen().GetValue())).Contains(a)
}

func (e rbacEval) header(h *routev3.HeaderMatcher, rq request) bool {
	v, ok := map[string]string{":method": rq.method, ":authority": rq.host, ":path": rq.path}[h.GetName()]
	if !ok {
		v, ok = rq.headers[h.GetName()]
	}
	ok = ok && v != ""
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		return ok == s.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		return ok && e.str(s.StringMatch, v)
	}
	e.t.Fatalf("header matcher %v not evaluated", h)
	return false
}

func (e rbacEval) id(p *rbacv3.Principal, rq request) bool {
	switch x := p.GetIdentifier().(type) {
	case *rbacv3.Principal_Any:
		return true
	case *rbacv3.Principal_AndIds:
		for _, c := range x.AndIds.GetIds() {
			if !e.id(c, rq) {
				return false
			}
		}
		return true
	case *rbacv3.Principal_OrIds:
		for _, c := range x.OrIds.GetIds() {
			if e.id(c, rq) {
				return true
			}
		}
		return false
	case *rbacv3.Principal_NotId:
		return !e.id(x.NotId, rq)
	case *rbacv3.Principal_Authenticated_:
		return rq.principal != "" && e.str(x.Authenticated.GetPrincipalName(), rq.principal)
	case *rbacv3.Principal_DirectRemoteIp:
		return e.cidr(x.DirectRemoteIp, rq.ip)
	case *rbacv3.Principal_RemoteIp:
		return e.cidr(x.RemoteIp, rq.remoteIP())
	case *rbacv3.Principal_Header:
		return e.header(x.Header, rq)
	case *rbacv3.Principal_Metadata:
		return e.metadata(x.Metadata, rq)
	}
	e.t.Fatalf("principal %v not evaluated", p)
	return false
}

func (e rbacEval) perm(p *rbacv3.Permission, rq request) bool {
	switch x := p.GetRule().(type) {
	case *rbacv3.Permission_Any:
		return true
	case *rbacv3.Permission_AndRules:
		for _, c := range x.AndRules.GetRules() {
			if !e.perm(c, rq) {
				return false
			}
		}
		return true
	case *rbacv3.Permission_OrRules:
		for _, c := range x.OrRules.GetRules() {
			if e.perm(c, rq) {
				return true
			}
		}
		return false
	case *rbacv3.Permission_NotRule:
		return !e.perm(x.NotRule, rq)
	case *rbacv3.Permission_Header:
		return e.header(x.Header, rq)
	case *rbacv3.Permission_UrlPath:
		path, _, _ := strings.Cut(rq.path, "?")
		return rq.path != "" && e.str(x.UrlPath.GetPath(), path)
	case *rbacv3.Permission_DestinationPort:
		return x.DestinationPort == rq.port
	}
	e.t.Fatalf("permission %v not evaluated", p)
	return false
}

// allowed runs the RBAC filters in order as Envoy does: a LOG filter lets
// everything through, a DENY filter stops what one of its policies
// matches, an ALLOW filter stops what none of its policies matches. A
// filter without rules (shadow rules only) enforces nothing.
func (e rbacEval) allowed(filters []*rbacv3.RBAC, rq request) bool {
	for _, r := range filters {
		if r == nil {
			continue
		}
		matched := false
		for _, p := range r.GetPolicies() {
			ids, perms := false, false
			for _, id := range p.GetPrincipals() {
				ids = ids || e.id(id, rq)
			}
			for _, pm := range p.GetPermissions() {
				perms = perms || e.perm(pm, rq)
			}
			matched = matched || (ids && perms)
		}
		switch r.GetAction() {
		case rbacv3.RBAC_DENY:
			if matched {
				return false
			}
		case rbacv3.RBAC_ALLOW:
			if !matched {
				return false
			}
		}
	}
	return true
}

// chainRBAC returns the RBAC rules of the virtualInbound chain named name,
// from its HTTP filters (before the router) or its network filters.
func chainRBAC(t testing.TB, pc *ProxyConfig, name string) []*rbacv3.RBAC {
	t.Helper()
	m, err := pc.Get(ListenerType, VirtualInbound).Any.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	for _, fc := range m.(*listenerv3.Listener).GetFilterChains() {
		if fc.GetName() != name {
			continue
		}
		var out []*rbacv3.RBAC
		for _, f := range fc.GetFilters() {
			msg, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			switch c := msg.(type) {
			case *netrbacv3.RBAC:
				out = append(out, c.GetRules())
			case *hcmv3.HttpConnectionManager:
				for _, hf := range c.GetHttpFilters() {
					hm, err := hf.GetTypedConfig().UnmarshalNew()
					if err != nil {
						t.Fatal(err)
					}
					if r, ok := hm.(*httprbacv3.RBAC); ok {
						out = append(out, r.GetRules())
					}
				}
			}
		}
		return out
	}
	t.Fatalf("virtualInbound has no chain %s", name)
	return nil
}

// policedChain is one filter chain of a listener as the RBAC evaluation
// sees it: its RBAC rules in order and, for HTTP, its connection manager.
type policedChain struct {
	name  string
	rules []*rbacv3.RBAC
	hcm   *hcmv3.HttpConnectionManager
	// jwt is the chain's jwt_authn filter, nil for none; it runs before
	// the RBAC filters (authn_jwt.go).
	jwt *jwtv3.JwtAuthentication
}

// allowed evaluates rq on the chain, through its connection manager for
// HTTP.
func (c policedChain) allowed(e rbacEval, rq request) bool {
	return c.status(e, rq) == 200
}

// status is what the chain answers rq: 401 when its JWT filter refuses
// the request's token, 403 when RBAC denies it, else 200.
func (c policedChain) status(e rbacEval, rq request) int {
	if c.hcm != nil {
		rq = throughHCM(c.hcm, rq)
	}
	if c.jwt != nil {
		payload, ok := jwtEval{e.t}.verify(c.jwt, rq)
		if !ok {
			return 401
		}
		rq.jwt = payload
	}
	if !e.allowed(c.rules, rq) {
		return 403
	}
	return 200
}

// listenerChains returns the chains of a listener with their RBAC, each
// named by its name or, when it has none, "#INDEX".
func listenerChains(t testing.TB, l *listenerv3.Listener) []policedChain {
	t.Helper()
	var out []policedChain
	for i, fc := range l.GetFilterChains() {
		pc := policedChain{name: fc.GetName()}
		if pc.name == "" {
			pc.name = "#" + strconv.Itoa(i)
		}
		for _, f := range fc.GetFilters() {
			msg, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			switch c := msg.(type) {
			case *netrbacv3.RBAC:
				pc.rules = append(pc.rules, c.GetRules())
			case *hcmv3.HttpConnectionManager:
				pc.hcm = c
				for _, hf := range c.GetHttpFilters() {
					hm, err := hf.GetTypedConfig().UnmarshalNew()
					if err != nil {
						t.Fatal(err)
					}
					if r, ok := hm.(*httprbacv3.RBAC); ok {
						pc.rules = append(pc.rules, r.GetRules())
					}
					if j, ok := hm.(*jwtv3.JwtAuthentication); ok {
						pc.jwt = j
					}
				}
			}
		}
		out = append(out, pc)
	}
	return out
}
