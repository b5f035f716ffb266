package gen

import (
	"sort"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// MTLSMode is the effective PeerAuthentication mode of an inbound port.
type MTLSMode = security.PeerAuthentication_MutualTLS_Mode

// The effective modes (UNSET never is one: it inherits).
const (
	MTLSDisable    = security.PeerAuthentication_MutualTLS_DISABLE
	MTLSPermissive = security.PeerAuthentication_MutualTLS_PERMISSIVE
	MTLSStrict     = security.PeerAuthentication_MutualTLS_STRICT
)

// IstioInboundALPN are the ALPN values an Istio sidecar offers for mTLS;
// a PERMISSIVE port tells mesh TLS from the application's own by them.
var IstioInboundALPN = []string{"istio-peer-exchange", "istio", "istio-http/1.0", "istio-http/1.1", "istio-h2"}

// peerAuthnFields are the PeerAuthentication fields generation acts on:
// all of them.
var peerAuthnFields = newFieldSet("selector", "mtls", "portLevelMtls")

// inboundMTLS is the mTLS mode of a workload and of its ports.
type inboundMTLS struct {
	mode  MTLSMode
	ports map[uint32]MTLSMode
}

// forPort is port's mode: its port-level mode, else the workload's.
func (m inboundMTLS) forPort(port int32) MTLSMode {
	if pm, ok := m.ports[uint32(port)]; ok {
		return pm
	}
	return m.mode
}

// oldest orders PeerAuthentications as Istio resolves conflicts: the
// oldest first, then by name.
func oldest(cs []*model.Config) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i].Object.(*securityv1.PeerAuthentication), cs[j].Object.(*securityv1.PeerAuthentication)
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return cs[i].Key.Name < cs[j].Key.Name
	})
}

// peerAuthentication resolves p's mTLS modes (workloadMTLS), and reports
// the fields of the PeerAuthentications it reads that it cannot apply.
func (g *Generator) peerAuthentication(w *view, p *model.Proxy) inboundMTLS {
	for _, c := range w.unrecorded().Configs(model.KindPeerAuthentication) {
		pa, ok := c.Object.(*securityv1.PeerAuthentication)
		if !ok || (c.Key.Namespace != p.Namespace && c.Key.Namespace != rootNamespace(w)) {
			continue
		}
		g.warn(c, pa.ResourceVersion, &pa.Spec, peerAuthnFields)
		if len(pa.Spec.GetSelector().GetMatchLabels()) == 0 && len(pa.Spec.GetPortLevelMtls()) > 0 {
			g.warnOnce(c, pa.ResourceVersion, "portLevelMtls", "portLevelMtls needs a workload selector; ignored")
		}
	}
	root := rootNamespace(w)
	return workloadMTLS(w.ConfigsWhere(model.KindPeerAuthentication, peerAuthnShapes(p.Namespace, p.Labels())), root, p.Namespace, p.Labels())
}

// peerAuthnShapes is the rule of the PeerAuthentications workloadMTLS
// reads for a workload of namespace ns with labels: its namespace's and
// the root namespace's without a selector, its namespace's whose selector
// selects it.
func peerAuthnShapes(ns string, labels map[string]string) func(*view, *model.Config) bool {
	return func(u *view, c *model.Config) bool {
		pa, ok := c.Object.(*securityv1.PeerAuthentication)
		if !ok || (c.Key.Namespace != ns && c.Key.Namespace != rootNamespace(u)) {
			return false
		}
		sel := pa.Spec.GetSelector().GetMatchLabels()
		return len(sel) == 0 || (c.Key.Namespace == ns && labelsMatch(sel, labels))
	}
}

