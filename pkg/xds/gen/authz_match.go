package gen

import (
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"
)

// ruleBuilder translates one AuthorizationPolicy rule. A field that cannot
// be expressed for the chain (an HTTP-only field on a TCP port, a key or
// value this generator does not map) sets skipped; the caller then drops
// the rule (ALLOW, AUDIT) or builds it without the field (DENY), so that
// what is not understood never allows more than the policy says.
type ruleBuilder struct {
	tcp     bool
	skipped bool
	// noJWT is set on a proxyless gRPC server: no JWT is validated, and
	// requestPrincipals and request.auth.* are unsupported (fail closed).
	noJWT bool
	// principals rewrites principals for the trust domain and its aliases
	// (Generator.authzPrincipals); nil keeps them as written.
	principals func([]string) []string
	// unsupported names what the rule uses that discovery cannot check
	// on this proxy (requestPrincipals, request.auth.* keys on proxyless
	// gRPC), for the log;
	// an HTTP field on a TCP chain is not among them (Istio's semantics,
	// not a gap).
	unsupported []string
}

func (b *ruleBuilder) skip() { b.skipped = true }

// unsupportedPart marks the rule as using what discovery cannot check.
func (b *ruleBuilder) unsupportedPart(what string) {
	b.skip()
	if !slices.Contains(b.unsupported, what) {
		b.unsupported = append(b.unsupported, what)
	}
}

// wildcard turns Istio's value syntax ("*", "pre*", "*suf", exact) into a
// string matcher; prefix is prepended to prefix and exact values.
func wildcard(v, prefix string) *matcherv3.StringMatcher {
	switch {
	case v == "*":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}}
	case strings.HasSuffix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix + strings.TrimSuffix(v, "*")}}
	case strings.HasPrefix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(v, "*")}}
	default:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: prefix + v}}
	}
}

func principalName(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}

// principalIDs match the principals vals, rewritten for the trust domain.
func (b *ruleBuilder) principalIDs(vals []string) []*rbacv3.Principal {
	if b.principals != nil {
		vals = b.principals(vals)
	}
	return mapIDs(vals, principalID)
}

// principalID matches a peer certificate's URI SAN against an Istio
// principal (TRUST_DOMAIN/ns/NS/sa/SA, with * wildcards).
func principalID(v string) *rbacv3.Principal {
	return principalName(wildcard(v, "spiffe://"))
}

// namespaceID matches the principals of a namespace, as Istio does: a
// regular expression on the URI SAN.
func namespaceID(ns string) *rbacv3.Principal {
	var re string
	switch {
	case ns == "*":
		re = ".*/ns/.*/.*"
	case strings.HasSuffix(ns, "*"):
		re = ".*/ns/" + regexp.QuoteMeta(strings.TrimSuffix(ns, "*")) + ".*/.*"
	case strings.HasPrefix(ns, "*"):
		re = ".*/ns/.*" + regexp.QuoteMeta(strings.TrimPrefix(ns, "*")) + "/.*"
	default:
		re = ".*/ns/" + regexp.QuoteMeta(ns) + "/.*"
	}
	return principalName(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}})
}

// cidr parses an address or a CIDR block; ok is false for neither.
func cidr(s string) (*corev3.CidrRange, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return nil, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}, true
}

// ipIDs matches the direct peer address (remote false) or the client
// address from X-Forwarded-For (remote true).
func (b *ruleBuilder) ipIDs(vals []string, remote bool) []*rbacv3.Principal {
	var out []*rbacv3.Principal
	for _, v := range vals {
		r, ok := cidr(v)
		if !ok {
			// Leaving the whole field out only ever widens the rule.
			b.skip()
			return nil
		}
		if remote {
			out = append(out, &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: r}})
		} else {
			out = append(out, &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: r}})
		}
	}
	return out
}

func headerID(name string, m *matcherv3.StringMatcher) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m}}
}

func exact(v string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
}

// authzHeader is Istio's header value syntax: * for presence, a leading or
// trailing * for suffix or prefix.
func authzHeader(name, v string) *routev3.HeaderMatcher {
	if v == "*" {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	}
	return headerID(name, wildcard(v, ""))
}

func (b *ruleBuilder) portPerms(vals []string) []*rbacv3.Permission {
	var out []*rbacv3.Permission
	for _, v := range vals {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			b.skip()
			return nil
		}
		out = append(out, &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: uint32(n)}})
	}
	return out
}

func headerPerm(h *routev3.HeaderMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: h}}
}

func pathPerm(v string) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: wildcard(v, "")},
	}}}
}

