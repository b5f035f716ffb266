package gen

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Gateway TLS, as far as it goes here:
//
//	HTTP server, tls.httpsRedirect   its virtual hosts require TLS (Envoy answers 301 to https)
//	HTTPS server, SIMPLE or MUTUAL   terminated with the serverCertificate/privateKey files
//	                                 (MUTUAL also checks clients against caCertificates)
//	HTTPS server, ISTIO_MUTUAL       terminated with the proxy's own workload certificate
//	                                 from its agent's SDS (default, ROOTCA)
//	HTTPS server, SIMPLE or MUTUAL   terminated with the Secret credentialName of the
//	with credentialName              gateway's namespace, sent by this server over ADS
//	                                 (kubernetes://NAME, kubernetes://NAME-cacert; see
//	                                 gateway_credential.go); only with a cluster (Options.Credentials)
//
// One filter chain per HTTPS server, matched by SNI on its hosts, with its
// own RouteConfiguration named https.PORT.PORTNAME.GATEWAY.NAMESPACE, as in
// Istio. The other TLS servers of the port share its listener:
//
//	TLS server, SIMPLE, MUTUAL or   terminated as above (ISTIO_MUTUAL also offers ALPN
//	ISTIO_MUTUAL                    istio-peer-exchange), then tcp_proxy by the first
//	                                matching tcp route of the bound VirtualServices
//	                                (gateway_tcp.go)
//	PASSTHROUGH                     a chain per SNI name of the bound VirtualServices'
//	                                tls routes, not terminated (gateway_passthrough.go)
//	AUTO_PASSTHROUGH                a chain per service port and subset whose host the
//	                                server allows, matched on Istio's cluster SNI
//	                                outbound_.PORT_.SUBSET_.HOST (gateway_autopassthrough.go)
//
// A TCP server without tls gets the port's one chain (gateway_tcp.go).
// Not done: OPTIONAL_MUTUAL and protocols other than HTTP, HTTP2, GRPC,
// GRPC-WEB, HTTPS, TLS, TCP, MONGO, REDIS and MYSQL (the server is left
// out, reported as an unsupported value: gateway_server.go); reported as
// unsupported fields, the TLS version and cipher restrictions;
// credentialName in file mode, where no Secrets are read. A server that
// needs one of them gets no filter chain.

// gatewayFields are the Gateway fields generation honours.
var gatewayFields = newFieldSet("selector", "servers.port", "servers.hosts", "servers.name",
	"servers.tls.httpsRedirect", "servers.tls.mode", "servers.tls.serverCertificate", "servers.tls.privateKey",
	"servers.tls.caCertificates", "servers.tls.credentialName", "servers.tls.subjectAltNames",
	"servers.tls.verifyCertificateSpki", "servers.tls.verifyCertificateHash")

// gatewayFieldsNoSecrets are gatewayFields in file mode: no Secrets, so no
// credentialName.
var gatewayFieldsNoSecrets = newFieldSet("selector", "servers.port", "servers.hosts", "servers.name",
	"servers.tls.httpsRedirect", "servers.tls.mode", "servers.tls.serverCertificate", "servers.tls.privateKey",
	"servers.tls.caCertificates", "servers.tls.subjectAltNames", "servers.tls.verifyCertificateSpki",
	"servers.tls.verifyCertificateHash")

// tlsServer is one server of a Gateway selected by the proxy that
// terminates TLS (HTTPS, or TLS with tcp routes).
type tlsServer struct {
	gatewayServer
	name    string // the RouteConfiguration's name (HTTPS), the chain's (TLS)
	context *tlsv3.DownstreamTlsContext
}