// workloadMTLS resolves the mTLS modes of a workload of namespace ns with
// labels, of the PeerAuthentications pas: the workload policy (ns,
// selector matching), else the namespace policy (no selector), else the
// mesh policy (root namespace, no selector), else PERMISSIVE; an UNSET
// mode inherits from the next level. Port-level modes come from the
// workload policy only, as in Istio.
func workloadMTLS(pas []*model.Config, root, ns string, labels map[string]string) inboundMTLS {
	var workload, namespace, mesh []*model.Config
	for _, c := range pas {
		pa, ok := c.Object.(*securityv1.PeerAuthentication)
		if !ok || (c.Key.Namespace != ns && c.Key.Namespace != root) {
			continue
		}
		sel := pa.Spec.GetSelector().GetMatchLabels()
		switch {
		case c.Key.Namespace == ns && len(sel) > 0:
			if labelsMatch(sel, labels) {
				workload = append(workload, c)
			}
		case len(sel) > 0:
			// A selector in the root namespace selects root namespace
			// workloads only, handled above.
		case c.Key.Namespace == ns:
			namespace = append(namespace, c)
		default:
			mesh = append(mesh, c)
		}
	}
	out := inboundMTLS{mode: MTLSPermissive}
	for _, level := range [][]*model.Config{mesh, namespace, workload} {
		if len(level) == 0 {
			continue
		}
		oldest(level)
		if m := level[0].Object.(*securityv1.PeerAuthentication).Spec.GetMtls().GetMode(); m != security.PeerAuthentication_MutualTLS_UNSET {
			out.mode = m
		}
	}
	if len(workload) > 0 {
		for port, m := range workload[0].Object.(*securityv1.PeerAuthentication).Spec.GetPortLevelMtls() {
			if m.GetMode() != security.PeerAuthentication_MutualTLS_UNSET {
				if out.ports == nil {
					out.ports = map[uint32]MTLSMode{}
				}
				out.ports[port] = m.GetMode()
			}
		}
	}
	return out
}

// namespaceMTLS is the mTLS mode the services of namespace ns are
// inferred to take, for auto mTLS: the namespace's PeerAuthentication (no
// selector), else the mesh's (root namespace), else PERMISSIVE; UNSET
// inherits. Workload and port-level policies do not count, as in
// istiod's BestEffortInferServiceMTLSMode.
func namespaceMTLS(w *view, ns string) MTLSMode {
	var namespace, mesh []*model.Config
	root := rootNamespace(w)
	// Read per cluster: by namespace, not by a rule (a rule per cluster
	// would be a closure per cluster for the planner to call).
	for _, c := range w.ConfigsIn(model.KindPeerAuthentication, ns, root) {
		pa, ok := c.Object.(*securityv1.PeerAuthentication)
		if !ok || len(pa.Spec.GetSelector().GetMatchLabels()) > 0 {
			continue
		}
		switch c.Key.Namespace {
		case ns:
			namespace = append(namespace, c)
		case root:
			mesh = append(mesh, c)
		}
	}
	mode := MTLSPermissive
	for _, level := range [][]*model.Config{mesh, namespace} {
		if len(level) == 0 {
			continue
		}
		oldest(level)
		if m := level[0].Object.(*securityv1.PeerAuthentication).Spec.GetMtls().GetMode(); m != security.PeerAuthentication_MutualTLS_UNSET {
			mode = m
		}
	}
	return mode
}

// meshServerCiphers are the cipher suites Istio's sidecars accept for mesh
// mTLS (istiod's authn SupportedCiphers; MeshConfig meshMTLS.cipherSuites
// is not applied, reported as ignored by pkg/mesh).
var meshServerCiphers = []string{
	"ECDHE-ECDSA-AES256-GCM-SHA384",
	"ECDHE-RSA-AES256-GCM-SHA384",
	"ECDHE-ECDSA-AES128-GCM-SHA256",
	"ECDHE-RSA-AES128-GCM-SHA256",
	"AES256-GCM-SHA384",
	"AES128-GCM-SHA256",
}

// Istio's server-side ALPN for mesh mTLS: HTTP chains negotiate the HTTP
// version; TCP chains also offer the TCP metadata exchange.
var (
	meshServerHTTPALPN = []string{"h2", "http/1.1"}
	meshServerTCPALPN  = []string{"istio-peer-exchange", "h2", "http/1.1"}
)

