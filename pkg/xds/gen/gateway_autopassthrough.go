package gen

import (
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// AUTO_PASSTHROUGH, as Istio does it (a multi-network east-west gateway):
// a sidecar of another network connects with Istio mTLS and sends, as SNI,
// the name Istio gives the cluster it wants, outbound_.PORT_.SUBSET_.HOST
// (IstioSNI). The gateway does not terminate that TLS; it picks a filter
// chain by the SNI and hands the bytes to its own cluster of that name,
// whose endpoints are those of outbound|PORT|SUBSET|HOST that run a
// sidecar (Istio's EDS keeps only mTLS endpoints for these clusters, so
// nothing reaches a workload that would not check the client).
//
// Chains: one per port (not UDP) and subset (the default one, then the
// DestinationRule's) of each visible service inside the mesh whose host a
// server's hosts match (their namespace part is ignored, as in Istio),
// server_names = the SNI, application_protocols = Istio's mTLS ALPNs.
// Clusters: the same names, built as the outbound ones with the
// DestinationRule's load balancing, pool and outlier settings but no TLS
// origination. They belong to the service's unit (class.go) so that an
// endpoint change regenerates their endpoints. Istio builds them for every
// service once a Gateway has an AUTO_PASSTHROUGH server; here only for
// the services a server's hosts match, the ones a chain can reach.
// ServiceEntry hosts with resolution NONE are left out: their cluster is
// ORIGINAL_DST, which on a gateway would send the bytes back to itself
// (Istio falls back to EDS there).

// istioMTLSALPNs are the ALPN values Istio's sidecars offer with mTLS.
var istioMTLSALPNs = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}

// autoPassthroughChains builds the filter chains of a port's
// AUTO_PASSTHROUGH servers.
func autoPassthroughChains(sc *Scope, servers []gatewayServer, claims chainClaims) []*listenerv3.FilterChain {
	if len(servers) == 0 {
		return nil
	}
	var patterns []string
	for _, s := range servers {
		patterns = append(patterns, sniPatterns(s.hosts)...)
	}
	var out []*listenerv3.FilterChain
	for _, svc := range sc.Services {
		if !autoReachable(svc) || !matchesAny(patterns, svc.Hostname) {
			continue
		}
		for _, port := range svc.Ports {
			if port.Protocol == model.ProtocolUDP {
				continue
			}
			for _, ss := range sc.subsets(svc.Hostname) {
				name := IstioSNI(ClusterName(port.Port, ss.Name, svc.Hostname))
				match := &listenerv3.FilterChainMatch{ServerNames: []string{name}, ApplicationProtocols: istioMTLSALPNs}
				if !claims.claim(match) {
					continue
				}
				t := sc.outTel()
				out = append(out, &listenerv3.FilterChain{Name: name, FilterChainMatch: match, Filters: t.stack(t.tcpProxy(name, name))})
			}
		}
	}
	return out
}

// autoReachable reports whether AUTO_PASSTHROUGH reaches svc: it must run
// inside the mesh (not a MESH_EXTERNAL ServiceEntry host), and have
// endpoints a gateway can pick (not resolution NONE, whose cluster sends
// connections to their original destination: on a gateway, itself).
func autoReachable(svc *model.Service) bool {
	if svc.Entry == nil {
		return true
	}
	return !svc.Entry.External && svc.Entry.Resolution != model.ResolutionNone
}

// sniPatterns are a server's hosts without their namespace part.
func sniPatterns(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if _, name, ok := strings.Cut(h, "/"); ok {
			h = name
		}
		out = append(out, h)
	}
	return out
}

func matchesAny(patterns []string, host string) bool {
	for _, p := range patterns {
		if wildcardMatch(p, host) {
			return true
		}
	}
	return false
}

