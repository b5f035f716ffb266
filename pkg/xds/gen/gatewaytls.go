package gen

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
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
//	                                 credential.go); only with a cluster (EnableCredentials)
//
// One filter chain per HTTPS server, matched by SNI on its hosts, with its
// own RouteConfiguration named https.PORT.PORTNAME.GATEWAY.NAMESPACE, as in
// Istio. TLS or HTTPS servers in PASSTHROUGH mode share the port's
// listener: a chain per SNI name of the bound VirtualServices' tls routes,
// not terminated, tcp_proxy to the destination (gatewaypass.go). Not done:
// AUTO_PASSTHROUGH and OPTIONAL_MUTUAL (logged, the server is left out),
// TCP servers (logged), and, reported as unsupported fields, the TLS
// version, cipher, SAN and hash restrictions; credentialName in file mode,
// where no Secrets are read. A server that needs one of them gets no
// filter chain.

// gatewayFields are the Gateway fields generation honours.
var gatewayFields = newFieldSet("selector", "servers.port", "servers.hosts", "servers.name",
	"servers.tls.httpsRedirect", "servers.tls.mode", "servers.tls.serverCertificate", "servers.tls.privateKey",
	"servers.tls.caCertificates", "servers.tls.credentialName")

// gatewayFieldsNoSecrets are gatewayFields in file mode: no Secrets, so no
// credentialName.
var gatewayFieldsNoSecrets = newFieldSet("selector", "servers.port", "servers.hosts", "servers.name",
	"servers.tls.httpsRedirect", "servers.tls.mode", "servers.tls.serverCertificate", "servers.tls.privateKey",
	"servers.tls.caCertificates")

// tlsServer is one HTTPS server of a Gateway selected by the proxy.
type tlsServer struct {
	gatewayServer
	port    uint32
	name    string // the RouteConfiguration's name
	context *tlsv3.DownstreamTlsContext
}

// gatewayTLSServer turns an HTTPS server into a tlsServer, or reports why
// it cannot be served.
// credentials tells whether credentialName can be served.
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
	portName := s.GetPort().GetName()
	if portName == "" {
		portName = itoa(int32(i))
	}
	return &tlsServer{
		gatewayServer: gatewayServer{gateway: c.Key.Namespace + "/" + c.Key.Name, ns: c.Key.Namespace, hosts: s.GetHosts()},
		port:          s.GetPort().GetNumber(),
		name:          "https." + itoa(int32(s.GetPort().GetNumber())) + "." + portName + "." + c.Key.Name + "." + c.Key.Namespace,
		context:       ctx,
	}, true
}

// warnGateway logs the Gateway's unsupported fields once per version.
func (g *Generator) warnGateway(c *model.Config) {
	gw, ok := c.Object.(*networkingv1.Gateway)
	if !ok {
		return
	}
	if g.credentials() {
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

// tlsListener builds the listener of one HTTPS port: a filter chain per
// server (SNI on its hosts, its TLS context, its routes).
func tlsListener(port uint32, servers []*tlsServer) *listenerv3.Listener {
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
		match := &listenerv3.FilterChainMatch{}
		for _, h := range s.hosts {
			_, name, ok := strings.Cut(h, "/")
			if !ok {
				name = h
			}
			if name != "*" {
				match.ServerNames = append(match.ServerNames, name)
			}
		}
		if len(match.ServerNames) == 0 {
			match = nil
		}
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
			Name:             s.name,
			FilterChainMatch: match,
			Filters:          []*listenerv3.Filter{hcmFilter(rdsManager(s.name, s.name))},
			TransportSocket: &corev3.TransportSocket{
				Name:       "envoy.transport_sockets.tls",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(s.context)},
			},
		})
	}
	return l
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
