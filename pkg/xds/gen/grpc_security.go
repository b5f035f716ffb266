package gen

import (
	"slices"
	"sort"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Proxyless gRPC security, with the semantics of Istio's grpcgen and what
// grpc-go (gRFC A29) accepts. grpc-go has no SDS: its certificates come
// from the certificate providers of its bootstrap. Istio's agent writes one,
// "default", a file_watcher over the workload's cert-chain.pem, key.pem and
// root-cert.pem; the certificate names "default" (identity) and "ROOTCA"
// (roots) are passed to it and ignored by the file watcher, kept for
// Istio's sake.
//
// Client side: only DestinationRule tls ISTIO_MUTUAL turns TLS on; there is
// no auto mTLS (grpc-go rejects transport_socket_matches, and the control
// plane cannot know whether the application uses xDS credentials), and
// SIMPLE and MUTUAL with file paths are not supported (reported).
//
// Server side: STRICT requires client certificates. grpc-go matches filter
// chains on transport_protocol "raw_buffer" only, so one port cannot take
// both mTLS and plaintext: PERMISSIVE is served as plaintext (reported),
// except on a workload labelled security.istio.io/tlsMode=istio, whose
// clients use mTLS, where it becomes STRICT.

// GRPCCertProvider is the certificate provider instance, in Istio's gRPC
// bootstrap, that holds the workload certificate and the mesh roots.
const GRPCCertProvider = "default"

// grpcCommonTLS names the workload certificate and the roots by provider
// instance, in the fields grpc-go reads (tls_certificate_provider_instance,
// ca_certificate_provider_instance) and, as Istio does for older gRPC
// releases, in their deprecated forerunners. sans are matched exactly
// against the peer's subject alt names; grpc-go reads
// match_subject_alt_names only, not the typed matchers Envoy prefers, and
// NACKs any on the server side.
func grpcCommonTLS(sans []string) *tlsv3.CommonTlsContext {
	var match []*matcherv3.StringMatcher
	for _, s := range sans {
		match = append(match, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}})
	}
	return &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: GRPCCertProvider, CertificateName: SDSDefault},
		TlsCertificateCertificateProviderInstance: &tlsv3.CommonTlsContext_CertificateProviderInstance{
			InstanceName: GRPCCertProvider, CertificateName: SDSDefault,
		},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext: &tlsv3.CertificateValidationContext{
					CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: GRPCCertProvider, CertificateName: SDSRootCA},
					MatchSubjectAltNames:          match, //nolint:staticcheck // the only SAN field grpc-go reads
				},
				ValidationContextCertificateProviderInstance: &tlsv3.CommonTlsContext_CertificateProviderInstance{
					InstanceName: GRPCCertProvider, CertificateName: SDSRootCA,
				},
			},
		},
	}
}

