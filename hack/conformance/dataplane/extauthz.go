package dataplane

import (
	"fmt"
	"sort"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extauthznetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// How Envoy's RBAC and ext_authz filters work together for Istio's
// CUSTOM action. An RBAC filter's shadow rules decide nothing, but the
// filter writes, in the dynamic metadata of its canonical name
// (envoy.filters.http.rbac, envoy.filters.network.rbac, whatever it is
// named in the chain), PREFIX + "shadow_effective_policy_id": the first
// matching shadow policy, by name (Envoy keeps policies in a sorted map),
// PREFIX being shadow_rules_stat_prefix. An ext_authz filter with
// filter_enabled_metadata runs only when that metadata matches; then the
// request or connection is sent to the authorizer, whose answer is
// outside the proxy's configuration: the decision records that it is
// asked (cluster, failure_mode_allow) and goes on as if it allowed.

const (
	typeNetExtAuthz    = "type.googleapis.com/envoy.extensions.filters.network.ext_authz.v3.ExtAuthz"
	rbacHTTPMetadata   = "envoy.filters.http.rbac"
	rbacNetMetadata    = "envoy.filters.network.rbac"
	shadowEffectiveKey = "shadow_effective_policy_id"
)

// shadowRules evaluates an RBAC filter's shadow rules and records the
// effective policy in the filter's dynamic metadata.
func (e *evaluator) shadowRules(rules *rbacv3.RBAC, prefix string, http bool) {
	if rules == nil {
		return
	}
	names := make([]string, 0, len(rules.GetPolicies()))
	for n := range rules.GetPolicies() {
		names = append(names, n)
	}
	sort.Strings(names)
	ns := rbacNetMetadata
	if http {
		ns = rbacHTTPMetadata
	}
	for _, n := range names {
		if e.policyMatches(rules.GetPolicies()[n], http) {
			if e.metadata == nil {
				e.metadata = map[string]map[string]string{}
			}
			if e.metadata[ns] == nil {
				e.metadata[ns] = map[string]string{}
			}
			e.metadata[ns][prefix+shadowEffectiveKey] = n
			e.note("rbac shadow %s matched policy %q", prefix, n)
			return
		}
	}
}

// filterEnabled applies an ext_authz filter_enabled_metadata matcher to
// the dynamic metadata (string values under a one-key path: what Istio
// writes).
func (e *evaluator) filterEnabled(m *matcherv3.MetadataMatcher) bool {
	if m == nil {
		return true
	}
	if len(m.GetPath()) != 1 {
		return false
	}
	v, ok := e.metadata[m.GetFilter()][m.GetPath()[0].GetKey()]
	ok = ok && matchString(m.GetValue().GetStringMatch(), v)
	return ok != m.GetInvert()
}

// httpExtAuthz is an HTTP ext_authz filter's fact: the authorizer asked,
// or nothing when the filter is not enabled for the request.
func (e *evaluator) httpExtAuthz(a *extauthzv3.ExtAuthz) []string {
	if !e.filterEnabled(a.GetFilterEnabledMetadata()) {
		e.note("ext_authz not enabled for the request")
		return nil
	}
	svc := a.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	kind := "grpc"
	if svc == "" {
		svc, kind = a.GetHttpService().GetServerUri().GetCluster(), "http"
	}
	return []string{fmt.Sprintf("ext_authz %s via %s failure_mode_allow=%v", kind, e.describeCluster(svc).brief(), a.GetFailureModeAllow())}
}

// netExtAuthz is a network ext_authz filter's fact.
func (e *evaluator) netExtAuthz(a *extauthznetv3.ExtAuthz) []string {
	if !e.filterEnabled(a.GetFilterEnabledMetadata()) {
		e.note("network ext_authz not enabled for the connection")
		return nil
	}
	return []string{fmt.Sprintf("ext_authz tcp via %s failure_mode_allow=%v",
		e.describeCluster(a.GetGrpcService().GetEnvoyGrpc().GetClusterName()).brief(), a.GetFailureModeAllow())}
}
