package validate

import (
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

func checkGateway(m proto.Message, md *meta, p *problems) {
	g := m.(*networking.Gateway)
	if !isDNS1123Label(md.Name) {
		p.add("metadata.name", "invalid gateway name: %q (a Gateway's name is a DNS label: no dots)", md.Name)
	}
	if len(g.Servers) == 0 {
		p.add("spec.servers", "gateway must have at least one server")
	}
	names := map[string]bool{}
	for i, s := range g.Servers {
		path := at("spec.servers", i)
		if s == nil {
			p.add(path, "server may not be null")
			continue
		}
		checkServer(p, path, s)
		if s.Port == nil {
			continue
		}
		if names[s.Port.Name] {
			p.add(path+".port.name", "port names in servers must be unique: duplicate name %s", s.Port.Name)
		}
		names[s.Port.Name] = true
		if !isHTTPProtocol(s.Port.Protocol) && s.GetTls().GetHttpsRedirect() {
			p.warn(path+".tls.httpsRedirect", "tls.httpsRedirect should only be used with http servers")
		}
	}
}

func checkServer(p *problems, path string, s *networking.Server) {
	if len(s.Hosts) == 0 {
		p.add(path+".hosts", "server config must contain at least one host")
	}
	for j, h := range s.Hosts {
		checkNamespacedHost(p, at(path+".hosts", j), h, true)
	}
	portOK := checkServerPort(p, path+".port", s.Port, s.Bind)
	if rest, ok := strings.CutPrefix(s.Bind, unixPrefix); ok {
		if msg := unixAddressProblem(rest); msg != "" {
			p.add(path+".bind", "%s", msg)
		}
		if s.Port != nil && s.Port.Number != 0 {
			p.add(path+".port.number", "port number must be 0 for unix domain socket")
		}
	} else if s.Bind != "" && !isIP(s.Bind) {
		p.add(path+".bind", "%s is not a valid IP", s.Bind)
	}
	checkServerTLS(p, path+".tls", s.Tls)
	if !portOK {
		return
	}
	proto := s.Port.Protocol
	switch {
	case isTLSProtocol(proto) && s.Tls == nil:
		p.add(path+".tls", "server must have TLS settings for HTTPS/TLS protocols")
	case !isTLSProtocol(proto) && s.Tls != nil && isHTTPProtocol(proto):
		// Plain HTTP may only say where HTTPS is (httpsRedirect).
		t := s.Tls
		passthrough := t.Mode == networking.ServerTLSSettings_PASSTHROUGH || t.Mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH
		if !passthrough || t.CaCertificates != "" || t.PrivateKey != "" || t.ServerCertificate != "" {
			p.add(path+".tls", "server cannot have TLS settings for plain text HTTP ports")
		}
	case !isTLSProtocol(proto) && s.Tls != nil:
		p.add(path+".tls", "server cannot have TLS settings for non HTTPS/TLS ports")
	}
}

// checkServerPort reports whether the port is there, with a known protocol.
func checkServerPort(p *problems, path string, port *networking.Port, bind string) bool {
	if port == nil {
		p.add(path, "port is required")
		return false
	}
	ok := true
	if !knownProtocol(port.Protocol) {
		p.add(path+".protocol", "invalid protocol %q, supported protocols are HTTP, HTTP2, GRPC, GRPC-WEB, MONGO, REDIS, MYSQL, TCP", port.Protocol)
		ok = false
	}
	if port.Number > 0 || !strings.HasPrefix(bind, unixPrefix) {
		checkPort(p, path+".number", port.Number)
	}
	if port.TargetPort > 0 { //nolint:staticcheck // deprecated, and Istio refuses it here
		p.add(path+".targetPort", "targetPort has no impact on Gateways")
	}
	if port.Name == "" {
		p.add(path+".name", "port name must be set")
	}
	return ok
}

// checkNamespacedHost checks a "namespace/host" of a Gateway server or
// Sidecar egress listener (a Gateway may also give a bare host).
func checkNamespacedHost(p *problems, path, h string, gateway bool) {
	ns, host, ok := strings.Cut(h, "/")
	if !ok {
		if gateway {
			checkHostPart(p, path, h, true)
		} else {
			p.add(path, "host %q must be of form namespace/dnsName", h)
		}
		return
	}
	if ns == "" || host == "" {
		p.add(path, "config namespace and dnsName in host entry cannot be empty")
	}
	if gateway {
		if ns != "*" && ns != "." && !isDNS1123Label(ns) {
			p.add(path, "invalid namespace value %q in gateway", ns)
		}
	} else if n := strings.TrimPrefix(ns, "~"); n != "" && n != "*" && n != "." && !isDNS1123Label(n) {
		p.add(path, "invalid namespace value %q in sidecar", ns)
	}
	checkHostPart(p, path, host, gateway)
}

func checkHostPart(p *problems, path, host string, gateway bool) {
	if host != "*" && !strings.Contains(host, ".") {
		p.add(path, "short names (non FQDN) are not allowed: %q", host)
	}
	if msg := wildcardDomainProblem(host); msg != "" && !(gateway && isIP(host)) {
		p.add(path, "%s", msg)
	}
	if partialWildcard(host) {
		p.add(path, "partial wildcard %q not allowed", host)
	}
}

func checkServerTLS(p *problems, path string, t *networking.ServerTLSSettings) {
	if t == nil {
		return
	}
	if (t.MinProtocolVersion == networking.ServerTLSSettings_TLSV1_0 || t.MinProtocolVersion == networking.ServerTLSSettings_TLSV1_1) && len(t.CipherSuites) == 0 {
		p.warn(path, "TLS version below TLSV1_2 require setting compatible ciphers as by default they no longer include compatible ciphers.")
	}
	checkCipherSuites(p, path+".cipherSuites", t.CipherSuites)
	certs := t.ServerCertificate != "" || t.PrivateKey != "" || t.CaCertificates != "" || len(t.TlsCertificates) > 0 ||
		t.CredentialName != "" || len(t.CredentialNames) > 0
	switch t.Mode {
	case networking.ServerTLSSettings_ISTIO_MUTUAL:
		if certs {
			p.add(path, "ISTIO_MUTUAL TLS cannot have associated certificates, keys, CA bundle or credentials")
		}
		return
	case networking.ServerTLSSettings_PASSTHROUGH, networking.ServerTLSSettings_AUTO_PASSTHROUGH:
		if certs || t.CaCrl != "" {
			p.warn(path, "%v mode does not use certificates, they will be ignored", t.Mode)
		}
	}
	sources := 0
	for _, b := range []bool{t.ServerCertificate != "" && t.PrivateKey != "", t.CredentialName != "", len(t.CredentialNames) > 0, len(t.TlsCertificates) > 0} {
		if b {
			sources++
		}
	}
	if sources > 1 {
		p.add(path, "only one of credential_name, credential_names, server_certificate/private_key, tls_certificates should be specified")
	}
	terminating := t.Mode == networking.ServerTLSSettings_SIMPLE || t.Mode == networking.ServerTLSSettings_MUTUAL ||
		t.Mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	if terminating && (t.CredentialName != "" || len(t.CredentialNames) > 0) {
		return // fetched with SDS: nothing else is needed
	}
	if terminating {
		checkTerminatingTLS(p, path, t)
	}
	if t.CaCrl != "" {
		if t.CredentialName != "" {
			p.add(path+".caCrl", "CRL is not supported with credentialName. CRL has to be specified in the credential")
		}
		if t.Mode == networking.ServerTLSSettings_SIMPLE {
			p.add(path+".caCrl", "CRL is not supported with SIMPLE TLS")
		}
	}
}

func checkTerminatingTLS(p *problems, path string, t *networking.ServerTLSSettings) {
	what := "SIMPLE TLS"
	if t.Mode != networking.ServerTLSSettings_SIMPLE {
		what = "MUTUAL TLS"
		if t.CaCertificates == "" {
			p.add(path, "%s requires a client CA bundle", what)
		}
	}
	if len(t.TlsCertificates) > 2 {
		p.warn(path, "%s can support up to 2 server certificates", what)
	}
	certs := t.TlsCertificates
	if len(certs) == 0 {
		certs = []*networking.ServerTLSSettings_TLSCertificate{{ServerCertificate: t.ServerCertificate, PrivateKey: t.PrivateKey}}
	}
	for _, c := range certs {
		if c.ServerCertificate == "" {
			p.add(path, "%s requires a server certificate", what)
		}
		if c.PrivateKey == "" {
			p.add(path, "%s requires a private key", what)
		}
	}
}

// cipherSuites Envoy's BoringSSL knows for a Gateway's cipherSuites.
var cipherSuites = map[string]bool{
	"ECDHE-ECDSA-AES128-GCM-SHA256": true, "ECDHE-RSA-AES128-GCM-SHA256": true,
	"ECDHE-ECDSA-AES256-GCM-SHA384": true, "ECDHE-RSA-AES256-GCM-SHA384": true,
	"ECDHE-ECDSA-CHACHA20-POLY1305": true, "ECDHE-RSA-CHACHA20-POLY1305": true,
	"ECDHE-ECDSA-AES128-SHA": true, "ECDHE-RSA-AES128-SHA": true, "ECDHE-ECDSA-AES256-SHA": true,
	"ECDHE-RSA-AES256-SHA": true, "AES128-GCM-SHA256": true, "AES256-GCM-SHA384": true,
	"AES128-SHA": true, "AES256-SHA": true, "DES-CBC3-SHA": true,
}

func validCipherSuite(cs string) bool {
	if cs == "" || cs == "ALL" {
		return true
	}
	if c := cs[0]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return true // an operator (-, +, !) of an OpenSSL cipher list
	}
	return cipherSuites[cs]
}

// checkCipherSuites warns, as Istio does, about suites Envoy will ignore.
func checkCipherSuites(p *problems, path string, suites []string) {
	seen, invalid, dup := map[string]bool{}, []string{}, []string{}
	for _, cs := range suites {
		switch {
		case !validCipherSuite(cs):
			invalid = append(invalid, cs)
		case seen[cs]:
			dup = append(dup, cs)
		}
		seen[cs] = true
	}
	if len(invalid) > 0 {
		p.warn(path, "ignoring invalid cipher suites: %v", invalid)
	}
	if len(dup) > 0 {
		p.warn(path, "ignoring duplicate cipher suites: %v", dup)
	}
}
