package validate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// checkVirtualServiceHosts: wildcard domains or IP addresses; "*" only on
// gateways; no host that another one already matches.
func checkVirtualServiceHosts(p *problems, vs *networking.VirtualService) {
	mesh := len(vs.Gateways) == 0 || slices.Contains(vs.Gateways, "mesh")
	valid := true
	for i, h := range vs.Hosts {
		msg := wildcardDomainProblem(h)
		if !mesh && strings.HasPrefix(h, "outbound_") && sniRouted(vs) {
			msg = "" // AUTO_PASSTHROUGH's outbound_.PORT_._.HOST names
		}
		switch {
		case msg != "" && !isIP(h):
			p.add(at("spec.hosts", i), "%s", msg)
			valid = false
		case msg == "" && mesh && h == "*":
			p.add(at("spec.hosts", i), "wildcard host * is not allowed for virtual services bound to the mesh gateway")
			valid = false
		}
	}
	if !valid {
		return
	}
	for i := range vs.Hosts {
		for j := i + 1; j < len(vs.Hosts); j++ {
			if hostsOverlap(vs.Hosts[i], vs.Hosts[j]) {
				p.add("spec.hosts", "duplicate hosts in virtual service: %s & %s", vs.Hosts[i], vs.Hosts[j])
			}
		}
	}
}

func sniRouted(vs *networking.VirtualService) bool {
	for _, r := range vs.Tls {
		for _, m := range r.Match {
			if len(m.SniHosts) > 0 {
				return true
			}
		}
	}
	return false
}

// hostsOverlap: equal, or one a wildcard whose suffix the other has.
func hostsOverlap(a, b string) bool {
	if a == b {
		return true
	}
	covers := func(w, h string) bool {
		return strings.HasPrefix(w, "*") && strings.HasSuffix(strings.TrimPrefix(h, "*"), w[1:])
	}
	return covers(a, b) || covers(b, a)
}

// routeRule is a rule of a VirtualService, as the reachability check reads it.
type routeRule struct {
	name    string
	matches []proto.Message
}

// checkUnreachableRules warns, as Istio does, about rules that can never
// match: a rule after one without matches, and matches already made by an
// earlier rule.
func checkUnreachableRules(p *problems, vs *networking.VirtualService) {
	checkReachable(p, "spec.http", httpRules(vs.Http))
	checkOverlappingPrefixes(p, vs.Http)
	checkReachable(p, "spec.tcp", l4Rules(vs.Tcp))
	checkReachable(p, "spec.tls", l4Rules(vs.Tls))
}

func checkReachable(p *problems, path string, rules []routeRule) {
	seen := map[string]int{}
	catchAll := -1
	for i, r := range rules {
		if len(r.matches) == 0 {
			if catchAll >= 0 {
				p.warn(path, "virtualService rule %s not used (only the last rule can have no matches)", r.name)
			}
			catchAll = i
			continue
		}
		dups := 0
		for j, m := range r.matches {
			if catchAll >= 0 {
				p.warn(path, "virtualService rule %s not used (route without matches defined before)", r.name)
				continue
			}
			key := matchKey(m)
			if prior, ok := seen[key]; ok {
				p.warn(path, "virtualService rule %s match %s is not used (duplicate/overlapping match in rule %s)", r.name, matchName(m, j), rules[prior].name)
				dups++
				continue
			}
			seen[key] = i
		}
		if dups == len(r.matches) {
			p.warn(path, "virtualService rule %s not used (all matches used by prior rules)", r.name)
		}
	}
}

func httpRules(rs []*networking.HTTPRoute) []routeRule {
	out := make([]routeRule, 0, len(rs))
	for i, r := range rs {
		if r == nil {
			continue
		}
		name := fmt.Sprintf("#%d", i)
		if r.Name != "" {
			name = fmt.Sprintf("%q", r.Name)
		}
		rr := routeRule{name: name}
		for _, m := range r.Match {
			rr.matches = append(rr.matches, m)
		}
		out = append(out, rr)
	}
	return out
}

