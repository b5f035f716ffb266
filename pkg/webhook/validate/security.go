package validate

import (
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
)

// conditionKeys are the keys an AuthorizationPolicy condition may use;
// keys ending in "[" take a name in brackets.
var conditionKeys = []string{
	"request.headers[", "request.auth.claims[", "experimental.envoy.filters.",
	"source.ip", "remote.ip", "source.namespace", "source.principal", "source.serviceAccount",
	"request.auth.principal", "request.auth.audiences", "request.auth.presenter",
	"destination.ip", "destination.port", "connection.sni",
}

func knownConditionKey(k string) bool {
	for _, prefix := range conditionKeys {
		if strings.HasSuffix(prefix, "[") || strings.HasSuffix(prefix, ".") {
			if strings.HasPrefix(k, prefix) && len(k) > len(prefix) && (!strings.HasSuffix(prefix, "[") || strings.HasSuffix(k, "]")) {
				return true
			}
		} else if k == prefix {
			return true
		}
	}
	return false
}

func checkAuthorizationPolicy(m proto.Message, p *problems) {
	ap := m.(*security.AuthorizationPolicy)
	_, hasProvider := ap.ActionDetail.(*security.AuthorizationPolicy_Provider)
	if ap.Action == security.AuthorizationPolicy_CUSTOM && !hasProvider {
		p.add("spec.provider", "action CUSTOM needs a provider")
	}
	if hasProvider && ap.Action != security.AuthorizationPolicy_CUSTOM {
		p.add("spec.provider", "a provider is only allowed with action CUSTOM")
	}
	if ap.Selector != nil && (ap.TargetRef != nil || len(ap.TargetRefs) > 0) {
		p.add("spec", "selector and targetRef cannot both be set")
	}
	for i, r := range ap.Rules {
		path := at("spec.rules", i)
		if r == nil {
			p.add(path, "a rule must not be null")
			continue
		}
		for j, f := range r.From {
			checkSource(p, at(path+".from", j)+".source", f.GetSource())
		}
		for j, t := range r.To {
			checkOperation(p, at(path+".to", j)+".operation", t.GetOperation())
		}
		for j, c := range r.When {
			cp := at(path+".when", j)
			if !knownConditionKey(c.Key) {
				p.add(cp+".key", "unknown condition key %q", c.Key)
			}
			if len(c.Values) == 0 && len(c.NotValues) == 0 {
				p.add(cp, "a condition needs values or notValues")
			}
		}
	}
}

func checkSource(p *problems, path string, s *security.Source) {
	if s == nil || proto.Size(s) == 0 {
		p.add(path, "a source must set at least one field")
		return
	}
	for _, blocks := range [][]string{s.IpBlocks, s.NotIpBlocks, s.RemoteIpBlocks, s.NotRemoteIpBlocks} {
		for _, b := range blocks {
			if net.ParseIP(b) == nil {
				if _, _, err := net.ParseCIDR(b); err != nil {
					p.add(path, "%q is neither an IP address nor a CIDR", b)
				}
			}
		}
	}
}

func checkOperation(p *problems, path string, o *security.Operation) {
	if o == nil || proto.Size(o) == 0 {
		p.add(path, "an operation must set at least one field")
		return
	}
	for _, ports := range [][]string{o.Ports, o.NotPorts} {
		for _, s := range ports {
			if n, err := strconv.Atoi(s); err != nil || n < 1 || n > 65535 {
				p.add(path+".ports", "%q is not a port number (1-65535)", s)
			}
		}
	}
	for _, paths := range [][]string{o.Paths, o.NotPaths} {
		for _, s := range paths {
			if s == "" {
				p.add(path+".paths", "a path must not be empty")
			}
		}
	}
}

func checkPeerAuthentication(m proto.Message, p *problems) {
	pa := m.(*security.PeerAuthentication)
	if len(pa.PortLevelMtls) > 0 && len(pa.GetSelector().GetMatchLabels()) == 0 {
		p.add("spec.portLevelMtls", "port-level mTLS needs a workload selector")
	}
	ports := make([]int, 0, len(pa.PortLevelMtls))
	for port := range pa.PortLevelMtls {
		ports = append(ports, int(port))
	}
	sort.Ints(ports)
	for _, port := range ports {
		checkPort(p, "spec.portLevelMtls", uint32(port))
	}
}

func checkRequestAuthentication(m proto.Message, p *problems) {
	ra := m.(*security.RequestAuthentication)
	if ra.Selector != nil && (ra.TargetRef != nil || len(ra.TargetRefs) > 0) {
		p.add("spec", "selector and targetRef cannot both be set")
	}
	for i, r := range ra.JwtRules {
		path := at("spec.jwtRules", i)
		if r.Issuer == "" {
			p.add(path+".issuer", "a JWT rule needs an issuer")
		}
		if r.JwksUri != "" {
			u, err := url.Parse(r.JwksUri)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				p.add(path+".jwksUri", "%q is not an http(s) URL", r.JwksUri)
			}
		}
		if r.JwksUri != "" && r.Jwks != "" {
			p.add(path, "jwksUri and jwks cannot both be set")
		}
		for j, h := range r.FromHeaders {
			if h.Name == "" {
				p.add(at(path+".fromHeaders", j)+".name", "a header name is required")
			}
		}
	}
}
