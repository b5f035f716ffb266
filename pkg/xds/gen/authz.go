package gen

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// RBAC filter names, one filter per action that has policies: AUDIT (Envoy's
// LOG) first, then DENY, then ALLOW. On sidecars the names differ because
// their inbound filters also serve proxyless gRPC servers (listener_grpc_server.go),
// and grpc-go rejects an HttpConnectionManager with two filters of one
// name. Gateways are Envoy only: there every RBAC filter is named
// envoy.filters.http.rbac, as Istio names them (gateway_authz.go).
const (
	RBACAuditFilter = "envoy.filters.http.rbac.audit"
	RBACDenyFilter  = "envoy.filters.http.rbac.deny"
	RBACAllowFilter = "envoy.filters.http.rbac"
	netRBACName     = "envoy.filters.network.rbac"
)

// gatewayNameLabel is the label Istio's deployment controller puts on the
// pods of a Gateway API gateway: policies attach to them by targetRef.
const gatewayNameLabel = "gateway.networking.k8s.io/gateway-name"

// authzFields are the AuthorizationPolicy fields generation acts on.
var authzFields = newFieldSet(
	"selector", "action", "provider", "provider.name", "rules.from.source.principals", "rules.from.source.notPrincipals",
	"rules.from.source.namespaces", "rules.from.source.notNamespaces",
	"rules.from.source.ipBlocks", "rules.from.source.notIpBlocks",
	"rules.from.source.remoteIpBlocks", "rules.from.source.notRemoteIpBlocks",
	"rules.from.source.requestPrincipals", "rules.from.source.notRequestPrincipals",
	"rules.to.operation.hosts", "rules.to.operation.notHosts", "rules.to.operation.ports",
	"rules.to.operation.notPorts", "rules.to.operation.methods", "rules.to.operation.notMethods",
	"rules.to.operation.paths", "rules.to.operation.notPaths",
	"rules.when.key", "rules.when.values", "rules.when.notValues",
)

// inboundAuthz is the RBAC of one workload's traffic (a sidecar's inbound,
// a gateway's): HTTP filters to put before the router and network filters
// before the TCP proxy.
type inboundAuthz struct {
	http []*hcmv3.HttpFilter
	tcp  []*listenerv3.Filter
}

// labelsMatch reports whether every selector label is in labels.
func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// authzPolicies are the AuthorizationPolicies that apply to p's workload,
// a sidecar's or a gateway's (Istio's ListAuthorizationPolicies): those of
// the root namespace (mesh-wide) and of p's namespace whose selector
// matches p's labels (no selector: every workload). A policy with
// targetRefs has no selector: it attaches only to the pods of the Gateway
// API gateway it names (gatewayNameLabel), in its own namespace; its
// other targets (waypoints, Services) are not served here.
func (g *Generator) authzPolicies(w *view, p *model.Proxy) []*model.Config {
	u := w.unrecorded()
	for _, c := range u.ConfigsIn(model.KindAuthorizationPolicy, rootNamespace(u), p.Namespace) {
		if ap, ok := c.Object.(*securityv1.AuthorizationPolicy); ok {
			g.warn(c, ap.ResourceVersion, &ap.Spec, authzFields)
		}
	}
	return w.ConfigsWhere(model.KindAuthorizationPolicy, func(u *view, c *model.Config) bool { return policyAttaches(u, c, p) })
}

// attaches reports whether a policy of namespace ns applies to p, as
// Istio's WorkloadPolicyMatcher.ShouldAttachPolicy decides for a sidecar
// or a gateway (selector-based policies apply to Gateway API gateways too,
// Istio's default).
func attaches(ns string, spec *security.AuthorizationPolicy, p *model.Proxy) bool {
	refs := spec.GetTargetRefs()
	if len(refs) == 0 && spec.GetTargetRef() != nil {
		refs = []*typev1beta1.PolicyTargetReference{spec.GetTargetRef()}
	}
	if len(refs) == 0 {
		return labelsMatch(spec.GetSelector().GetMatchLabels(), p.Labels())
	}
	gw, ok := p.Labels()[gatewayNameLabel]
	if !ok || ns != p.Namespace {
		return false
	}
	for _, r := range refs {
		if r.GetKind() == "Gateway" && r.GetGroup() == "gateway.networking.k8s.io" && r.GetName() == gw &&
			(r.GetNamespace() == "" || r.GetNamespace() == p.Namespace) {
			return true
		}
	}
	return false
}

