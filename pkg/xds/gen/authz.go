package gen

import (
	"fmt"
	"strings"
	"unicode/utf8"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	security "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// RBAC filter names, one filter per action that has policies: AUDIT (Envoy's
// LOG) first, then DENY, then ALLOW. Names differ because grpc-go rejects an
// HttpConnectionManager with two filters of one name.
const (
	RBACAuditFilter = "envoy.filters.http.rbac.audit"
	RBACDenyFilter  = "envoy.filters.http.rbac.deny"
	RBACAllowFilter = "envoy.filters.http.rbac"
	netRBACName     = "envoy.filters.network.rbac"
)

// authzFields are the AuthorizationPolicy fields generation acts on.
var authzFields = newFieldSet(
	"selector", "action", "rules.from.source.principals", "rules.from.source.notPrincipals",
	"rules.from.source.namespaces", "rules.from.source.notNamespaces",
	"rules.from.source.ipBlocks", "rules.from.source.notIpBlocks",
	"rules.from.source.remoteIpBlocks", "rules.from.source.notRemoteIpBlocks",
	"rules.to.operation.hosts", "rules.to.operation.notHosts", "rules.to.operation.ports",
	"rules.to.operation.notPorts", "rules.to.operation.methods", "rules.to.operation.notMethods",
	"rules.to.operation.paths", "rules.to.operation.notPaths",
	"rules.when.key", "rules.when.values", "rules.when.notValues",
)

// inboundAuthz is the RBAC of one sidecar's inbound traffic: HTTP filters
// to put before the router and network filters before the TCP proxy.
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

// authzPolicies are the AuthorizationPolicies that apply to p's workload:
// those of the root namespace (mesh-wide) and of p's namespace whose
// selector matches p's labels (no selector: every workload). Policies with
// a targetRef attach to gateways and waypoints, not sidecars.
func (g *Generator) authzPolicies(w *model.World, p *model.Proxy) []*model.Config {
	var out []*model.Config
	for _, c := range w.Configs(model.KindAuthorizationPolicy) {
		if c.Key.Namespace != RootNamespace && c.Key.Namespace != p.Namespace {
			continue
		}
		ap, ok := c.Object.(*securityv1.AuthorizationPolicy)
		if !ok {
			continue
		}
		g.warn(c, ap.ResourceVersion, &ap.Spec, authzFields)
		if ap.Spec.GetTargetRef() != nil || len(ap.Spec.GetTargetRefs()) > 0 {
			continue
		}
		if !labelsMatch(ap.Spec.GetSelector().GetMatchLabels(), p.Labels()) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// rbacRules translates the policies for HTTP (tcp false) or TCP chains into
// Envoy RBAC rules per action. An ALLOW action is present, possibly with
// no policy (deny everything), as soon as one ALLOW policy applies.
func (g *Generator) rbacRules(aps []*model.Config, tcp bool) map[security.AuthorizationPolicy_Action]*rbacv3.RBAC {
	out := map[security.AuthorizationPolicy_Action]*rbacv3.RBAC{}
	envoyAction := map[security.AuthorizationPolicy_Action]rbacv3.RBAC_Action{
		security.AuthorizationPolicy_ALLOW: rbacv3.RBAC_ALLOW,
		security.AuthorizationPolicy_DENY:  rbacv3.RBAC_DENY,
		security.AuthorizationPolicy_AUDIT: rbacv3.RBAC_LOG,
	}
	for _, c := range aps {
		ap := c.Object.(*securityv1.AuthorizationPolicy)
		action, suffix := ap.Spec.GetAction(), ""
		if action == security.AuthorizationPolicy_CUSTOM {
			// No external authorizer is configured (discovery has no
			// extension providers yet): what the policy would send to one
			// is denied, as istiod does for a CUSTOM policy whose provider
			// it cannot find. Never fail open. Reported as unsupported
			// (authzvalues.go).
			action, suffix = security.AuthorizationPolicy_DENY, "-deny-due-to-bad-CUSTOM-action"
		}
		ea, ok := envoyAction[action]
		if !ok {
			g.warnOnce(c, ap.ResourceVersion, "action", "AuthorizationPolicy action not supported; the policy is ignored", "action", action.String())
			continue
		}
		rules := out[action]
		if rules == nil {
			rules = &rbacv3.RBAC{Action: ea, Policies: map[string]*rbacv3.Policy{}}
			out[action] = rules
		}
		for i, r := range ap.Spec.GetRules() {
			b := &ruleBuilder{tcp: tcp, principals: g.authzPrincipals}
			pol := b.rule(r)
			if !validUTF8(r.ProtoReflect()) {
				// Strings Envoy cannot take: the rule matches nothing
				// if it allows and everything if it denies.
				b.skip()
				pol = &rbacv3.Policy{Principals: []*rbacv3.Principal{allOfIDs(nil)}, Permissions: []*rbacv3.Permission{allOfPerms(nil)}}
				g.warnOnce(c, ap.ResourceVersion, fmt.Sprint("utf8:", i), "AuthorizationPolicy rule holds invalid UTF-8", "rule", i)
			}
			for _, k := range b.badKeys {
				g.warnOnce(c, ap.ResourceVersion, "when:"+k, "AuthorizationPolicy condition key not supported", "key", k)
			}
			if b.skipped && action != security.AuthorizationPolicy_DENY {
				// Without the part it cannot express, an ALLOW or AUDIT
				// rule would match more than written: leave it out.
				continue
			}
			rules.Policies[fmt.Sprintf("ns[%s]-policy[%s]-rule[%d]%s", c.Key.Namespace, c.Key.Name, i, suffix)] = pol
		}
	}
	for a, r := range out {
		if a != security.AuthorizationPolicy_ALLOW && len(r.Policies) == 0 {
			delete(out, a)
		}
	}
	return out
}

// authorization builds p's inbound RBAC filters; both lists are empty
// when no policy applies.
func (g *Generator) authorization(w *model.World, p *model.Proxy) inboundAuthz {
	aps := g.authzPolicies(w, p)
	if len(aps) == 0 {
		return inboundAuthz{}
	}
	var out inboundAuthz
	httpRules, tcpRules := g.rbacRules(aps, false), g.rbacRules(aps, true)
	order := []struct {
		action security.AuthorizationPolicy_Action
		name   string
	}{
		{security.AuthorizationPolicy_AUDIT, RBACAuditFilter},
		{security.AuthorizationPolicy_DENY, RBACDenyFilter},
		{security.AuthorizationPolicy_ALLOW, RBACAllowFilter},
	}
	for _, o := range order {
		if r := httpRules[o.action]; r != nil {
			out.http = append(out.http, &hcmv3.HttpFilter{Name: o.name, ConfigType: &hcmv3.HttpFilter_TypedConfig{
				TypedConfig: mustAny(&httprbacv3.RBAC{Rules: r}),
			}})
		}
		if r := tcpRules[o.action]; r != nil {
			out.tcp = append(out.tcp, &listenerv3.Filter{Name: netRBACName, ConfigType: &listenerv3.Filter_TypedConfig{
				TypedConfig: mustAny(&netrbacv3.RBAC{StatPrefix: "tcp." + strings.ToLower(o.action.String()) + ".", Rules: r}),
			}})
		}
	}
	return out
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
	switch key {
	case "source.ip", "remote.ip", "source.namespace", "source.principal":
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
	if name, ok := strings.CutPrefix(key, "request.headers["); ok && strings.HasSuffix(name, "]") && !b.tcp {
		name = strings.ToLower(strings.TrimSuffix(name, "]"))
		return matchers{perms: mapPerms(vals, func(v string) *rbacv3.Permission { return headerPerm(authzHeader(name, v)) })}
	}
	if !strings.HasPrefix(key, "request.headers[") {
		b.badKeys = append(b.badKeys, key)
	}
	b.skip()
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