// hostPerm matches the :authority header, case-insensitively as Istio
// does.
func hostPerm(v string) *rbacv3.Permission {
	m := wildcard(v, "")
	if v != "*" {
		m.IgnoreCase = true
	}
	return headerPerm(headerID(":authority", m))
}

// anyOf is the OR of ms (nil for none); allOf the AND.
func anyOfIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	switch len(ids) {
	case 0:
		return nil
	case 1:
		return ids[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ids}}}
}

func allOfIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	switch len(ids) {
	case 0:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	case 1:
		return ids[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
}

func notID(id *rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: id}}
}

func anyOfPerms(ps []*rbacv3.Permission) *rbacv3.Permission {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: ps}}}
}

func allOfPerms(ps []*rbacv3.Permission) *rbacv3.Permission {
	switch len(ps) {
	case 0:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	case 1:
		return ps[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: ps}}}
}

func notPerm(p *rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: p}}
}

// addIDs appends the OR of yes and the negated OR of no to and.
func addIDs(and []*rbacv3.Principal, yes, no []*rbacv3.Principal) []*rbacv3.Principal {
	if y := anyOfIDs(yes); y != nil {
		and = append(and, y)
	}
	if n := anyOfIDs(no); n != nil {
		and = append(and, notID(n))
	}
	return and
}

func addPerms(and []*rbacv3.Permission, yes, no []*rbacv3.Permission) []*rbacv3.Permission {
	if y := anyOfPerms(yes); y != nil {
		and = append(and, y)
	}
	if n := anyOfPerms(no); n != nil {
		and = append(and, notPerm(n))
	}
	return and
}

func mapIDs(vals []string, f func(string) *rbacv3.Principal) []*rbacv3.Principal {
	out := make([]*rbacv3.Principal, 0, len(vals))
	for _, v := range vals {
		out = append(out, f(v))
	}
	return out
}

func mapPerms(vals []string, f func(string) *rbacv3.Permission) []*rbacv3.Permission {
	out := make([]*rbacv3.Permission, 0, len(vals))
	for _, v := range vals {
		out = append(out, f(v))
	}
	return out
}

// source is the AND of one from.source's fields.
func (b *ruleBuilder) source(s *security.Source) *rbacv3.Principal {
	var and []*rbacv3.Principal
	and = addIDs(and, b.principalIDs(s.GetPrincipals()), b.principalIDs(s.GetNotPrincipals()))
	and = addIDs(and, mapIDs(s.GetNamespaces(), namespaceID), mapIDs(s.GetNotNamespaces(), namespaceID))
	and = addIDs(and, b.ipIDs(s.GetIpBlocks(), false), b.ipIDs(s.GetNotIpBlocks(), false))
	and = addIDs(and, b.ipIDs(s.GetRemoteIpBlocks(), true), b.ipIDs(s.GetNotRemoteIpBlocks(), true))
	and = addIDs(and, b.requestPrincipals("source.requestPrincipals", s.GetRequestPrincipals()),
		b.requestPrincipals("source.notRequestPrincipals", s.GetNotRequestPrincipals()))
	// The service account and trust domain fields are not translated yet.
	// The source is built without them and the rule marked (fail closed).
	for _, f := range []struct {
		name string
		n    int
	}{
		{"serviceAccounts", len(s.GetServiceAccounts())},
		{"notServiceAccounts", len(s.GetNotServiceAccounts())},
		{"trustDomains", len(s.GetTrustDomains())},
		{"notTrustDomains", len(s.GetNotTrustDomains())},
	} {
		if f.n > 0 {
			b.unsupportedPart("source." + f.name)
		}
	}
	return allOfIDs(and)
}

// operation is the AND of one to.operation's fields.
func (b *ruleBuilder) operation(o *security.Operation) *rbacv3.Permission {
	var and []*rbacv3.Permission
	and = addPerms(and, b.portPerms(o.GetPorts()), b.portPerms(o.GetNotPorts()))
	if len(o.GetHosts())+len(o.GetNotHosts())+len(o.GetMethods())+len(o.GetNotMethods())+len(o.GetPaths())+len(o.GetNotPaths()) > 0 && b.tcp {
		b.skip()
		return allOfPerms(and)
	}
	and = addPerms(and, mapPerms(o.GetHosts(), hostPerm), mapPerms(o.GetNotHosts(), hostPerm))
	method := func(v string) *rbacv3.Permission { return headerPerm(headerID(":method", exact(v))) }
	and = addPerms(and, mapPerms(o.GetMethods(), method), mapPerms(o.GetNotMethods(), method))
	and = addPerms(and, mapPerms(o.GetPaths(), pathPerm), mapPerms(o.GetNotPaths(), pathPerm))
	return allOfPerms(and)
}