// autoPassthroughPatterns returns the host patterns of the AUTO_PASSTHROUGH
// servers of the Gateways that select the class's proxy; nil for proxies
// other than gateways.
func autoPassthroughPatterns(sc *Scope) []string {
	if sc.Proxy.Type != model.ProxyRouter {
		return nil
	}
	var out []string
	for _, c := range sc.w.ConfigsWhere(model.KindGateway, selectsGateway(sc.Proxy)) {
		gw := c.Object.(*networkingv1.Gateway)
		for _, s := range gw.Spec.GetServers() {
			if k, _ := classifyServer(s); k == serverAutoPassthrough {
				out = append(out, sniPatterns(s.GetHosts())...)
			}
		}
	}
	return out
}

// wantsSNIClusters reports whether the class needs svc's AUTO_PASSTHROUGH
// clusters.
func wantsSNIClusters(sc *Scope, svc *model.Service) bool {
	return autoReachable(svc) && matchesAny(autoPassthroughPatterns(sc), svc.Hostname)
}

// sniClusters adds to u the AUTO_PASSTHROUGH clusters of svc and their
// endpoints, when the class needs them. u's slices may be shared with
// other classes (class_parts.go): they are copied, never appended to in place.
func (g *Generator) sniClusters(sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, u *unit) {
	if !wantsSNIClusters(sc, svc) {
		return
	}
	u.clusters, u.edsRefs = slices.Clip(u.clusters), slices.Clip(u.edsRefs)
	dr := sc.DestinationRule(svc.Hostname)
	for _, port := range svc.Ports {
		if port.Protocol == model.ProtocolUDP {
			continue
		}
		for _, ss := range sc.subsets(svc.Hostname) {
			name := IstioSNI(ClusterName(port.Port, ss.Name, svc.Hostname))
			c := serviceCluster(svc, name, port, eps, ss.Labels, true)
			dnsRefresh(c, sc.w)
			c.ConnectTimeout = connectTimeout(sc.w)
			// istiod's defaults, as on every outbound cluster (before,
			// Envoy's: round robin, 1,024 connections, 3 retries).
			envoyClusterDefaults(c)
			var tp *networking.TrafficPolicy
			if dr != nil {
				tp = policy(&dr.Spec, ss.Name, port.Port)
				applyPolicy(c, tp, true)
				// No TLS origination: the bytes are the client's mTLS,
				// passed through.
				c.TransportSocket = nil
			}
			applyLocalityCluster(c, sc.w.Mesh().LocalityLB(), tp, sc.w.TrafficDistribution(svc))
			g.addTo(sc, &u.clusters, name, ClusterType, c)
		}
	}
	n := len(u.endpoints)
	g.sniEndpoints(sc, svc, eps, &u.endpoints)
	for _, r := range u.endpoints[n:] {
		u.edsRefs = append(u.edsRefs, r.Name)
	}
}

// sniEndpoints adds to dst the endpoints of svc's AUTO_PASSTHROUGH
// clusters (the EDS-only update of a unit), on a copy of *dst.
func (g *Generator) sniEndpoints(sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, dst *[]*Resource) {
	if !usesEDS(svc) || !wantsSNIClusters(sc, svc) {
		return
	}
	*dst = slices.Clip(*dst)
	for _, port := range svc.Ports {
		if port.Protocol == model.ProtocolUDP {
			continue
		}
		for _, ss := range sc.subsets(svc.Hostname) {
			name := IstioSNI(ClusterName(port.Port, ss.Name, svc.Hostname))
			g.addTo(sc, dst, name, EndpointType, sc.clusterEndpoints(svc, name, port, meshEndpoints(eps), ss))
		}
	}
}

// meshEndpoints keeps the endpoints whose workloads run Istio's sidecar
// (label security.istio.io/tlsMode=istio).
func meshEndpoints(eps *model.ServiceEndpoints) *model.ServiceEndpoints {
	if eps == nil {
		return nil
	}
	out := &model.ServiceEndpoints{Service: eps.Service}
	for _, ep := range eps.Endpoints {
		if ep.Labels[TLSModeLabel] == "istio" {
			out.Endpoints = append(out.Endpoints, ep)
		}
	}
	return out
}