// gatewayTLSServer turns a server that terminates TLS into a tlsServer, or
// reports that it cannot be served; credentials tells whether
// credentialName can be.
func gatewayTLSServer(c *model.Config, i int, s *networking.Server, credentials bool) (*tlsServer, bool) {
	tls := s.GetTls()
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2", "http/1.1"}}}
	file := func(p string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: p}}
	}
	switch tls.GetMode() {
	case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL:
		if tls.GetCredentialName() != "" {
			if !credentials {
				return nil, false
			}
			credentialContext(ctx, tls)
			break
		}
		if tls.GetServerCertificate() == "" || tls.GetPrivateKey() == "" {
			return nil, false
		}
		ctx.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: file(tls.GetServerCertificate()), PrivateKey: file(tls.GetPrivateKey()),
		}}
		if tls.GetMode() == networking.ServerTLSSettings_MUTUAL {
			if tls.GetCaCertificates() == "" {
				return nil, false
			}
			ctx.RequireClientCertificate = wrapperspb.Bool(true)
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{
				ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: file(tls.GetCaCertificates())},
			}
		}
	case networking.ServerTLSSettings_ISTIO_MUTUAL:
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
		ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsSecret(SDSDefault)}
		ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
			ValidationContextSdsSecretConfig: sdsSecret(SDSRootCA),
		}
	default:
		return nil, false
	}
	restrictClients(ctx, tls)
	if !strings.EqualFold(s.GetPort().GetProtocol(), "HTTPS") && tls.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL {
		// A TCP server terminating Istio mTLS also offers Istio's metadata
		// exchange protocol, as Istio's gateways do.
		ctx.CommonTlsContext.AlpnProtocols = []string{"istio-peer-exchange", "h2", "http/1.1"}
	}
	return &tlsServer{
		gatewayServer: gatewayServer{gateway: c.Key.Namespace + "/" + c.Key.Name, ns: c.Key.Namespace, hosts: s.GetHosts(), port: s.GetPort().GetNumber(), tls: s.GetTls() != nil},
		name:          serverName("https", c, i, s),
		context:       ctx,
	}, true
}

// restrictClients applies a server's subjectAltNames, verifyCertificateSpki
// and verifyCertificateHash to the client certificates of a server that
// requires them (MUTUAL, ISTIO_MUTUAL), as Istio's BuildListenerTLSContext
// does: SANs matched exactly, of any type, in the validation context that
// checks the client's chain.
func restrictClients(ctx *tlsv3.DownstreamTlsContext, tls *networking.ServerTLSSettings) {
	if !ctx.GetRequireClientCertificate().GetValue() ||
		len(tls.GetSubjectAltNames())+len(tls.GetVerifyCertificateSpki())+len(tls.GetVerifyCertificateHash()) == 0 {
		return
	}
	restrict := func(v *tlsv3.CertificateValidationContext) {
		for _, san := range tls.GetSubjectAltNames() {
			v.MatchSubjectAltNames = append(v.MatchSubjectAltNames, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}})
		}
		v.VerifyCertificateSpki = append(v.VerifyCertificateSpki, tls.GetVerifyCertificateSpki()...)
		v.VerifyCertificateHash = append(v.VerifyCertificateHash, tls.GetVerifyCertificateHash()...)
	}
	cc := ctx.CommonTlsContext
	switch vc := cc.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContext:
		restrict(vc.ValidationContext)
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		restrict(vc.CombinedValidationContext.DefaultValidationContext)
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		def := &tlsv3.CertificateValidationContext{}
		restrict(def)
		cc.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: def, ValidationContextSdsSecretConfig: vc.ValidationContextSdsSecretConfig,
			},
		}
	}
}

// serverName names what belongs to server i of Gateway c, as Istio names
// an HTTPS server's routes: PREFIX.PORT.PORTNAME.GATEWAY.NAMESPACE (the
// server's index for a port without a name).
func serverName(prefix string, c *model.Config, i int, s *networking.Server) string {
	portName := s.GetPort().GetName()
	if portName == "" {
		portName = itoa(int32(i))
	}
	return prefix + "." + itoa(int32(s.GetPort().GetNumber())) + "." + portName + "." + c.Key.Name + "." + c.Key.Namespace
}

// warnGateway logs the Gateway's unsupported fields once per version.
func (g *Generator) warnGateway(c *model.Config) {
	gw, ok := c.Object.(*networkingv1.Gateway)
	if !ok {
		return
	}
	if g.credentials {
		g.warn(c, gw.ResourceVersion, &gw.Spec, gatewayFields)
		return
	}
	if _, done := g.warns.once.Load(c.Key.String() + "@" + gw.ResourceVersion); !done {
		for _, s := range gw.Spec.GetServers() {
			if s.GetTls().GetCredentialName() != "" {
				g.log.Warn("gateway server names a credentialName, but no Secrets are read without a cluster: the server is left out",
					"gateway", c.Key.Namespace+"/"+c.Key.Name, "port", s.GetPort().GetNumber(), "credentialName", s.GetTls().GetCredentialName())
			}
		}
	}
	g.warn(c, gw.ResourceVersion, &gw.Spec, gatewayFieldsNoSecrets)
}