// policyAttaches reports whether the AuthorizationPolicy or
// RequestAuthentication c of w attaches to p's workload: one of p's
// namespace or of the root namespace whose selector or targetRefs name it.
func policyAttaches(w *view, c *model.Config, p *model.Proxy) bool {
	if c.Key.Namespace != rootNamespace(w) && c.Key.Namespace != p.Namespace {
		return false
	}
	switch o := c.Object.(type) {
	case *securityv1.AuthorizationPolicy:
		return attaches(c.Key.Namespace, &o.Spec, p)
	case *securityv1.RequestAuthentication:
		return attaches(c.Key.Namespace, &security.AuthorizationPolicy{Selector: o.Spec.GetSelector(), TargetRef: o.Spec.GetTargetRef(), TargetRefs: o.Spec.GetTargetRefs()}, p)
	}
	return false
}

// actionRules are Envoy RBAC rules per action, for HTTP or for TCP chains.
type actionRules map[security.AuthorizationPolicy_Action]*rbacv3.RBAC

var envoyActions = map[security.AuthorizationPolicy_Action]rbacv3.RBAC_Action{
	security.AuthorizationPolicy_ALLOW: rbacv3.RBAC_ALLOW,
	security.AuthorizationPolicy_DENY:  rbacv3.RBAC_DENY,
	security.AuthorizationPolicy_AUDIT: rbacv3.RBAC_LOG,
}

// builtRules are the Envoy RBAC rules of a workload's policies, per
// action, for HTTP chains and for TCP chains: those enforced and the
// shadow ones of dry-run policies (dryRun), which Envoy evaluates and
// counts but never acts on.
type builtRules struct {
	http, tcp             actionRules
	httpShadow, tcpShadow actionRules
}

// Shadow rules' stat prefixes, Istio's (authz model RBACShadowRules*).
const (
	shadowAllowStatPrefix = "istio_dry_run_allow_"
	shadowDenyStatPrefix  = "istio_dry_run_deny_"
)

// dryRunAnnotation marks an AuthorizationPolicy to evaluate without
// enforcing it.
const dryRunAnnotation = "istio.io/dry-run"

