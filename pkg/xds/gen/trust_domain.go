package gen

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// DefaultTrustDomain is the SPIFFE trust domain of workload identities
// unless Options.TrustDomain says otherwise (Istio's default).
const DefaultTrustDomain = "cluster.local"

// trustDomains is the mesh's trust domain and its aliases, as Istio's
// meshConfig trustDomain and trustDomainAliases: identities of every one
// of them are the same workload's.
type trustDomains struct {
	domain  string
	aliases []string
}

// newTrustDomains checks Options.TrustDomain and its aliases; a domain
// left empty is DefaultTrustDomain, an alias equal to it or repeated
// counts once.
func newTrustDomains(domain string, aliases []string) (trustDomains, error) {
	if domain == "" {
		if len(aliases) == 0 {
			return trustDomains{}, nil
		}
		domain = DefaultTrustDomain
	}
	for _, d := range append([]string{domain}, aliases...) {
		if err := validTrustDomain(d); err != nil {
			return trustDomains{}, err
		}
	}
	var as []string
	for _, a := range aliases {
		if a != domain && !slices.Contains(as, a) {
			as = append(as, a)
		}
	}
	return trustDomains{domain: domain, aliases: as}, nil
}

// validTrustDomain accepts what the SPIFFE specification allows in a
// trust domain: lower-case letters, digits, dots, dashes and underscores.
func validTrustDomain(d string) error {
	if d == "" || len(d) > 255 {
		return fmt.Errorf("trust domain %q: must have 1 to 255 characters", d)
	}
	for _, r := range d {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("trust domain %q: %q is not allowed (lower-case letters, digits, '.', '-', '_')", d, r)
		}
	}
	return nil
}

// TrustDomain is the trust domain identities are issued in.
func (g *Generator) TrustDomain() string {
	if g.trust.domain == "" {
		return DefaultTrustDomain
	}
	return g.trust.domain
}

// trustIn is the trust domain with the aliases Options gave and
// those of w's MeshConfig (trustDomainAliases, which may change while the
// server runs; the trust domain itself is decided at start-up, with the
// CA's).
func (g *Generator) trustIn(w *view) trustDomains {
	t := trustDomains{domain: g.TrustDomain(), aliases: g.trust.aliases}
	if w == nil {
		return t
	}
	for _, a := range w.Mesh().TrustDomainAliases() {
		if a != t.domain && !slices.Contains(t.aliases, a) {
			t.aliases = append(slices.Clip(t.aliases), a)
		}
	}
	return t
}

// domains lists the trust domain, then its aliases.
func (t trustDomains) domains() []string {
	return append([]string{t.domain}, t.aliases...)
}

// spiffeIDs are the identities of service account sa of namespace ns in
// the trust domain and each alias, as Istio expands a service's accounts.
func (t trustDomains) spiffeIDs(ns, sa string) []string {
	var out []string
	for _, d := range t.domains() {
		out = append(out, "spiffe://"+d+"/ns/"+ns+"/sa/"+sa)
	}
	return out
}

// identities maps service account names of namespace ns to their SPIFFE
// IDs in every trust domain, sorted.
func (t trustDomains) identities(ns string, accounts []string) []string {
	var out []string
	for _, sa := range accounts {
		out = append(out, t.spiffeIDs(ns, sa)...)
	}
	sort.Strings(out)
	return out
}

// authzPrincipals rewrites AuthorizationPolicy principals
// (TRUST_DOMAIN/ns/NS/sa/SA) for the trust domain and its aliases, as
// Istio does for every policy: a principal whose domain is cluster.local
// (which stands for the local domain) or names the trust domain or an
// alias (exactly, or as a *suffix or prefix* pattern) becomes one principal
// per domain, its domain replaced, except that a *suffix pattern is kept
// as written for the domains it matches. Principals that name no domain
// (*, */ns/..., not five segments) or another domain are kept as they are.
func (t trustDomains) authzPrincipals(vals []string) []string {
	domains := t.domains()
	var out []string
	for _, v := range vals {
		parts := strings.Split(v, "/")
		if len(parts) != 5 || parts[0] == "*" {
			out = append(out, v)
			continue
		}
		td := parts[0]
		if td != DefaultTrustDomain && !slices.ContainsFunc(domains, func(d string) bool { return domainPatternMatch(td, d) }) {
			out = append(out, v)
			continue
		}
		var these []string
		for _, d := range domains {
			p := d + "/" + strings.Join(parts[1:], "/")
			if suffix, ok := strings.CutPrefix(td, "*"); ok && strings.HasSuffix(d, suffix) {
				p = v
			}
			if !slices.Contains(these, p) {
				these = append(these, p)
			}
		}
		out = append(out, these...)
	}
	return out
}

// domainPatternMatch reports whether a principal's trust domain td (exact,
// *suffix or prefix*) names domain d.
func domainPatternMatch(td, d string) bool {
	if td == d {
		return true
	}
	if suffix, ok := strings.CutPrefix(td, "*"); ok && strings.HasSuffix(d, suffix) {
		return true
	}
	prefix, ok := strings.CutSuffix(td, "*")
	return ok && strings.HasPrefix(d, prefix)
}
