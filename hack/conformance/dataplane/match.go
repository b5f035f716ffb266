package dataplane

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

var regexCache sync.Map // string -> *regexp.Regexp (nil for invalid)

// fullRegex compiles an RE2 expression that must match a whole value,
// as Envoy's safe_regex does; nil when Envoy would refuse it.
func fullRegex(re string) *regexp.Regexp {
	if v, ok := regexCache.Load(re); ok {
		r, _ := v.(*regexp.Regexp)
		return r
	}
	r, err := regexp.Compile("^(?:" + re + ")$")
	if err != nil {
		r = nil
	}
	regexCache.Store(re, r)
	return r
}

var subCache sync.Map

// compileRegex compiles an RE2 expression for substitution (unanchored,
// every match replaced); nil when invalid.
func compileRegex(re string) *regexp.Regexp {
	if v, ok := subCache.Load(re); ok {
		r, _ := v.(*regexp.Regexp)
		return r
	}
	r, err := regexp.Compile(re)
	if err != nil {
		r = nil
	}
	subCache.Store(re, r)
	return r
}

// matchString applies an Envoy StringMatcher.
func matchString(m *matcherv3.StringMatcher, v string) bool {
	if m == nil {
		return false
	}
	ic := m.GetIgnoreCase()
	fold := func(s string) string {
		if ic {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return fold(v) == fold(p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix))
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix))
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains))
	case *matcherv3.StringMatcher_SafeRegex:
		r := fullRegex(p.SafeRegex.GetRegex())
		return r != nil && r.MatchString(v)
	}
	return false
}

// matchHeader applies an Envoy HeaderMatcher to a request: the
// header's presence and value, with invert_match and
// treat_missing_header_as_empty as Envoy reads them.
func matchHeader(h *routev3.HeaderMatcher, r Request) bool {
	v, ok := r.header(strings.ToLower(h.GetName()))
	if pm, isPresent := h.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch); isPresent {
		return ok == pm.PresentMatch != h.GetInvertMatch()
	}
	if !ok {
		if !h.GetTreatMissingHeaderAsEmpty() {
			// A missing header never matches; inverted, it does.
			return h.GetInvertMatch()
		}
		v = ""
	}
	var m bool
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case nil:
		m = true // presence only
	case *routev3.HeaderMatcher_ExactMatch:
		m = v == s.ExactMatch
	case *routev3.HeaderMatcher_PrefixMatch:
		m = strings.HasPrefix(v, s.PrefixMatch)
	case *routev3.HeaderMatcher_SuffixMatch:
		m = strings.HasSuffix(v, s.SuffixMatch)
	case *routev3.HeaderMatcher_ContainsMatch:
		m = strings.Contains(v, s.ContainsMatch)
	case *routev3.HeaderMatcher_SafeRegexMatch:
		re := fullRegex(s.SafeRegexMatch.GetRegex())
		m = re != nil && re.MatchString(v)
	case *routev3.HeaderMatcher_StringMatch:
		m = matchString(s.StringMatch, v)
	case *routev3.HeaderMatcher_RangeMatch:
		n, err := strconv.ParseInt(v, 10, 64)
		m = err == nil && n >= s.RangeMatch.GetStart() && n < s.RangeMatch.GetEnd()
	}
	return m != h.GetInvertMatch()
}

// matchQuery applies an Envoy QueryParameterMatcher.
func matchQuery(q *routev3.QueryParameterMatcher, params map[string]string) bool {
	v, ok := params[q.GetName()]
	switch s := q.GetQueryParameterMatchSpecifier().(type) {
	case *routev3.QueryParameterMatcher_PresentMatch:
		return ok == s.PresentMatch
	case *routev3.QueryParameterMatcher_StringMatch:
		return ok && matchString(s.StringMatch, v)
	}
	return ok
}

// inCIDR reports whether ip lies in the range.
func inCIDR(c *corev3.CidrRange, ip string) (bool, int) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false, 0
	}
	p, err := netip.ParsePrefix(c.GetAddressPrefix() + "/" + strconv.Itoa(int(prefixLen(c))))
	if err != nil {
		return false, 0
	}
	return p.Masked().Contains(a), p.Bits()
}

func prefixLen(c *corev3.CidrRange) uint32 { return c.GetPrefixLen().GetValue() }

// DomainRank says how a virtual host domain matches a host, in Envoy's
// order: 4 exact, 3 suffix wildcard (*.example.com), 2 prefix wildcard
// (example.*), 1 the catch-all "*", 0 no match; the second value is the
// wildcard's length, longer winning within a rank.
func DomainRank(domain, host string) (rank, length int) {
	domain, host = strings.ToLower(domain), strings.ToLower(host)
	switch {
	case domain == "*":
		return 1, 0
	case domain == host:
		return 4, len(domain)
	case strings.HasPrefix(domain, "*"):
		if len(host) > len(domain)-1 && strings.HasSuffix(host, domain[1:]) {
			return 3, len(domain)
		}
	case strings.HasSuffix(domain, "*"):
		if len(host) > len(domain)-1 && strings.HasPrefix(host, domain[:len(domain)-1]) {
			return 2, len(domain)
		}
	}
	return 0, 0
}
