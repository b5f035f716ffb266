package gen

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	security "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// AuthorizationPolicy CUSTOM, as istiod builds it (its authz builder with
// IsCustomBuilder, placed by its listener builder): the policies of a
// workload that name one MeshConfig ext_authz provider (authz_extauthz.go)
// become, first on the chain (before jwt_authn and the AUDIT, DENY and
// ALLOW RBAC filters),
//
//	HTTP  an RBAC filter whose shadow rules (stat prefix istio_ext_authz_)
//	      are the policies' rules, named istio-ext-authz-PROVIDER-ns[NS]-
//	      policy[NAME]-rule[N], then the provider's ext_authz filter, which
//	      filter_enabled_metadata turns on only for a request whose shadow
//	      effective policy id starts with istio-ext-authz-PROVIDER: the
//	      authorizer is asked about what the rules match, nothing else
//	TCP   the same with network filters, for a gRPC provider; an HTTP
//	      provider cannot judge a connection: istiod builds nothing on TCP
//	      chains for it (the connection is not checked); discovery denies
//	      there what the policy matches (never fail open; logged once per
//	      policy)
//
// Where istiod cannot use the provider (not in the MeshConfig, invalid,
// its service not found, or policies of one workload naming more than one
// provider: istiod's PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS is off by
// default), the policies' rules become a DENY RBAC filter at the same
// place, named ...-deny-due-to-bad-CUSTOM-action: what would have been
// sent to the authorizer is denied. Logged once per policy version.
//
// Dry run (istio.io/dry-run) is refused with CUSTOM by Istio's validation
// and by /validate; for one that gets in anyway (file mode, a webhook that
// was down): the rules go to the shadow rules of an RBAC
// filter of their own (stat prefix istio_dry_run_custom_), which counts
// and logs what would have been sent to the authorizer, and are never
// enforced nor sent. Here discovery chooses differently from istiod
// master, which puts a dry-run CUSTOM policy's rules in the enforced rules
// of the DENY-action RBAC filter, so that it denies what it matches
// (while its comment says that neither enforces): that is not a dry run.
// Older istiod dropped such policies; discovery keeps them observable.
//
// Proxyless gRPC servers have no ext_authz: there CUSTOM policies keep
// denying what they match (authz.go) and are logged per namespace.

// Filter names of the CUSTOM action. Sidecars keep their RBAC filter names
// distinct (authz.go); gateways use Istio's (gatewayRBACNames).
const (
	RBACCustomFilter  = "envoy.filters.http.rbac.custom"
	ExtAuthzFilter    = "envoy.filters.http.ext_authz"
	netExtAuthzName   = "envoy.filters.network.ext_authz"
	badCustomSuffix   = "-deny-due-to-bad-CUSTOM-action"
	dryRunCustomStats = "istio_dry_run_custom_"
)

// matchNever is istiod's policy for a CUSTOM policy without rules: it
// never matches, so the authorizer is never asked.
var matchNever = &rbacv3.Policy{
	Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_NotRule{NotRule: &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}}}},
	Principals:  []*rbacv3.Principal{{Identifier: &rbacv3.Principal_NotId{NotId: &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}}}},
}

// customRules are the CUSTOM policies of one workload: their providers
// (sorted, distinct), and per provider the rules of the enforced and of
// the dry-run policies, for HTTP and for TCP chains.
type customRules struct {
	providers []string
	enforced  map[string]*customSet
	dryRun    map[string]*customSet
	// configs are the CUSTOM policies, for the logs.
	configs []*model.Config
}

type customSet struct{ http, tcp map[string]*rbacv3.Policy }

func (s *customSet) empty() bool { return s == nil || len(s.http)+len(s.tcp) == 0 }

// customPolicyName is istiod's name of a CUSTOM rule: the prefix the
// ext_authz filter's filter_enabled_metadata looks for, then the rule.
func customPolicyName(ns, name, provider string, rule int) string {
	return fmt.Sprintf("%s-%s-ns[%s]-policy[%s]-rule[%d]", extAuthzMatchPrefix, provider, ns, name, rule)
}

