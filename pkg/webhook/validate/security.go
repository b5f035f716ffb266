package validate

import (
	"encoding/json"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// conditionKey says whether k is a key an AuthorizationPolicy condition
// may use, and checks its values the way Istio does.
func checkCondition(p *problems, path, k string, values []string) {
	if k == "" {
		p.add(path+".key", "`key` must not be empty")
		return
	}
	for _, v := range values {
		if v == "" {
			p.add(path, "empty value not allowed, found in %s", k)
			return
		}
	}
	bracketed := func() {
		if open := strings.Index(k, "["); !strings.HasSuffix(k, "]") || open <= 0 || open >= len(k)-2 {
			p.add(path+".key", "bad key (%s): should have format a[b]", k)
		}
	}
	switch {
	case strings.HasPrefix(k, "request.headers"), strings.HasPrefix(k, "request.auth.claims"),
		strings.HasPrefix(k, "experimental.envoy.filters."):
		bracketed()
	case k == "source.ip", k == "remote.ip", k == "destination.ip":
		checkIPs(p, path+".values", values)
	case k == "source.serviceAccount":
		checkServiceAccounts(p, path+".values", k, values)
	case k == "source.trustDomain":
		checkWildcardValues(p, path+".values", k, values)
	case k == "destination.port":
		checkPortStrings(p, path+".values", values)
	case k == "source.namespace", k == "source.principal", k == "request.auth.principal",
		k == "request.auth.audiences", k == "request.auth.presenter", k == "connection.sni":
	case k == "destination.namespace":
		p.add(path+".key", "attribute %s is replaced by the metadata.namespace", k)
	case strings.HasPrefix(k, "destination.labels"):
		p.add(path+".key", "attribute %s is replaced by the workload selector", k)
	case k == "destination.name", k == "destination.user":
		p.add(path+".key", "deprecated attribute %s: only supported in v1alpha1", k)
	default:
		p.add(path+".key", "unknown condition key %q", k)
	}
}

func checkIPs(p *problems, path string, ips []string) {
	for _, v := range ips {
		if strings.Contains(v, "/") {
			if _, err := netip.ParsePrefix(v); err != nil {
				p.add(path, "bad CIDR range (%s)", v)
			}
		} else if !isIP(v) {
			p.add(path, "bad IP address (%s)", v)
		}
	}
}

func checkPortStrings(p *problems, path string, ports []string) {
	for _, s := range ports {
		if n, err := strconv.ParseUint(s, 10, 32); err != nil || n > 65535 {
			p.add(path, "bad port (%s)", s)
		}
	}
}

func checkEmptyValues(p *problems, path, what string, values []string) {
	for _, v := range values {
		if v == "" {
			p.add(path, "empty value not allowed, found in %s", what)
			return
		}
	}
}

func checkWildcardValues(p *problems, path, what string, values []string) {
	for _, v := range values {
		switch n := strings.Count(v, "*"); {
		case v == "":
			p.add(path, "empty value not allowed, found in %s", what)
		case n > 1:
			p.add(path, "at most one wildcard is allowed, found in %s: %q", what, v)
		case n == 1 && v != "*" && !strings.HasPrefix(v, "*") && !strings.HasSuffix(v, "*"):
			p.add(path, "wildcard is only allowed at the start or end, found in %s: %q", what, v)
		}
	}
}

func checkTrustDomains(p *problems, path, what string, values []string) {
	checkWildcardValues(p, path, what, values)
	for _, v := range values {
		if strings.Contains(v, "/") {
			p.add(path, "trust domain must not contain '/', found in %s: %q", what, v)
		}
	}
}

// checkServiceAccounts: at most 16 of "sa" or "namespace/sa", no wildcard,
// at most 320 characters each.
func checkServiceAccounts(p *problems, path, what string, values []string) {
	if len(values) > 16 {
		p.add(path, "may not have more than 16 values")
	}
	for _, v := range values {
		ns, sa, hasNS := strings.Cut(v, "/")
		switch {
		case v == "":
			p.add(path, "empty value not allowed, found in %s", what)
		case strings.Contains(v, "*"):
			p.add(path, "wildcard not allowed, found in %s", what)
		case strings.Count(v, "/") > 1, hasNS && (ns == "" || sa == ""):
			p.add(path, "expected format 'serviceAccount' or 'namespace/serviceAccount', found %q in %s", v, what)
		case len(v) > 320:
			p.add(path, "value cannot exceed 320 characters, found in %s", what)
		}
	}
}

var pathLiteral = regexp.MustCompile("^[a-zA-Z0-9-._~%!$&'()+,;:@=]+$")

// checkPathTemplates: {*} and {**} match segments, {**} last; no other braces.
func checkPathTemplates(p *problems, path string, paths []string) {
	for _, full := range paths {
		template := strings.Contains(full, "{*}") || strings.Contains(full, "{**}")
		anySeen := false
		for _, glob := range strings.Split(strings.Trim(full, "/"), "/") {
			switch {
			case (glob == "{*}" || glob == "{**}") && anySeen:
				p.add(path, "invalid or unsupported path %s: {**} is not the last operator", full)
			case glob == "{**}":
				anySeen = true
			case glob == "{*}":
			case strings.ContainsAny(glob, "{}"):
				p.add(path, "invalid or unsupported path %s: '{' or '}' beyond a supported path template", full)
			case template && !pathLiteral.MatchString(glob):
				p.add(path, "invalid or unsupported path %s: segment %q is not a valid literal", full, glob)
			}
		}
	}
}

// checkPolicyTarget applies the rules Istio's policies share: one of
// selector, targetRef or targetRefs; selector labels without wildcards;
// references to a Service, ServiceEntry, Gateway or GatewayClass in the
// policy's namespace.
func checkPolicyTarget(p *problems, sel *typev1beta1.WorkloadSelector, ref *typev1beta1.PolicyTargetReference, refs []*typev1beta1.PolicyTargetReference) {
	set := 0
	for _, b := range []bool{sel != nil, ref != nil, len(refs) > 0} {
		if b {
			set++
		}
	}
	if set > 1 {
		p.add("spec", "only one of targetRefs or selector can be set")
	}
	if sel != nil {
		checkSelectorLabels(p, "spec.selector.matchLabels", sel.MatchLabels)
		if len(sel.MatchLabels) == 0 {
			p.warn("spec.selector", "workload selector specified without labels")
		}
	}
	if ref != nil {
		checkTargetRef(p, "spec.targetRef", ref)
	}
	for i, r := range refs {
		checkTargetRef(p, at("spec.targetRefs", i), r)
	}
	if len(refs) > 16 {
		p.add("spec.targetRefs", "at most 16 targetRefs")
	}
}

var (
	refGroup = regexp.MustCompile(`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	refKind  = regexp.MustCompile(`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
)

func checkTargetRef(p *problems, path string, r *typev1beta1.PolicyTargetReference) {
	if r == nil {
		return
	}
	if r.Name == "" || len(r.Name) > 253 {
		p.add(path+".name", "targetRef name must be set (at most 253 characters)")
	}
	if r.Namespace != "" {
		p.add(path+".namespace", "cross namespace referencing is not currently supported")
	}
	if len(r.Group) > 253 || !refGroup.MatchString(r.Group) {
		p.add(path+".group", "%q is not an API group", r.Group)
	}
	if r.Kind == "" || len(r.Kind) > 63 || !refKind.MatchString(r.Kind) {
		p.add(path+".kind", "%q is not a kind", r.Kind)
	}
	group := r.Group
	allowed := (group == "" || group == "core") && r.Kind == "Service" ||
		group == "networking.istio.io" && r.Kind == "ServiceEntry" ||
		group == "gateway.networking.k8s.io" && (r.Kind == "Gateway" || r.Kind == "GatewayClass")
	if !allowed {
		p.add(path, "targetRef must be to a Service, ServiceEntry, Gateway or GatewayClass, not %s/%s", r.Group, r.Kind)
	}
}

func checkAuthorizationPolicy(m proto.Message, _ *meta, p *problems) {
	ap := m.(*security.AuthorizationPolicy)
	checkPolicyTarget(p, ap.Selector, ap.TargetRef, ap.TargetRefs)
	provider := ap.GetProvider()
	switch {
	case ap.Action == security.AuthorizationPolicy_CUSTOM && ap.Rules == nil:
		p.add("spec.rules", "CUSTOM action without rules is never triggered; add an empty rule {} to match every request")
	case ap.Action == security.AuthorizationPolicy_CUSTOM && provider.GetName() == "":
		p.add("spec.provider.name", "must not be empty with action CUSTOM")
	case ap.Action != security.AuthorizationPolicy_CUSTOM && provider != nil:
		p.add("spec.provider", "a provider is only allowed with action CUSTOM, not %s", ap.Action)
	}
	if ap.Action == security.AuthorizationPolicy_DENY && ap.Rules == nil {
		p.add("spec.rules", "DENY action without rules is never triggered; add an empty rule {} to match every request")
	}
	if len(ap.Rules) > 512 {
		p.add("spec.rules", "at most 512 rules")
	}
	for i, r := range ap.Rules {
		checkRule(p, at("spec.rules", i), ap.Action, r)
	}
}

func checkRule(p *problems, path string, action security.AuthorizationPolicy_Action, r *security.Rule) {
	if r == nil {
		p.add(path, "a rule must not be null")
		return
	}
	custom := action == security.AuthorizationPolicy_CUSTOM
	if r.From != nil && len(r.From) == 0 {
		p.add(path+".from", "`from` must not be empty")
	}
	if len(r.From) > 512 {
		p.add(path+".from", "at most 512 sources")
	}
	var fromSet, toSet, tcpFrom, tcpTo bool
	for j, f := range r.From {
		fp := at(path+".from", j) + ".source"
		if f == nil || f.Source == nil {
			p.add(fp, "`from.source` must not be null")
			continue
		}
		fromSet = true
		tcpFrom = checkSource(p, fp, f.Source, custom) || tcpFrom
	}
	if r.To != nil && len(r.To) == 0 {
		p.add(path+".to", "`to` must not be empty")
	}
	for j, t := range r.To {
		tp := at(path+".to", j) + ".operation"
		if t == nil || t.Operation == nil {
			p.add(tp, "`to.operation` must not be null")
			continue
		}
		toSet = true
		tcpTo = checkOperation(p, tp, t.Operation) || tcpTo
	}
	for j, c := range r.When {
		cp := at(path+".when", j)
		if c == nil {
			p.add(cp, "a condition must not be null")
			continue
		}
		if custom && (c.Key == "source.namespace" || c.Key == "source.serviceAccount" || c.Key == "source.trustDomain" ||
			c.Key == "source.principal" || strings.HasPrefix(c.Key, "request.auth.")) {
			p.add(cp+".key", "%s is currently not supported with CUSTOM action", c.Key)
		}
		switch {
		case c.Key == "":
			p.add(cp+".key", "`key` must not be empty")
		case len(c.Values) == 0 && len(c.NotValues) == 0:
			p.add(cp, "at least one of values or notValues must be set for key %s", c.Key)
		default:
			checkCondition(p, cp, c.Key, c.Values)
			checkCondition(p, cp, c.Key, c.NotValues)
		}
	}
	if action == security.AuthorizationPolicy_DENY && ((fromSet && !toSet && !tcpFrom) || (toSet && !tcpTo)) {
		p.warn(path, "configured AuthorizationPolicy will deny all traffic to TCP ports under its scope due to the use "+
			"of only HTTP attributes in a DENY rule; it is recommended to explicitly specify the port")
	}
}

// checkSource reports whether the source uses attributes TCP traffic has.
func checkSource(p *problems, path string, s *security.Source, custom bool) bool {
	if custom {
		for _, f := range []struct {
			name string
			n    int
		}{
			{"namespaces", len(s.Namespaces)},
			{"notNamespaces", len(s.NotNamespaces)},
			{"serviceAccounts", len(s.ServiceAccounts)},
			{"notServiceAccounts", len(s.NotServiceAccounts)},
			{"trustDomains", len(s.TrustDomains)},
			{"notTrustDomains", len(s.NotTrustDomains)},
			{"principals", len(s.Principals)},
			{"notPrincipals", len(s.NotPrincipals)},
			{"requestPrincipals", len(s.RequestPrincipals)},
			{"notRequestPrincipals", len(s.NotRequestPrincipals)},
		} {
			if f.n > 0 {
				p.add(path+"."+f.name, "is currently not supported with CUSTOM action")
			}
		}
	}
	if len(s.Principals)+len(s.NotPrincipals)+len(s.Namespaces)+len(s.NotNamespaces) > 0 &&
		len(s.ServiceAccounts)+len(s.NotServiceAccounts) > 0 {
		p.add(path, "cannot set serviceAccounts with namespaces or principals")
	}
	if proto.Size(s) == 0 {
		p.add(path, "`from.source` must not be empty")
	}
	for _, b := range [][]string{s.IpBlocks, s.NotIpBlocks, s.RemoteIpBlocks, s.NotRemoteIpBlocks} {
		checkIPs(p, path, b)
	}
	for name, vs := range map[string][]string{
		"principals": s.Principals, "requestPrincipals": s.RequestPrincipals, "namespaces": s.Namespaces,
		"ipBlocks": s.IpBlocks, "remoteIpBlocks": s.RemoteIpBlocks, "notPrincipals": s.NotPrincipals,
		"notRequestPrincipals": s.NotRequestPrincipals, "notNamespaces": s.NotNamespaces,
		"notIpBlocks": s.NotIpBlocks, "notRemoteIpBlocks": s.NotRemoteIpBlocks,
	} {
		checkEmptyValues(p, path+"."+name, name, vs)
	}
	checkServiceAccounts(p, path+".serviceAccounts", "serviceAccounts", s.ServiceAccounts)
	checkServiceAccounts(p, path+".notServiceAccounts", "notServiceAccounts", s.NotServiceAccounts)
	checkTrustDomains(p, path+".trustDomains", "trustDomains", s.TrustDomains)
	checkTrustDomains(p, path+".notTrustDomains", "notTrustDomains", s.NotTrustDomains)
	return s.NotPrincipals != nil || s.Principals != nil || s.IpBlocks != nil || s.NotIpBlocks != nil ||
		s.Namespaces != nil || s.NotNamespaces != nil || s.RemoteIpBlocks != nil || s.NotRemoteIpBlocks != nil ||
		s.ServiceAccounts != nil || s.NotServiceAccounts != nil
}

// checkOperation reports whether the operation uses ports, which TCP
// traffic has.
func checkOperation(p *problems, path string, o *security.Operation) bool {
	if len(o.Ports)+len(o.Methods)+len(o.Paths)+len(o.Hosts)+len(o.NotPorts)+len(o.NotMethods)+len(o.NotPaths)+len(o.NotHosts) == 0 {
		p.add(path, "`to.operation` must not be empty")
	}
	checkPortStrings(p, path+".ports", o.Ports)
	checkPortStrings(p, path+".notPorts", o.NotPorts)
	for name, vs := range map[string][]string{
		"ports": o.Ports, "methods": o.Methods, "paths": o.Paths, "hosts": o.Hosts,
		"notPorts": o.NotPorts, "notMethods": o.NotMethods, "notPaths": o.NotPaths, "notHosts": o.NotHosts,
	} {
		checkEmptyValues(p, path+"."+name, name, vs)
	}
	checkPathTemplates(p, path+".paths", o.Paths)
	checkPathTemplates(p, path+".notPaths", o.NotPaths)
	return o.Ports != nil || o.NotPorts != nil
}

func checkPeerAuthentication(m proto.Message, _ *meta, p *problems) {
	pa := m.(*security.PeerAuthentication)
	if pa.Selector != nil {
		checkSelectorLabels(p, "spec.selector.matchLabels", pa.Selector.MatchLabels)
		if len(pa.Selector.MatchLabels) == 0 {
			p.warn("spec.selector", "workload selector specified without labels")
		}
	}
	if pa.PortLevelMtls != nil && len(pa.PortLevelMtls) == 0 {
		p.add("spec.portLevelMtls", "port level mTLS, if defined, must have at least one element")
	}
	if len(pa.PortLevelMtls) > 0 && len(pa.GetSelector().GetMatchLabels()) == 0 {
		p.add("spec.portLevelMtls", "mesh/namespace peer authentication cannot have port level mTLS (portLevelMtls requires a selector)")
	}
	for port := range pa.PortLevelMtls {
		if port == 0 || port > 65535 {
			p.add("spec.portLevelMtls", "port %d must be in range 1..65535", port)
		}
	}
}

var headerToken = regexp.MustCompile(`^[-_A-Za-z0-9]+$`)

func checkRequestAuthentication(m proto.Message, _ *meta, p *problems) {
	ra := m.(*security.RequestAuthentication)
	checkPolicyTarget(p, ra.Selector, ra.TargetRef, ra.TargetRefs)
	for i, r := range ra.JwtRules {
		checkJWTRule(p, at("spec.jwtRules", i), r)
	}
}

func checkJWTRule(p *problems, path string, r *security.JWTRule) {
	if r == nil {
		return
	}
	checkEmptyValues(p, path+".audiences", "audiences", r.Audiences)
	if r.Issuer == "" && r.JwksUri == "" {
		p.add(path+".issuer", "issuer or jwksUri must be non-empty")
	}
	if r.JwksUri != "" {
		u, err := url.Parse(r.JwksUri)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || len(r.JwksUri) > 2048 {
			p.add(path+".jwksUri", "%q is not an http(s) URL", r.JwksUri)
		}
	}
	if r.JwksUri != "" && r.Jwks != "" {
		p.add(path, "only one of jwks or jwksUri can be set")
	}
	if r.Jwks != "" {
		checkJWKS(p, path+".jwks", r.Jwks)
	}
	for j, h := range r.FromHeaders {
		if h.GetName() == "" {
			p.add(at(path+".fromHeaders", j)+".name", "location header name must be non-empty")
		}
	}
	checkEmptyValues(p, path+".fromParams", "fromParams", r.FromParams)
	checkEmptyValues(p, path+".fromCookies", "fromCookies", r.FromCookies)
	checkEmptyValues(p, path+".spaceDelimitedClaims", "spaceDelimitedClaims", r.SpaceDelimitedClaims)
	if len(r.SpaceDelimitedClaims) > 64 {
		p.add(path+".spaceDelimitedClaims", "at most 64 claims")
	}
	for j, c := range r.OutputClaimToHeaders {
		cp := at(path+".outputClaimToHeaders", j)
		switch {
		case c == nil:
			p.add(cp, "must not be null")
		case c.Claim == "" || c.Header == "":
			p.add(cp, "header and claim must be non-empty")
		case !headerToken.MatchString(c.Header):
			p.add(cp+".header", "%q is not a header name", c.Header)
		}
	}
	checkDuration(p, path+".timeout", r.Timeout)
}

// checkJWKS: a JSON Web Key or Key Set; Istio warns when a key holds
// private material, which verification never needs.
func checkJWKS(p *problems, path, jwks string) {
	var set struct {
		Keys []map[string]any `json:"keys"`
		Kty  string           `json:"kty"`
	}
	if err := json.Unmarshal([]byte(jwks), &set); err != nil || (set.Keys == nil && set.Kty == "") {
		p.add(path, "jwks parse error: not a JSON Web Key Set")
		return
	}
	for i, k := range set.Keys {
		_, private := k["d"]
		if private || k["kty"] == "oct" {
			p.warn(path, "jwks key at index %d contains private key material; only public keys are used for verification", i)
		}
	}
}