// dryRun reports whether policy ap is a dry run, as Istio parses the
// annotation (strconv.ParseBool; a value it cannot parse enforces the
// policy, the fail-closed reading).
func dryRun(ap *securityv1.AuthorizationPolicy) bool {
	v, ok := ap.Annotations[dryRunAnnotation]
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// rbacRules translates the policies into Envoy RBAC rules per action, for
// HTTP chains and for TCP chains, in one pass. An ALLOW action is enforced,
// possibly with no policy (deny everything), as soon as one ALLOW policy
// that is not a dry run applies; a dry-run policy's rules only go to the
// shadow rules of its action, as istiod builds them: an action whose
// policies are all dry runs enforces nothing.
func (g *Generator) rbacRules(trust trustDomains, aps []*model.Config, names rbacNames) builtRules {
	noJWT := names.noJWT
	out := builtRules{http: actionRules{}, tcp: actionRules{}, httpShadow: actionRules{}, tcpShadow: actionRules{}}
	for _, c := range aps {
		ap := c.Object.(*securityv1.AuthorizationPolicy)
		httpRules, tcpRules := out.http, out.tcp
		if dryRun(ap) {
			httpRules, tcpRules = out.httpShadow, out.tcpShadow
		}
		action, suffix := ap.Spec.GetAction(), ""
		if action == security.AuthorizationPolicy_CUSTOM {
			if !names.customAsDeny {
				continue // the CUSTOM filters' (authz_custom.go)
			}
			// A proxyless gRPC server has no ext_authz: what the policy
			// would send to the authorizer is denied, as istiod does for
			// a CUSTOM policy whose provider it cannot use. Never fail
			// open.
			action, suffix = security.AuthorizationPolicy_DENY, badCustomSuffix
		}
		if _, ok := envoyActions[action]; !ok {
			g.warnOnce(c, ap.ResourceVersion, "action", "AuthorizationPolicy action not supported; the policy is ignored", "action", action.String())
			continue
		}
		hr, tr := httpRules.of(action), tcpRules.of(action)
		for i, r := range ap.Spec.GetRules() {
			valid := validUTF8(r.ProtoReflect())
			if !valid {
				g.warnOnce(c, ap.ResourceVersion, fmt.Sprint("utf8:", i), "AuthorizationPolicy rule holds invalid UTF-8", "rule", i)
			}
			name := fmt.Sprintf("ns[%s]-policy[%s]-rule[%d]%s", c.Key.Namespace, c.Key.Name, i, suffix)
			for _, chain := range []struct {
				tcp   bool
				rules *rbacv3.RBAC
			}{{false, hr}, {true, tr}} {
				pol, b := g.ruleFor(trust, r, chain.tcp, valid, noJWT)
				if len(b.unsupported) > 0 {
					g.warnFailClosed(c, ap.ResourceVersion, i, action, b.unsupported)
				}
				if b.skipped && action != security.AuthorizationPolicy_DENY {
					// Without the part it cannot express, an ALLOW rule
					// would match more than written; with it, it can
					// never be proven true: leave it out (allows less).
					// A DENY rule (CUSTOM's included) is kept without
					// that part: it matches, and denies, a superset.
					// Istio does the same with what it cannot translate
					// (checkError in its authz model). AUDIT rules are
					// left out too, where Istio widens them: they decide
					// nothing, and a wider one would log what the policy
					// does not name.
					continue
				}
				chain.rules.Policies[name] = pol
			}
		}
	}
	out.http.prune()
	out.tcp.prune()
	out.httpShadow.pruneAll()
	out.tcpShadow.pruneAll()
	return out
}

// ruleFor translates rule r for an HTTP or a TCP chain (noJWT: of a
// proxyless gRPC server, where no JWT is validated). A rule holding
// strings Envoy cannot take (invalid UTF-8) matches everything and is
// marked, so that it allows nothing and denies everything.
func (g *Generator) ruleFor(trust trustDomains, r *security.Rule, tcp, valid, noJWT bool) (*rbacv3.Policy, *ruleBuilder) {
	b := &ruleBuilder{tcp: tcp, principals: trust.authzPrincipals, noJWT: noJWT}
	if !valid {
		b.skip()
		return &rbacv3.Policy{Principals: []*rbacv3.Principal{allOfIDs(nil)}, Permissions: []*rbacv3.Permission{allOfPerms(nil)}}, b
	}
	return b.rule(r), b
}

// of returns the rules of action, added empty if need be.
func (ar actionRules) of(action security.AuthorizationPolicy_Action) *rbacv3.RBAC {
	r := ar[action]
	if r == nil {
		r = &rbacv3.RBAC{Action: envoyActions[action], Policies: map[string]*rbacv3.Policy{}}
		ar[action] = r
	}
	return r
}

// prune drops the actions without policies but ALLOW's (deny everything).
func (ar actionRules) prune() {
	for a, r := range ar {
		if a != security.AuthorizationPolicy_ALLOW && len(r.Policies) == 0 {
			delete(ar, a)
		}
	}
}

// pruneAll drops the actions without policies: shadow rules without
// policies say nothing.
func (ar actionRules) pruneAll() {
	for a, r := range ar {
		if len(r.Policies) == 0 {
			delete(ar, a)
		}
	}
}

// shadowStatPrefix is the stat prefix of shadow rules for action.
func shadowStatPrefix(action security.AuthorizationPolicy_Action) string {
	switch action {
	case security.AuthorizationPolicy_ALLOW:
		return shadowAllowStatPrefix
	case security.AuthorizationPolicy_DENY:
		return shadowDenyStatPrefix
	}
	return ""
}

// authorization builds p's inbound JWT and RBAC filters; both lists are
// empty when no policy applies.
func (g *Generator) authorization(w *view, p *model.Proxy) inboundAuthz {
	names := sidecarRBACNames
	if p.IsGRPC() {
		names = grpcRBACNames
	}
	return g.authzFilters(w, p, names)
}

// authzFilters are the filters of the policies that apply to p, in
// istiod's order: CUSTOM (its RBAC and ext_authz filters), jwt_authn,
// then AUDIT, DENY and ALLOW.
func (g *Generator) authzFilters(w *view, p *model.Proxy, names rbacNames) inboundAuthz {
	trust, aps := g.trustIn(w), g.authzPolicies(w, p)
	az := g.withRequestAuthn(w, p, g.rbacFilters(trust, aps, names))
	if names.customAsDeny {
		g.warnCustomGRPC(aps, p.Namespace)
		return az
	}
	custom := g.customFilters(w, trust, aps, names)
	az.http = append(custom.http, az.http...)
	az.tcp = append(custom.tcp, az.tcp...)
	return az
}

// rbacNames names the RBAC filters of each action (AUDIT, DENY, ALLOW)
// and gives the network filters' stat prefix.
type rbacNames struct {
	http       [3]string
	statPrefix func(security.AuthorizationPolicy_Action) string
	// noJWT is set for proxyless gRPC servers, which validate no JWT:
	// requestPrincipals and request.auth.* fail closed there.
	noJWT bool
	// custom names the CUSTOM action's RBAC filter (authz_custom.go);
	// customAsDeny, set for proxyless gRPC servers (no ext_authz), makes
	// CUSTOM policies deny what they match, in the DENY filter.
	custom       string
	customAsDeny bool
}

// sidecarRBACNames keep HTTP filter names distinct (grpc-go) and give each
// network filter its own stats (tcp.allow.rbac.allowed...).
var sidecarRBACNames = rbacNames{
	http:   [3]string{RBACAuditFilter, RBACDenyFilter, RBACAllowFilter},
	custom: RBACCustomFilter,
	statPrefix: func(a security.AuthorizationPolicy_Action) string {
		return "tcp." + strings.ToLower(a.String()) + "."
	},
}

// grpcRBACNames are the sidecar's, for proxyless gRPC servers.
var grpcRBACNames = rbacNames{http: sidecarRBACNames.http, statPrefix: sidecarRBACNames.statPrefix, noJWT: true, customAsDeny: true}

// rbacFilters builds the RBAC filters of the policies aps, HTTP and
// network, in Istio's order: AUDIT, DENY, ALLOW.
func (g *Generator) rbacFilters(trust trustDomains, aps []*model.Config, names rbacNames) inboundAuthz {
	if len(aps) == 0 {
		return inboundAuthz{}
	}
	var out inboundAuthz
	b := g.rbacRules(trust, aps, names)
	order := []security.AuthorizationPolicy_Action{security.AuthorizationPolicy_AUDIT, security.AuthorizationPolicy_DENY, security.AuthorizationPolicy_ALLOW}
	for i, action := range order {
		// A filter with shadow rules only (nil Rules) enforces nothing.
		if r, sh := b.http[action], b.httpShadow[action]; r != nil || sh != nil {
			f := &httprbacv3.RBAC{Rules: r}
			if sh != nil {
				f.ShadowRules, f.ShadowRulesStatPrefix = sh, shadowStatPrefix(action)
			}
			out.http = append(out.http, &hcmv3.HttpFilter{Name: names.http[i], ConfigType: &hcmv3.HttpFilter_TypedConfig{
				TypedConfig: mustAny(f),
			}})
		}
		if r, sh := b.tcp[action], b.tcpShadow[action]; r != nil || sh != nil {
			f := &netrbacv3.RBAC{StatPrefix: names.statPrefix(action), Rules: r}
			if sh != nil {
				f.ShadowRules, f.ShadowRulesStatPrefix = sh, shadowStatPrefix(action)
			}
			out.tcp = append(out.tcp, &listenerv3.Filter{Name: netRBACName, ConfigType: &listenerv3.Filter_TypedConfig{
				TypedConfig: mustAny(f),
			}})
		}
	}
	return out
}

// warnFailClosed logs, once per policy version and rule, that rule i uses
// what discovery cannot check, and what that does to it. The fields are
// also reported as unsupported (authz_values.go, warn.go).
func (g *Generator) warnFailClosed(c *model.Config, resourceVersion string, i int, action security.AuthorizationPolicy_Action, what []string) {
	effect := "the rule is enforced without them, so it denies more than written"
	switch action {
	case security.AuthorizationPolicy_CUSTOM:
		effect = "the rule is kept without them, so it sends more to the external authorizer than written"
	case security.AuthorizationPolicy_ALLOW:
		effect = "the rule can never be proven true: it is left out and allows nothing"
	case security.AuthorizationPolicy_AUDIT:
		effect = "the rule is left out and logs nothing"
	}
	g.warnOnce(c, resourceVersion, fmt.Sprint("failclosed:", i),
		"AuthorizationPolicy rule uses what discovery cannot check yet; it fails closed",
		"rule", i, "action", action.String(), "unsupported", what, "effect", effect)
}

// warnOnce logs msg once per resource version and what.
func (g *Generator) warnOnce(c *model.Config, resourceVersion, what, msg string, args ...any) {
	key := c.Key.String() + "@" + resourceVersion + "#" + what
	if _, done := g.warns.once.LoadOrStore(key, true); done {
		return
	}
	g.log.Warn(msg, append([]any{"kind", string(c.Key.Kind), "resource", c.Key.Namespace + "/" + c.Key.Name}, args...)...)
}

// rule is one Envoy RBAC policy: the OR of the rule's from entries and its
// to entries, each ANDed with the when conditions on its side (source
// conditions with the principals, the others with the permissions).
func (b *ruleBuilder) rule(r *security.Rule) *rbacv3.Policy {
	var from []*rbacv3.Principal
	for _, f := range r.GetFrom() {
		from = append(from, b.source(f.GetSource()))
	}
	var to []*rbacv3.Permission
	for _, t := range r.GetTo() {
		to = append(to, b.operation(t.GetOperation()))
	}
	var ids []*rbacv3.Principal
	if x := anyOfIDs(from); x != nil {
		ids = append(ids, x)
	}
	var perms []*rbacv3.Permission
	if x := anyOfPerms(to); x != nil {
		perms = append(perms, x)
	}
	for _, c := range r.GetWhen() {
		yes, no, isID := b.condition(c.GetKey(), c.GetValues()), b.condition(c.GetKey(), c.GetNotValues()), conditionIsSource(c.GetKey())
		if isID {
			ids = addIDs(ids, yes.ids, no.ids)
		} else {
			perms = addPerms(perms, yes.perms, no.perms)
		}
	}
	return &rbacv3.Policy{Principals: []*rbacv3.Principal{allOfIDs(ids)}, Permissions: []*rbacv3.Permission{allOfPerms(perms)}}
}

func conditionIsSource(key string) bool {
	if bracketed(key, "request.auth.claims") {
		return true // Istio's principal side, as every request.auth key
	}
	switch key {
	case "source.ip", "remote.ip", "source.namespace", "source.principal",
		"request.auth.principal", "request.auth.audiences", "request.auth.presenter":
		return true
	}
	return false
}

type matchers struct {
	ids   []*rbacv3.Principal
	perms []*rbacv3.Permission
}

// condition translates the values of one when key (their OR). A key it
// cannot map, or an HTTP key on a TCP chain, marks the rule.
func (b *ruleBuilder) condition(key string, vals []string) matchers {
	if len(vals) == 0 {
		return matchers{}
	}
	switch key {
	case "source.ip":
		return matchers{ids: b.ipIDs(vals, false)}
	case "remote.ip":
		return matchers{ids: b.ipIDs(vals, true)}
	case "source.namespace":
		return matchers{ids: mapIDs(vals, namespaceID)}
	case "source.principal":
		return matchers{ids: b.principalIDs(vals)}
	case "destination.port":
		return matchers{perms: b.portPerms(vals)}
	case "destination.ip":
		return matchers{perms: b.destIPPerms(vals)}
	case "connection.sni":
		return matchers{perms: mapPerms(vals, func(v string) *rbacv3.Permission {
			return &rbacv3.Permission{Rule: &rbacv3.Permission_RequestedServerName{RequestedServerName: wildcard(v, "")}}
		})}
	}
	if ids, ok := b.jwtCondition(key, vals); ok {
		return matchers{ids: ids}
	}
	if name := headerKey(key); name != "" {
		if b.tcp {
			// Not on TCP, as in Istio: not a gap, no warning.
			b.skip()
			return matchers{}
		}
		return matchers{perms: mapPerms(vals, func(v string) *rbacv3.Permission { return headerPerm(authzHeader(name, v)) })}
	}
	// The keys Istio knows but this generator does not translate, or
	// does not know.
	name, _ := unsupportedKey(key)
	if name == "" {
		name = "unknown key " + strconv.Quote(model.Clip(key))
	}
	b.unsupportedPart("when " + name)
	return matchers{}
}

func (b *ruleBuilder) destIPPerms(vals []string) []*rbacv3.Permission {
	var out []*rbacv3.Permission
	for _, v := range vals {
		r, ok := cidr(v)
		if !ok {
			b.skip()
			return nil
		}
		out = append(out, &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: r}})
	}
	return out
}

// validUTF8 reports whether every string in m is valid UTF-8, which
// protobuf requires of Envoy's configuration.
func validUTF8(m protoreflect.Message) bool {
	ok := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			for i := 0; i < v.List().Len() && ok; i++ {
				ok = utf8.ValidString(v.List().Get(i).String())
			}
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for i := 0; i < v.List().Len() && ok; i++ {
				ok = validUTF8(v.List().Get(i).Message())
			}
		case fd.Kind() == protoreflect.StringKind:
			ok = utf8.ValidString(v.String())
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			ok = validUTF8(v.Message())
		}
		return ok
	})
	return ok
}
