package gen

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

// EnvoyRefusals lists what in one config's spec generation cannot turn
// into configuration Envoy accepts, each as "field path: problem": header
// names and values Envoy's rules (RFC 7230 tokens, no control characters)
// or its header formatter refuse, empty prefixes where Envoy requires one,
// and regular expressions Envoy's RE2 refuses or that are over the size
// Istio allows. The resources built from such a config are contained
// (contain.go); the validating webhook refuses it and the status Auditor
// reports it, so the three agree. Istio's own validation accepts some of
// these (a CR/LF in a header name it sets, an empty header prefix) and
// Envoy then refuses istiod's whole resource; discovery refuses them at
// the door.
func EnvoyRefusals(kind model.Kind, spec proto.Message) []string {
	if ef, ok := spec.(*networking.EnvoyFilter); ok {
		return envoyFilterRefusals(ef) // envoyfilter.go
	}
	var r envoyRules
	switch s := spec.(type) {
	case *networking.VirtualService:
		for i, h := range s.GetHttp() {
			r.httpRoute(fmt.Sprintf("spec.http[%d]", i), h)
		}
	case *networking.DestinationRule:
		r.trafficPolicy("spec.trafficPolicy", s.GetTrafficPolicy())
		for i, ss := range s.GetSubsets() {
			r.trafficPolicy(fmt.Sprintf("spec.subsets[%d].trafficPolicy", i), ss.GetTrafficPolicy())
		}
	}
	sort.Strings(r.out)
	return r.out
}

type envoyRules struct{ out []string }

func (r *envoyRules) add(path, format string, args ...any) {
	r.out = append(r.out, path+": "+fmt.Sprintf(format, args...))
}

func (r *envoyRules) httpRoute(path string, h *networking.HTTPRoute) {
	for i, m := range h.GetMatch() {
		r.match(fmt.Sprintf("%s.match[%d]", path, i), m)
	}
	r.headerOps(path+".headers", h.GetHeaders())
	for i, d := range h.GetRoute() {
		r.headerOps(fmt.Sprintf("%s.route[%d].headers", path, i), d.GetHeaders())
	}
	if rd := h.GetRedirect(); rd != nil {
		r.value(path+".redirect.uri", rd.GetUri())
		r.value(path+".redirect.authority", rd.GetAuthority())
	}
	if rw := h.GetRewrite(); rw != nil {
		r.value(path+".rewrite.uri", rw.GetUri())
		r.value(path+".rewrite.authority", rw.GetAuthority())
		if rr := rw.GetUriRegexRewrite(); rr != nil {
			r.regex(path+".rewrite.uriRegexRewrite.match", rr.GetMatch())
			r.value(path+".rewrite.uriRegexRewrite.rewrite", rr.GetRewrite())
		}
	}
	for i, o := range h.GetCorsPolicy().GetAllowOrigins() {
		r.stringMatch(fmt.Sprintf("%s.corsPolicy.allowOrigins[%d]", path, i), o, false)
	}
}

// trafficPolicy checks the consistent hash key, which becomes a route's
// hash policy: a header name as Envoy takes it, a cookie or query
// parameter name that is not empty.
func (r *envoyRules) trafficPolicy(path string, tp *networking.TrafficPolicy) {
	pols := []*networking.TrafficPolicy{tp}
	paths := []string{path}
	for i, pl := range tp.GetPortLevelSettings() {
		pols = append(pols, &networking.TrafficPolicy{LoadBalancer: pl.GetLoadBalancer()})
		paths = append(paths, fmt.Sprintf("%s.portLevelSettings[%d]", path, i))
	}
	for i, tp := range pols {
		p := paths[i] + ".loadBalancer.consistentHash"
		ch := tp.GetLoadBalancer().GetConsistentHash()
		switch k := ch.GetHashKey().(type) {
		case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
			r.opName(p+".httpHeaderName", k.HttpHeaderName, true)
		case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
			if k.HttpCookie.GetName() == "" {
				r.add(p+".httpCookie.name", "a cookie name must not be empty")
			}
			r.value(p+".httpCookie.name", k.HttpCookie.GetName())
			r.value(p+".httpCookie.path", k.HttpCookie.GetPath())
		case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
			if k.HttpQueryParameterName == "" {
				r.add(p+".httpQueryParameterName", "a query parameter name must not be empty")
			}
		}
	}
}

func (r *envoyRules) match(path string, m *networking.HTTPMatchRequest) {
	if isRegex(m.GetUri()) {
		r.regex(path+".uri.regex", m.GetUri().GetRegex())
	}
	for name, sm := range map[string]*networking.StringMatch{"scheme": m.GetScheme(), "method": m.GetMethod(), "authority": m.GetAuthority()} {
		r.stringMatch(path+"."+name, sm, false)
	}
	for _, group := range []struct {
		name    string
		m       map[string]*networking.StringMatch
		without bool
	}{{"headers", m.GetHeaders(), false}, {"withoutHeaders", m.GetWithoutHeaders(), true}} {
		for _, k := range sortedKeys(group.m) {
			p := path + "." + group.name + "." + quoteKey(k)
			r.matchName(p, k)
			r.stringMatch(p, group.m[k], group.without)
		}
	}
	for _, k := range sortedKeys(m.GetQueryParams()) {
		p := path + ".queryParams." + quoteKey(k)
		switch {
		case k == "":
			r.add(p, "a query parameter name must not be empty")
		case len(k) > 1024:
			r.add(p, "a query parameter name is at most 1024 bytes")
		}
		r.stringMatch(p, m.GetQueryParams()[k], false)
	}
}

