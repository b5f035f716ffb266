package gen

import (
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Outbound traffic policy, as Istio defines it: with ALLOW_ANY (Istio's
// default) traffic to a destination the proxy does not know passes through
// to where the application sent it; with REGISTRY_ONLY, set by the
// Sidecar that applies to the class or, when it sets none or there is
// none, by the MeshConfig's outboundTrafficPolicy, it goes to
// BlackHoleCluster, and HTTP requests for unknown hosts on a shared port
// get a 502. Gateways route only what their Gateway and VirtualServices
// name: the policy does not concern them.

// sidecarFields are the Sidecar fields generation honours; the others are
// logged and counted as unsupported. Of the ingress fields, some values
// are not supported (sidecarUnsupportedValues): unix domain socket
// endpoints, captureMode NONE, TLS modes other than SIMPLE and MUTUAL.
var sidecarFields = newFieldSet("workloadSelector", "egress.hosts", "outboundTrafficPolicy.mode",
	"ingress.port", "ingress.bind", "ingress.captureMode", "ingress.defaultEndpoint",
	"ingress.tls.mode", "ingress.tls.serverCertificate", "ingress.tls.privateKey", "ingress.tls.caCertificates")

// RegistryOnly reports whether the class's outbound traffic policy is
// REGISTRY_ONLY: its Sidecar's, else the MeshConfig's.
func (sc *Scope) RegistryOnly() bool {
	yes := sc.registryOnlyIn(sc.w)
	sc.w.r.scope(scopeRead{q: qRegistryOnly, ok: yes})
	return yes
}

// registryOnlyIn is RegistryOnly, reading the MeshConfig through w.
func (sc *Scope) registryOnlyIn(w *view) bool {
	if sc.sidecar != nil {
		return sc.sidecar.registryOnly
	}
	return sc.Proxy.Type == model.ProxySidecar && w.Mesh().RegistryOnly()
}

// warnSidecar logs the unsupported fields of the Sidecar that applies to
// the class, once per version, and the Sidecars it shadows: Istio leaves
// the choice among several undefined, here the oldest wins. It also
// reports the DestinationRules the class's rules shadow, which
// outboundClusters reports only when a service's clusters are built (they
// are shared and reused).
func (g *Generator) warnSidecar(sc *Scope) {
	for host := range sc.drShadowed {
		g.warnRules(sc, host)
	}
	if sc.sidecar == nil || sc.sidecar.cfg == nil {
		return
	}
	s, ok := sc.sidecar.cfg.Object.(*networkingv1.Sidecar)
	if !ok {
		return
	}
	g.warn(sc.sidecar.cfg, s.ResourceVersion, &s.Spec, sidecarFields)
	if len(sc.sidecar.shadowed) > 0 {
		var names []string
		for _, c := range sc.sidecar.shadowed {
			names = append(names, c.Key.Namespace+"/"+c.Key.Name)
		}
		g.warnOnce(sc.sidecar.cfg, s.ResourceVersion, "shadows:"+strings.Join(names, ","),
			"several Sidecars apply to the same workloads; the oldest is used", "ignored", names)
	}
}

// registryOnly reads the Sidecar's mode. REGISTRY_ONLY is the enum's zero
// value, so an absent policy must not be read as one: it means the mesh's
// (meshDefault).
func registryOnly(spec *apinetworking.Sidecar, meshDefault bool) bool {
	p := spec.GetOutboundTrafficPolicy()
	if p == nil {
		return meshDefault
	}
	return p.GetMode() == apinetworking.OutboundTrafficPolicy_REGISTRY_ONLY
}

// applyOutboundPolicy sends l's passthrough filter chains to
// BlackHoleCluster when the class is REGISTRY_ONLY.
func (sc *Scope) applyOutboundPolicy(l *listenerv3.Listener) *listenerv3.Listener {
	if !sc.RegistryOnly() {
		return l
	}
	t := sc.outTel()
	block := func(fc *listenerv3.FilterChain) {
		if fc != nil && fc.Name == "PassthroughFilterChain" {
			fc.Filters = t.stack(t.tcpProxy(BlackHoleCluster, BlackHoleCluster))
		}
	}
	for _, fc := range l.FilterChains {
		block(fc)
	}
	block(l.DefaultFilterChain)
	return l
}

// applyRoutePolicy replaces the catch-all virtual host of a port's shared
// RouteConfiguration with one that answers 502 when the class is
// REGISTRY_ONLY.
func (sc *Scope) applyRoutePolicy(rc *routev3.RouteConfiguration) *routev3.RouteConfiguration {
	if !sc.RegistryOnly() {
		return rc
	}
	for i, vh := range rc.VirtualHosts {
		if vh.Name == "allow_any" {
			rc.VirtualHosts[i] = &routev3.VirtualHost{
				Name: "block_all", Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Name:   "block_all",
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 502}},
				}},
			}
		}
	}
	return rc
}