// tlsListener builds the listener of one TLS port with a filter chain per
// HTTPS server (SNI on its hosts, its TLS context, its routes, the
// gateway's RBAC).
func tlsListener(port uint32, servers []*tlsServer, az gatewayAuthz) *listenerv3.Listener {
	l := &listenerv3.Listener{
		Name:             "0.0.0.0_" + itoa(int32(port)),
		Address:          socketAddress("0.0.0.0", int32(port)),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name:       "envoy.filters.listener.tls_inspector",
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&tlsinspectorv3.TlsInspector{})},
		}},
	}
	for _, s := range servers {
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
			Name:             s.name,
			FilterChainMatch: sniMatch(s.hosts),
			Filters:          []*listenerv3.Filter{hcmFilter(gatewayManager(s.name, s.name, az))},
			TransportSocket:  downstreamTLS(s.context),
		})
	}
	return az.tel.listener(l)
}

// sniMatch matches a server's hosts (namespace parts dropped) by SNI; a *
// host adds no name, and without names the match is nil (everything).
func sniMatch(hosts []string) *listenerv3.FilterChainMatch {
	match := &listenerv3.FilterChainMatch{}
	for _, h := range hosts {
		_, name, ok := strings.Cut(h, "/")
		if !ok {
			name = h
		}
		if name != "*" {
			match.ServerNames = append(match.ServerNames, name)
		}
	}
	if len(match.ServerNames) == 0 {
		return nil
	}
	return match
}

func downstreamTLS(ctx *tlsv3.DownstreamTlsContext) *corev3.TransportSocket {
	return &corev3.TransportSocket{
		Name:       "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

// requireTLS makes the virtual hosts that a redirecting server allows
// answer plain HTTP with a redirect to https.
func requireTLS(vhs []*routev3.VirtualHost, servers []gatewayServer) {
	for _, vh := range vhs {
		for _, s := range servers {
			if s.redirect && vh.Name != "blackhole" && hostAllowedAnyNS(s, vh.Name) {
				vh.RequireTls = routev3.VirtualHost_ALL
			}
		}
	}
}

// redirectHosts adds, as istiod does, a virtual host for each host of an
// httpsRedirect server that no VirtualService route covered: it has no
// routes and requires TLS, so Envoy answers 301 to https for it rather
// than 404. The blackhole host goes when any such host is added (istiod
// builds blackhole only when the route has no virtual host at all).
// istiod names the domain with the host as written (ns/host included);
// discovery uses the host part, with the :* port form beside a host without
// a wildcard, as its other gateway virtual hosts do.
func redirectHosts(vhs []*routev3.VirtualHost, servers []gatewayServer) []*routev3.VirtualHost {
	have := map[string]bool{}
	var out []*routev3.VirtualHost
	for _, vh := range vhs {
		if vh.Name == "blackhole" {
			continue
		}
		out = append(out, vh)
		for _, d := range vh.Domains {
			have[d] = true
		}
	}
	added := false
	for _, s := range servers {
		if !s.redirect {
			continue
		}
		for _, h := range s.hosts {
			if _, name, ok := strings.Cut(h, "/"); ok {
				h = name
			}
			h = strings.ToLower(h)
			if have[h] {
				continue
			}
			domains := []string{h}
			if !strings.Contains(h, "*") {
				domains = append(domains, h+":*")
			}
			for _, d := range domains {
				have[d] = true
			}
			out = append(out, &routev3.VirtualHost{Name: h, Domains: domains, RequireTls: routev3.VirtualHost_ALL})
			added = true
		}
	}
	if !added {
		return vhs
	}
	return out
}

// hostAllowedAnyNS applies a server's hosts to a virtual host name,
// ignoring the namespace part (the virtual host was admitted already).
func hostAllowedAnyNS(s gatewayServer, host string) bool {
	any := s
	any.hosts = nil
	for _, h := range s.hosts {
		_, name, ok := strings.Cut(h, "/")
		if !ok {
			name = h
		}
		any.hosts = append(any.hosts, "*/"+name)
	}
	return hostAllowed(any, "", host)
}