// meshServerTLS are the two server-side transport sockets of Istio mTLS
// on a sidecar's inbound chains, built once per proxy.
type meshServerTLS struct {
	http, tcp *corev3.TransportSocket
}

// newMeshServerTLS builds the server side of Istio mTLS for the mesh's
// trust domains, as istiod's BuildInboundTLS does: the workload
// certificate (SDS default); client certificates required, checked
// against the mesh roots (SDS ROOTCA) and their URI SAN required to be an
// identity of the trust domain or one of its aliases
// (spiffe://DOMAIN/ prefix), so that a certificate of another trust
// domain signed by the same root is refused in the handshake; TLS 1.2 to
// 1.3 with Istio's cipher suites.
func newMeshServerTLS(trust trustDomains) meshServerTLS {
	var sans []*tlsv3.SubjectAltNameMatcher
	for _, d := range trust.domains() {
		sans = append(sans, &tlsv3.SubjectAltNameMatcher{
			SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + d + "/"}},
		})
	}
	socket := func(alpn []string) *corev3.TransportSocket {
		ctx := &tlsv3.DownstreamTlsContext{
			RequireClientCertificate: wrapperspb.Bool(true),
			CommonTlsContext: &tlsv3.CommonTlsContext{
				AlpnProtocols: alpn,
				TlsParams: &tlsv3.TlsParameters{
					CipherSuites:              meshServerCiphers,
					TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
					TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
				},
				TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(SDSDefault)},
				ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
						ValidationContextSdsSecretConfig: sdsSecret(SDSRootCA),
					},
				},
			},
		}
		return &corev3.TransportSocket{
			Name:       "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
		}
	}
	return meshServerTLS{http: socket(meshServerHTTPALPN), tcp: socket(meshServerTCPALPN)}
}

// socket is the transport socket of an HTTP or a TCP chain.
func (m meshServerTLS) socket(http bool) *corev3.TransportSocket {
	if http {
		return m.http
	}
	return m.tcp
}

func tlsInspector() *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{
		Name:       "envoy.filters.listener.tls_inspector",
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&tlsinspectorv3.TlsInspector{})},
	}
}

// securedChains turns a port's plaintext chain into the chains of mode:
// DISABLE keeps it; STRICT adds mTLS to it (plaintext then fails the
// handshake); PERMISSIVE has an mTLS chain for Istio's ALPN, a chain that
// passes the application's own TLS through to the port's cluster, and the
// plaintext chain for the rest.
func securedChains(plain *listenerv3.FilterChain, p InboundPort, mode MTLSMode, sec inboundSecurity) []*listenerv3.FilterChain {
	switch mode {
	case MTLSDisable:
		return []*listenerv3.FilterChain{plain}
	case MTLSStrict:
		plain.TransportSocket = sec.serverTLS.socket(p.Protocol.IsHTTP())
		return []*listenerv3.FilterChain{plain}
	}
	port := wrapperspb.UInt32(uint32(p.Port))
	mtls := &listenerv3.FilterChain{
		Name:             plain.Name + "-mtls",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: port, TransportProtocol: "tls", ApplicationProtocols: IstioInboundALPN},
		Filters:          plain.Filters,
		TransportSocket:  sec.serverTLS.socket(p.Protocol.IsHTTP()),
	}
	cluster := InboundClusterName(p.Port)
	appTLS := &listenerv3.FilterChain{
		Name:             plain.Name + "-tls",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: port, TransportProtocol: "tls"},
		Filters:          sec.tel.tcpChain(true, sec.authz.tcp, cluster, cluster),
	}
	plain.FilterChainMatch = &listenerv3.FilterChainMatch{DestinationPort: port, TransportProtocol: "raw_buffer"}
	return []*listenerv3.FilterChain{mtls, appTLS, plain}
}