// customRulesOf translates the CUSTOM policies among aps. A rule part the
// generator cannot express is left out of the rule (so it matches, and
// sends to the authorizer or denies, a superset), as for DENY.
func (g *Generator) customRulesOf(trust trustDomains, aps []*model.Config, noJWT bool) customRules {
	out := customRules{enforced: map[string]*customSet{}, dryRun: map[string]*customSet{}}
	seen := map[string]bool{}
	for _, c := range aps {
		ap := c.Object.(*securityv1.AuthorizationPolicy)
		if ap.Spec.GetAction() != security.AuthorizationPolicy_CUSTOM {
			continue
		}
		out.configs = append(out.configs, c)
		prov := ap.Spec.GetProvider().GetName()
		if !seen[prov] {
			seen[prov] = true
			out.providers = append(out.providers, prov)
		}
		sets := out.enforced
		if dryRun(ap) {
			sets = out.dryRun
		}
		set := sets[prov]
		if set == nil {
			set = &customSet{http: map[string]*rbacv3.Policy{}, tcp: map[string]*rbacv3.Policy{}}
			sets[prov] = set
		}
		if len(ap.Spec.GetRules()) == 0 {
			name := customPolicyName(c.Key.Namespace, c.Key.Name, prov, 0)
			set.http[name], set.tcp[name] = matchNever, matchNever
			continue
		}
		for i, r := range ap.Spec.GetRules() {
			valid := validUTF8(r.ProtoReflect())
			if !valid {
				g.warnOnce(c, ap.ResourceVersion, fmt.Sprint("utf8:", i), "AuthorizationPolicy rule holds invalid UTF-8", "rule", i)
			}
			name := customPolicyName(c.Key.Namespace, c.Key.Name, prov, i)
			for _, chain := range []struct {
				tcp   bool
				rules map[string]*rbacv3.Policy
			}{{false, set.http}, {true, set.tcp}} {
				pol, b := g.ruleFor(trust, r, chain.tcp, valid, noJWT)
				if len(b.unsupported) > 0 {
					g.warnFailClosed(c, ap.ResourceVersion, i, security.AuthorizationPolicy_CUSTOM, b.unsupported)
				}
				chain.rules[name] = pol
			}
		}
	}
	sort.Strings(out.providers)
	return out
}

// customFilters are the CUSTOM action's HTTP and network filters for
// the policies aps (none without CUSTOM policies).
func (g *Generator) customFilters(w *view, trust trustDomains, aps []*model.Config, names rbacNames) inboundAuthz {
	cr := g.customRulesOf(trust, aps, names.noJWT)
	if len(cr.providers) == 0 {
		return inboundAuthz{}
	}
	var out inboundAuthz
	// The dry-run policies first: shadow only, whatever the provider.
	var dryHTTP, dryTCP map[string]*rbacv3.Policy
	for _, p := range cr.providers {
		dryHTTP, dryTCP = mergePolicies(dryHTTP, cr.dryRun[p].get(false)), mergePolicies(dryTCP, cr.dryRun[p].get(true))
	}
	if len(dryHTTP) > 0 {
		out.http = append(out.http, httpRBAC(names.custom, &httprbacv3.RBAC{ShadowRules: denyRules(dryHTTP), ShadowRulesStatPrefix: dryRunCustomStats}))
	}
	if len(dryTCP) > 0 {
		out.tcp = append(out.tcp, netRBAC(&netrbacv3.RBAC{StatPrefix: names.statPrefix(security.AuthorizationPolicy_CUSTOM), ShadowRules: denyRules(dryTCP), ShadowRulesStatPrefix: dryRunCustomStats}))
	}
	if len(cr.providers) > 1 {
		g.warnCustom(cr, "", fmt.Errorf("CUSTOM policies of one workload name %d providers %v; istiod allows one unless PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS is set", len(cr.providers), cr.providers))
		var denyHTTP, denyTCP map[string]*rbacv3.Policy
		for _, p := range cr.providers {
			denyHTTP, denyTCP = mergePolicies(denyHTTP, cr.enforced[p].get(false)), mergePolicies(denyTCP, cr.enforced[p].get(true))
		}
		return out.withDeny(names, denyHTTP, denyTCP)
	}
	prov := cr.providers[0]
	set := cr.enforced[prov]
	if set.empty() {
		return out // dry runs only: nothing is sent to the authorizer
	}
	ext, err := extAuthzFor(resolvedExtAuthz(w), prov)
	if err != nil {
		g.warnCustom(cr, prov, err)
		return out.withDeny(names, set.http, set.tcp)
	}
	out.http = append(out.http,
		httpRBAC(names.custom, &httprbacv3.RBAC{ShadowRules: denyRules(set.http), ShadowRulesStatPrefix: extAuthzShadowStatPrefix}),
		&hcmv3.HttpFilter{Name: ExtAuthzFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(ext.http)}},
	)
	if ext.tcp == nil {
		// Deliberately unlike istiod, which leaves TCP chains unchecked:
		// a policy that cannot be expressed denies (fail closed).
		for _, c := range cr.configs {
			ap := c.Object.(*securityv1.AuthorizationPolicy)
			g.warnOnce(c, ap.ResourceVersion, "custom-tcp", "CUSTOM policy names an HTTP ext_authz provider, which cannot check TCP connections: on TCP chains what it matches is denied (istiod leaves them unchecked)", "provider", prov)
		}
		return out.withDeny(names, nil, set.tcp)
	}
	out.tcp = append(out.tcp,
		netRBAC(&netrbacv3.RBAC{StatPrefix: names.statPrefix(security.AuthorizationPolicy_CUSTOM), ShadowRules: denyRules(set.tcp), ShadowRulesStatPrefix: extAuthzShadowStatPrefix}),
		&listenerv3.Filter{Name: netExtAuthzName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(ext.tcp)}},
	)
	return out
}