// grpcUpstreamTLS is the transport socket of a proxyless gRPC client's
// cluster for tls: Istio mTLS for ISTIO_MUTUAL, verifying the server
// against the DestinationRule's subjectAltNames if it lists any (their
// documented meaning, as for sidecars; Istio's grpcgen ignores them), else
// against identities (the destination's service accounts); nil, i.e.
// plaintext, for every other mode.
func grpcUpstreamTLS(tls *networking.ClientTLSSettings, identities []string) *corev3.TransportSocket {
	if tls.GetMode() != networking.ClientTLSSettings_ISTIO_MUTUAL {
		return nil
	}
	sans := identities
	if len(tls.GetSubjectAltNames()) > 0 {
		sans = tls.GetSubjectAltNames()
	}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: grpcCommonTLS(sans)}
	// grpc-go checks the socket's name as well as its type.
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// grpcDownstreamMTLS is the transport socket of a gRPC server's STRICT
// filter chain: its own certificate, client certificates required and
// verified against the mesh roots (no SAN matching: grpc-go refuses it on
// servers; AuthorizationPolicy principals do that job).
func grpcDownstreamMTLS() *corev3.TransportSocket {
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: grpcCommonTLS(nil), RequireClientCertificate: wrapperspb.Bool(true)}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// serviceAccounts are the names of the service accounts behind eps,
// sorted, without repeats. An endpoint backed by a Pod has the pod's
// account even when the pod names none (""), as istiod's SecureNamingSAN:
// its identity is then spiffe://TD/ns/NS/sa/, which no certificate the CA
// issues carries, so a client refuses it rather than accepting any mesh
// identity (leaving it out would leave a service of such pods with no
// SAN to verify at all). An endpoint without pod or account (an
// EndpointSlice address no Pod backs, a WorkloadEntry without account)
// has no identity.
func serviceAccounts(eps *model.ServiceEndpoints) []string {
	if eps == nil {
		return nil
	}
	var out []string
	for _, ep := range eps.Endpoints {
		if ep.ServiceAccount != "" || ep.Pod != "" {
			out = append(out, ep.ServiceAccount)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// serviceIdentities are the SPIFFE IDs of the service accounts behind
// svc's endpoints (in the trust domain and its aliases), sorted: what a
// client of svc expects the server to present, as Istio derives a
// service's accounts from its endpoints.
func (g *Generator) serviceIdentities(w *view, svc *model.Service, eps *model.ServiceEndpoints) []string {
	return g.trustIn(w).identities(svc.Namespace, serviceAccounts(eps))
}

// grpcClusterTLS sets the TLS of a proxyless gRPC client's cluster of svc
// from its traffic policy tp, and reports DestinationRule TLS modes gRPC
// cannot honour (SIMPLE and MUTUAL stay plaintext, as in Istio).
func (g *Generator) grpcClusterTLS(sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, c *clusterv3.Cluster, tp *networking.TrafficPolicy) {
	c.TransportSocket = grpcUpstreamTLS(tp.GetTls(), g.serviceIdentities(sc.w, svc, eps))
	switch mode := tp.GetTls().GetMode(); mode {
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		if cfg := sc.destinationRuleConfig(svc.Hostname); cfg != nil {
			g.warnGRPC(cfg, sc.DestinationRule(svc.Hostname).ResourceVersion, "trafficPolicy.tls.mode",
				"DestinationRule tls mode not supported for proxyless gRPC; its clients connect in plaintext (only DISABLE and ISTIO_MUTUAL are)",
				"mode", mode.String(), "cluster", c.Name)
		}
	}
}

// IdentitiesChanged reports whether the endpoint changes of services, from
// the World cls was generated from to w, change cls's clusters and not
// only its endpoints, so that an endpoints-only update would leave them
// stale: a full push is needed, as Istio does when an endpoint update
// changes a service's accounts. That is so when the service accounts
// behind a service change (the identities its clusters verify: gRPC and
// Envoy ISTIO_MUTUAL, Envoy auto mTLS), and on a sidecar when a
// passthrough service's port gains or loses its last endpoint without a
// sidecar (its ORIGINAL_DST cluster is mTLS only when all have one).
func IdentitiesChanged(cls *ClassConfig, w *model.World, services []model.NamespacedName) bool {
	if cls == nil || cls.scope == nil {
		return false
	}
	old := cls.scope.w.w
	for _, nn := range services {
		svc := w.Service(nn.Namespace, nn.Name)
		if svc == nil {
			continue
		}
		before, after := old.Endpoints(nn.Namespace, nn.Name), w.Endpoints(nn.Namespace, nn.Name)
		if !slices.Equal(serviceAccounts(before), serviceAccounts(after)) {
			return true
		}
		if originalDst(cls.scope.Proxy, svc) {
			for _, port := range svc.Ports {
				if allInMesh(before, port) != allInMesh(after, port) {
					return true
				}
			}
		}
	}
	return false
}

// grpcServerMode is the mode a gRPC server's port is served in: DISABLE or
// STRICT (see the top of this file for PERMISSIVE).
func grpcServerMode(p *model.Proxy, m inboundMTLS, port int32) MTLSMode {
	mode := m.forPort(port)
	if mode != MTLSPermissive {
		return mode
	}
	if p.Labels()[TLSModeLabel] == "istio" {
		return MTLSStrict
	}
	return MTLSDisable
}

// warnGRPCPermissive reports, on each PeerAuthentication that asks for
// PERMISSIVE and applies to the gRPC server p, that some of its ports are
// served as plaintext instead. Without any PeerAuthentication (PERMISSIVE
// by default) there is nothing to report on, as in Istio.
func (g *Generator) warnGRPCPermissive(w *view, p *model.Proxy, ports []InboundPort, m inboundMTLS) {
	var plain []int32
	for _, port := range ports {
		if m.forPort(port.Port) == MTLSPermissive && grpcServerMode(p, m, port.Port) == MTLSDisable {
			plain = append(plain, port.Port)
		}
	}
	if len(plain) == 0 {
		return
	}
	for _, c := range w.unrecorded().Configs(model.KindPeerAuthentication) {
		pa, ok := c.Object.(*securityv1.PeerAuthentication)
		if !ok || (c.Key.Namespace != p.Namespace && c.Key.Namespace != rootNamespace(w)) || !asksPermissive(pa) {
			continue
		}
		if sel := pa.Spec.GetSelector().GetMatchLabels(); len(sel) > 0 && (c.Key.Namespace != p.Namespace || !labelsMatch(sel, p.Labels())) {
			continue
		}
		g.warnGRPC(c, pa.ResourceVersion, "mtls.mode",
			"PERMISSIVE is served as plaintext to proxyless gRPC servers (grpc-go cannot take mTLS and plaintext on one port); use STRICT with ISTIO_MUTUAL clients, or DISABLE",
			"proxy", p.ID, "ports", plain)
	}
}

func asksPermissive(pa *securityv1.PeerAuthentication) bool {
	if pa.Spec.GetMtls().GetMode() == MTLSPermissive {
		return true
	}
	for _, m := range pa.Spec.GetPortLevelMtls() {
		if m.GetMode() == MTLSPermissive {
			return true
		}
	}
	return false
}

// warnGRPC logs, once per resource version, that field of c has a meaning
// proxyless gRPC cannot give it, and counts it in
// discovery_xds_unsupported_fields_total under field "grpc:FIELD".
func (g *Generator) warnGRPC(c *model.Config, resourceVersion, field, msg string, args ...any) {
	key := c.Key.String() + "@" + resourceVersion + "#grpc:" + field
	if _, done := g.warns.once.LoadOrStore(key, true); done {
		return
	}
	g.log.Warn(msg, append([]any{"kind", string(c.Key.Kind), "resource", c.Key.Namespace + "/" + c.Key.Name}, args...)...)
	g.warns.mu.Lock()
	defer g.warns.mu.Unlock()
	if g.warns.count == nil {
		g.warns.count = map[[2]string]float64{}
	}
	g.warns.count[[2]string{string(c.Key.Kind), "grpc:" + field}]++
	if g.warns.vec != nil {
		g.warns.vec.WithLabelValues(string(c.Key.Kind), "grpc:"+field).Inc()
	}
}
