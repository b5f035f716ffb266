package dataplane

import (
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
)

// peerPrincipalKey is the filter state key Istio's proxies keep the
// peer's identity under.
const peerPrincipalKey = "io.istio.peer_principal"

// rbacAllows applies one RBAC filter's rules: ALLOW lets through only
// what some policy matches, DENY stops what some policy matches, LOG
// changes nothing. HTTP attributes exist only in the HTTP filter.
func (e *evaluator) rbacAllows(rules *rbacv3.RBAC, http bool) bool {
	if rules == nil {
		return true
	}
	matched := ""
	for name, p := range rules.GetPolicies() {
		if e.policyMatches(p, http) && (matched == "" || name < matched) {
			matched = name
		}
	}
	e.note("rbac %s matched policy %q", rules.GetAction(), matched)
	switch rules.GetAction() {
	case rbacv3.RBAC_ALLOW:
		return matched != ""
	case rbacv3.RBAC_DENY:
		return matched == ""
	}
	return true
}

func (e *evaluator) policyMatches(p *rbacv3.Policy, http bool) bool {
	perm := false
	for _, x := range p.GetPermissions() {
		if e.permission(x, http) {
			perm = true
			break
		}
	}
	if !perm {
		return false
	}
	for _, x := range p.GetPrincipals() {
		if e.principal(x, http) {
			return true
		}
	}
	return false
}

func (e *evaluator) permission(p *rbacv3.Permission, http bool) bool {
	switch r := p.GetRule().(type) {
	case *rbacv3.Permission_Any:
		return r.Any
	case *rbacv3.Permission_AndRules:
		for _, x := range r.AndRules.GetRules() {
			if !e.permission(x, http) {
				return false
			}
		}
		return true
	case *rbacv3.Permission_OrRules:
		for _, x := range r.OrRules.GetRules() {
			if e.permission(x, http) {
				return true
			}
		}
		return false
	case *rbacv3.Permission_NotRule:
		return !e.permission(r.NotRule, http)
	case *rbacv3.Permission_Header:
		return http && matchHeader(r.Header, e.req)
	case *rbacv3.Permission_UrlPath:
		return http && matchString(r.UrlPath.GetPath(), e.req.pathOnly())
	case *rbacv3.Permission_UriTemplate:
		return http && matchURITemplate(r.UriTemplate, e.req.pathOnly())
	case *rbacv3.Permission_DestinationIp:
		ok, _ := inCIDR(r.DestinationIp, e.req.DstIP)
		return ok
	case *rbacv3.Permission_DestinationPort:
		return r.DestinationPort == e.req.DstPort
	case *rbacv3.Permission_DestinationPortRange:
		return int64(e.req.DstPort) >= int64(r.DestinationPortRange.GetStart()) && int64(e.req.DstPort) < int64(r.DestinationPortRange.GetEnd())
	case *rbacv3.Permission_RequestedServerName:
		return matchString(r.RequestedServerName, e.sni)
	case *rbacv3.Permission_Metadata:
		// No request carries dynamic metadata (no JWT was validated).
		return r.Metadata.GetInvert()
	}
	return false
}

func (e *evaluator) principal(p *rbacv3.Principal, http bool) bool {
	switch r := p.GetIdentifier().(type) {
	case *rbacv3.Principal_Any:
		return r.Any
	case *rbacv3.Principal_AndIds:
		for _, x := range r.AndIds.GetIds() {
			if !e.principal(x, http) {
				return false
			}
		}
		return true
	case *rbacv3.Principal_OrIds:
		for _, x := range r.OrIds.GetIds() {
			if e.principal(x, http) {
				return true
			}
		}
		return false
	case *rbacv3.Principal_NotId:
		return !e.principal(r.NotId, http)
	case *rbacv3.Principal_Authenticated_:
		if !e.peerAuthenticated {
			return false
		}
		return r.Authenticated.GetPrincipalName() == nil || matchString(r.Authenticated.GetPrincipalName(), e.req.Peer)
	case *rbacv3.Principal_FilterState:
		if r.FilterState.GetKey() != peerPrincipalKey || !e.peerAuthenticated {
			return false
		}
		return matchString(r.FilterState.GetStringMatch(), e.req.Peer)
	case *rbacv3.Principal_SourceIp:
		ok, _ := inCIDR(r.SourceIp, e.req.SrcIP)
		return ok
	case *rbacv3.Principal_DirectRemoteIp:
		ok, _ := inCIDR(r.DirectRemoteIp, e.req.SrcIP)
		return ok
	case *rbacv3.Principal_RemoteIp:
		ok, _ := inCIDR(r.RemoteIp, e.req.SrcIP)
		return ok
	case *rbacv3.Principal_Header:
		return http && matchHeader(r.Header, e.req)
	case *rbacv3.Principal_UrlPath:
		return http && matchString(r.UrlPath.GetPath(), e.req.pathOnly())
	case *rbacv3.Principal_Metadata:
		return r.Metadata.GetInvert()
	}
	return false
}