func (s *customSet) get(tcp bool) map[string]*rbacv3.Policy {
	switch {
	case s == nil:
		return nil
	case tcp:
		return s.tcp
	}
	return s.http
}

func mergePolicies(into, from map[string]*rbacv3.Policy) map[string]*rbacv3.Policy {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = map[string]*rbacv3.Policy{}
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

func denyRules(ps map[string]*rbacv3.Policy) *rbacv3.RBAC {
	return &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: ps}
}

// withDeny adds istiod's fail-closed filters for CUSTOM policies it
// cannot serve: a DENY of what they match, each rule suffixed
// -deny-due-to-bad-CUSTOM-action. istiod builds one such filter per
// provider; one filter with every provider's rules denies the same.
func (a inboundAuthz) withDeny(names rbacNames, http, tcp map[string]*rbacv3.Policy) inboundAuthz {
	if len(http) > 0 {
		a.http = append(a.http, httpRBAC(names.custom, &httprbacv3.RBAC{Rules: denyRules(suffixed(http))}))
	}
	if len(tcp) > 0 {
		a.tcp = append(a.tcp, netRBAC(&netrbacv3.RBAC{StatPrefix: names.statPrefix(security.AuthorizationPolicy_CUSTOM), Rules: denyRules(suffixed(tcp))}))
	}
	return a
}

func suffixed(ps map[string]*rbacv3.Policy) map[string]*rbacv3.Policy {
	out := make(map[string]*rbacv3.Policy, len(ps))
	for k, v := range ps {
		out[k+badCustomSuffix] = v
	}
	return out
}

func httpRBAC(name string, r *httprbacv3.RBAC) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(r)}}
}

func netRBAC(r *netrbacv3.RBAC) *listenerv3.Filter {
	return &listenerv3.Filter{Name: netRBACName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(r)}}
}

// warnCustom logs, once per policy version, why the CUSTOM policies of
// provider (every provider: "") are denied instead of sent to it.
func (g *Generator) warnCustom(cr customRules, provider string, err error) {
	for _, c := range cr.configs {
		ap := c.Object.(*securityv1.AuthorizationPolicy)
		if provider != "" && ap.Spec.GetProvider().GetName() != provider {
			continue
		}
		g.warnOnce(c, ap.ResourceVersion, "custom:"+err.Error(),
			"CUSTOM AuthorizationPolicy cannot use its ext_authz provider; what it matches is denied (fail closed, as istiod)",
			"provider", ap.Spec.GetProvider().GetName(), "error", err.Error())
	}
}

// warnCustomGRPC logs, once per policy version and namespace, that a
// proxyless gRPC server denies what a CUSTOM policy matches.
func (g *Generator) warnCustomGRPC(aps []*model.Config, ns string) {
	for _, c := range aps {
		ap := c.Object.(*securityv1.AuthorizationPolicy)
		if ap.Spec.GetAction() == security.AuthorizationPolicy_CUSTOM {
			g.warnOnce(c, ap.ResourceVersion, "custom-grpc:"+ns,
				"AuthorizationPolicy CUSTOM is not supported on proxyless gRPC servers (no ext_authz); what it matches is denied",
				"namespace", ns)
		}
	}
}

// resolvedExtAuthz is the World's ext_authz providers (authz_extauthz.go),
// resolved once per World: they read only its MeshConfig and the Services
// the providers name, the same for every proxy, so they never split
// classes (ClassKey). The caller's reads record both: a MeshConfig change
// and a change of a Service a provider names reach every proxy that read
// the providers, even where the Service is not exported to it.
func resolvedExtAuthz(w *view) map[string]*extAuthzProvider {
	ix := w.index()
	mc := w.Mesh().Proto()
	for _, p := range mc.GetExtensionProviders() {
		var svc string
		switch {
		case p.GetEnvoyExtAuthzHttp() != nil:
			svc = p.GetEnvoyExtAuthzHttp().GetService()
		case p.GetEnvoyExtAuthzGrpc() != nil:
			svc = p.GetEnvoyExtAuthzGrpc().GetService()
		default:
			continue
		}
		if _, host, named := strings.Cut(svc, "/"); named {
			svc = host
		}
		w.r.host(svc)
	}
	ix.extAuthz.once.Do(func() {
		u := w.unrecorded()
		ix.extAuthz.m = extAuthzProviders(meshLookup{w: u, mesh: u.Mesh().Proto()})
	})
	return ix.extAuthz.m
}

// extAuthzCache is a World's resolved providers, built on first use.
type extAuthzCache struct {
	once sync.Once
	m    map[string]*extAuthzProvider
}