// l4Rules reads tcp and tls rules, which have no names.
func l4Rules[R interface{ GetMatch() []M }, M proto.Message](rs []R) []routeRule {
	out := make([]routeRule, 0, len(rs))
	for i, r := range rs {
		rr := routeRule{name: fmt.Sprintf("#%d", i)}
		for _, m := range r.GetMatch() {
			rr.matches = append(rr.matches, m)
		}
		out = append(out, rr)
	}
	return out
}

// matchKey compares matches by content; an HTTP match's name does not count.
func matchKey(m proto.Message) string {
	if hm, ok := m.(*networking.HTTPMatchRequest); ok && hm.GetName() != "" {
		c := proto.Clone(hm).(*networking.HTTPMatchRequest)
		c.Name = ""
		m = c
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func matchName(m proto.Message, i int) string {
	if hm, ok := m.(*networking.HTTPMatchRequest); ok && hm.GetName() != "" {
		return fmt.Sprintf("%q", hm.Name)
	}
	return fmt.Sprintf("#%d", i)
}

// prefixMatch is what the overlap check reads of an HTTP match on a URI
// prefix: each string matcher as "exact:v" or "prefix:v".
type prefixMatch struct {
	route, match, prefix string
	port                 uint32
	method, authority    string
	headers, query, not  map[string]string
}

func stringMatch(m *networking.StringMatch) string {
	switch {
	case m.GetExact() != "":
		return "exact:" + m.GetExact()
	case m.GetPrefix() != "":
		return "prefix:" + m.GetPrefix()
	}
	return ""
}

func stringMatches(ms map[string]*networking.StringMatch) map[string]string {
	out := make(map[string]string, len(ms))
	for k, v := range ms {
		out[k] = stringMatch(v)
	}
	return out
}

// checkOverlappingPrefixes warns, as Istio does, about a URI prefix match
// that an earlier, shorter prefix with the same other conditions takes.
func checkOverlappingPrefixes(p *problems, rs []*networking.HTTPRoute) {
	var ms []prefixMatch
	seen := map[string]bool{}
	catchAll := false
	for i, r := range rs {
		if r == nil || catchAll {
			continue
		}
		if len(r.Match) == 0 {
			catchAll = true
			continue
		}
		for j, m := range r.Match {
			key := matchKey(m)
			if seen[key] || m.GetUri().GetPrefix() == "" {
				seen[key] = true
				continue
			}
			seen[key] = true
			method := stringMatch(m.Method)
			if method == "" {
				method = "exact:GET"
			}
			name := fmt.Sprintf("#%d", i)
			if r.Name != "" {
				name = fmt.Sprintf("%q", r.Name)
			}
			ms = append(ms, prefixMatch{
				route: name, match: matchName(m, j), prefix: m.Uri.GetPrefix(), port: m.Port,
				method: method, authority: stringMatch(m.Authority), headers: stringMatches(m.Headers),
				query: stringMatches(m.QueryParams), not: stringMatches(m.WithoutHeaders),
			})
		}
	}
	for i, a := range ms {
		for _, b := range ms[i+1:] {
			if b.prefix != a.prefix && covers(a, b) {
				p.warn("spec.http", "virtualService rule %s match %s of prefix %s is not used (duplicate/overlapping match in rule %s of prefix %s on %s)",
					b.route, b.match, b.prefix, a.match, a.prefix, a.route)
			}
		}
	}
}

// covers: b's prefix starts with a's and a's other conditions are the
// same as b's or prefixes of them.
func covers(a, b prefixMatch) bool {
	same := func(x, y string) bool { return x == y || strings.HasPrefix(x, y) }
	sameMap := func(x, y map[string]string) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !same(v, w) {
				return false
			}
		}
		return true
	}
	return strings.HasPrefix(b.prefix, a.prefix) && a.port == b.port && same(a.method, b.method) &&
		same(a.authority, b.authority) && sameMap(a.headers, b.headers) && sameMap(a.query, b.query) && sameMap(a.not, b.not)
}
