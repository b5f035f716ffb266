package gen

import (
	"net/netip"
	"sort"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/meshplane/discovery/pkg/model"
)

// Headless services on sidecars, as Istio serves them: a service without
// addresses whose connections go where the application dialled them (a
// Kubernetes Service with clusterIP None, a ServiceEntry with resolution
// NONE) has nothing to match an opaque TCP connection by but the endpoint
// it is made to. So each TCP port (not HTTP, TLS or UDP) gets, on the
// port's outbound listener, a filter chain per endpoint address serving
// the port: prefix_ranges ADDRESS/32 (or /128), tcp_proxy as for a service
// address (the host's tcp routes, tested against the endpoint's address,
// else outbound|PORT||HOST). A port without endpoints gets no chain. A
// sniffed port's chain per endpoint has the HTTP chain beside it, with the
// route HOST:PORT (listener_sniff.go).
//
// Istio builds a listener per endpoint (ADDRESS_PORT) instead; here the
// chains sit on the port's listener like every other service address's,
// which Envoy selects the same way. Unlike Istio, the chain for the
// proxy's own address is kept: listeners are built per class, not per pod.
//
// Because the chains follow the endpoints, an endpoint change of such a
// service changes the listener: EndpointsShapeListeners tells the push
// path to send LDS as well as EDS.

// EndpointsShapeListeners reports whether the endpoints of svc decide a
// sidecar's listeners (a filter chain per endpoint address), so that an
// endpoint change must re-send LDS, not only EDS.
func EndpointsShapeListeners(svc *model.Service) bool {
	for _, p := range svc.Ports {
		if endpointChained(svc, p) {
			return true
		}
	}
	return false
}

// endpointChained reports whether port p of svc has a filter chain per
// endpoint address.
func endpointChained(svc *model.Service, p model.Port) bool {
	if len(svc.Addresses) > 0 || p.Protocol.IsHTTP() || isTLS(p.Protocol) || p.Protocol == model.ProtocolUDP {
		return false
	}
	return svc.Headless || (svc.Entry != nil && svc.Entry.Resolution == model.ResolutionNone)
}

// endpointChains builds the chains of one headless TCP port, endpoint
// addresses ascending; an address an earlier chain claimed is left out.
func (g *Generator) endpointChains(sc *Scope, svc *model.Service, p model.Port, claims chainClaims) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	for _, a := range endpointAddresses(sc.w.Endpoints(svc.Namespace, svc.Name), p) {
		match := &listenerv3.FilterChainMatch{PrefixRanges: addressRanges([]string{a})}
		if !claims.claim(match) {
			continue
		}
		// The host's tcp routes see the endpoint's address as the
		// service's, for their destinationSubnets.
		one := *svc
		one.Addresses = []string{a}
		out = append(out, &listenerv3.FilterChain{
			Name:             RouteName(svc.Hostname, p.Port) + "|" + a,
			FilterChainMatch: match,
			Filters:          g.meshTCPFilters(sc, &one, p.Port),
		})
	}
	return out
}

// endpointAddresses lists the IP addresses of the endpoints that serve
// port p (hostnames, which a ServiceEntry may list, cannot be matched),
// sorted and without repeats.
func endpointAddresses(eps *model.ServiceEndpoints, p model.Port) []string {
	if eps == nil {
		return nil
	}
	seen := map[netip.Addr]bool{}
	var addrs []netip.Addr
	for _, ep := range eps.Endpoints {
		ip, err := netip.ParseAddr(ep.Address)
		if err != nil || seen[ip] {
			continue
		}
		if _, ok := endpointPort(ep, p); !ok {
			continue
		}
		seen[ip] = true
		addrs = append(addrs, ip)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}