func isRegex(sm *networking.StringMatch) bool {
	_, ok := sm.GetMatchType().(*networking.StringMatch_Regex)
	return ok
}

// stringMatch applies Envoy's StringMatcher rules: a prefix is not
// empty, a regex is one RE2 takes. In withoutHeaders a regex "*" means
// "absent" (Istio's present match, inverted) and is not a regex.
func (r *envoyRules) stringMatch(path string, sm *networking.StringMatch, without bool) {
	switch v := sm.GetMatchType().(type) {
	case *networking.StringMatch_Prefix:
		if v.Prefix == "" {
			r.add(path+".prefix", "Envoy refuses an empty prefix (match the header's presence with {} instead)")
		}
		r.value(path+".prefix", v.Prefix)
	case *networking.StringMatch_Exact:
		r.value(path+".exact", v.Exact)
	case *networking.StringMatch_Regex:
		if without && v.Regex == "*" {
			return
		}
		r.regex(path+".regex", v.Regex)
	}
}

// maxRegexLen is the longest regex Istio's validation accepts: Envoy
// limits the RE2 program size (Istio's bootstrap raises the limit to
// 32768), and a program is always larger than its source.
const maxRegexLen = 1024

func (r *envoyRules) regex(path, re string) {
	switch {
	case re == "":
		r.add(path, "a regex must not be empty")
	case len(re) > maxRegexLen:
		r.add(path, "a regex is at most %d bytes (Envoy limits the compiled program's size)", maxRegexLen)
	default:
		if _, err := regexp.Compile(re); err != nil {
			r.add(path, "not an RE2 regex: %v", err)
		}
	}
}

// tchar is RFC 7230's token alphabet, which header names are made of.
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// matchName is Istio's rule for a header name in a match: a token, one
// of HTTP/2's pseudo-headers, or the @request.auth.claims form.
func (r *envoyRules) matchName(path, name string) {
	switch {
	case name == "":
		r.add(path, "a header name must not be empty")
	case strings.HasPrefix(strings.ToLower(name), "@request.auth.claims"):
	case name == ":method", name == ":scheme", name == ":authority", name == ":path", name == ":status":
	case !headerName.MatchString(name):
		r.add(path, "%q is not a header name (RFC 7230 token characters only)", name)
	}
}

// headerOps checks the headers a route sets, adds and removes: names as
// Envoy's HeaderValueOption takes them (and Istio's rule that pseudo-
// headers and Host are not touched, except :authority and Host set on a
// request), values without control characters and with well-formed
// %VARIABLE% references.
func (r *envoyRules) headerOps(path string, h *networking.Headers) {
	for _, side := range []struct {
		name    string
		ops     *networking.Headers_HeaderOperations
		request bool
	}{{"request", h.GetRequest(), true}, {"response", h.GetResponse(), false}} {
		p := path + "." + side.name
		for _, kv := range []struct {
			op string
			m  map[string]string
		}{{"set", side.ops.GetSet()}, {"add", side.ops.GetAdd()}} {
			keys := make([]string, 0, len(kv.m))
			for k := range kv.m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				q := p + "." + kv.op + "." + quoteKey(k)
				r.opName(q, k, side.request)
				r.value(q, kv.m[k])
				r.format(q, kv.m[k])
			}
		}
		for i, k := range side.ops.GetRemove() {
			r.opName(fmt.Sprintf("%s.remove[%d]", p, i), k, false)
		}
	}
}

func (r *envoyRules) opName(path, name string, authority bool) {
	lower := strings.ToLower(name)
	switch {
	case name == "":
		r.add(path, "a header name must not be empty")
	case len(name) > 16384:
		r.add(path, "a header name is at most 16384 bytes")
	case strings.ContainsAny(name, "\x00\r\n"):
		r.add(path, "a header name must not contain NUL, CR or LF")
	case authority && (lower == ":authority" || lower == "host"):
	case strings.HasPrefix(name, ":"):
		r.add(path, "pseudo-header %q cannot be changed", name)
	case lower == "host":
		r.add(path, "the Host header cannot be changed here")
	}
}

// value applies Envoy's rule for header values (and the fields that end
// up as one: redirect and rewrite targets): no control character but tab.
func (r *envoyRules) value(path, v string) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			r.add(path, "control character %q at byte %d", c, i)
			return
		}
	}
}

// format applies Envoy's header formatter rule: "%%" is a literal percent
// sign, any other "%" opens a %VARIABLE% that must be closed.
func (r *envoyRules) format(path, v string) {
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			continue
		}
		if i+1 < len(v) && v[i+1] == '%' {
			i++
			continue
		}
		end := strings.IndexByte(v[i+1:], '%')
		if end <= 0 {
			r.add(path, "unterminated or empty %%VARIABLE%% at byte %d (write %%%% for a literal %%)", i)
			return
		}
		i += end + 1
	}
}

// quoteKey writes a map key into a field path, quoted when it is not a
// plain name.
func quoteKey(k string) string {
	if headerName.MatchString(k) {
		return k
	}
	return fmt.Sprintf("%q", k)
}
