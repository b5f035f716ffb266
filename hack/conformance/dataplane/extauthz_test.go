package dataplane

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// Istio's CUSTOM pair: a shadow RBAC filter (istio_ext_authz_) whose
// matching policy enables the ext_authz filter after it.
func TestExtAuthzFollowsShadowRules(t *testing.T) {
	enabled := &matcherv3.MetadataMatcher{
		Filter: "envoy.filters.http.rbac",
		Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: "istio_ext_authz_shadow_effective_policy_id"}}},
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "istio-ext-authz-opa"}}}},
	}
	shadow := &rbachttpv3.RBAC{
		ShadowRules:           &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{"istio-ext-authz-opa-ns[a]-policy[p]-rule[0]": pathPolicy("/admin")}},
		ShadowRulesStatPrefix: "istio_ext_authz_",
	}
	ext := &extauthzv3.ExtAuthz{
		FailureModeAllow:      true,
		FilterEnabledMetadata: enabled,
		Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "outbound|9000||authz.a.svc.cluster.local"}}}},
	}
	cfg := func(prefix string) *Config {
		s := &rbachttpv3.RBAC{ShadowRules: shadow.GetShadowRules(), ShadowRulesStatPrefix: prefix}
		h := hcm(t, "",
			&hcmv3.HttpFilter{Name: "envoy.filters.http.rbac", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, s)}},
			&hcmv3.HttpFilter{Name: "envoy.filters.http.ext_authz", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, ext)}})
		h.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: routeConfig("inbound|9080||",
			vhost("inbound", []string{"*"}, prefixRoute("default", "/", "inbound|9080||")))}
		l := &listenerv3.Listener{Name: "in", Address: addr("0.0.0.0", InboundCapturePort),
			FilterChains: []*listenerv3.FilterChain{inboundMTLSChain(t, "mtls", 9080, h)}}
		return &Config{Listeners: []*listenerv3.Listener{withTLSInspector(t, l)}, Clusters: []*clusterT{originalDst("inbound|9080||")}}
	}
	req := func(path string) Request {
		return Request{Mode: Inbound, DstIP: "10.1.0.14", DstPort: 9080, TLS: MutualTLS, Peer: "spiffe://cluster.local/ns/a/sa/b", Authority: "r:9080", Path: path}
	}
	asked := func(d Decision) bool {
		for _, p := range d.Policy {
			if strings.HasPrefix(p, "ext_authz grpc via ") && strings.HasSuffix(p, "failure_mode_allow=true") {
				return true
			}
		}
		return false
	}
	if d := Evaluate(cfg("istio_ext_authz_"), req("/admin/x")); !asked(d) || d.Outcome != Forward {
		t.Errorf("a matched path: %s %v, want the authorizer asked", d.Summary(), d.Policy)
	}
	if d := Evaluate(cfg("istio_ext_authz_"), req("/other")); asked(d) {
		t.Errorf("an unmatched path asks the authorizer: %v", d.Policy)
	}
	if d := Evaluate(cfg("istio_dry_run_custom_"), req("/admin/x")); asked(d) {
		t.Errorf("shadow rules of another prefix enable ext_authz: %v", d.Policy)
	}
}
