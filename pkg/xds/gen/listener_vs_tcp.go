package gen

import (
	"net/netip"
	"sort"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// VirtualService tcp and tls routes, as far as they go here:
//
//	sidecar, TCP port       the first tcp route whose match holds (port, gateways,
//	                        destinationSubnets containing a service address) picks
//	                        the cluster(s) of the service address's tcp_proxy;
//	                        default outbound|PORT||HOST
//	sidecar, TLS/HTTPS port a filter chain per tls route match: server_names from
//	                        sniHosts, prefix_ranges from destinationSubnets or else
//	                        the service's addresses; without a matching route, the
//	                        service addresses (or, for a host without one, its
//	                        hostname as SNI) go to the default cluster
//	gateway, PASSTHROUGH    a filter chain per tls route match of the bound
//	                        VirtualServices, server_names = the sniHosts the
//	                        server's hosts allow (gateway_tls.go)
//
// A sidecar goes through the tcp and tls routes of every VirtualService
// naming the host or a wildcard covering it, in precedence order
// (scope_vs.go), as Istio does. A match holds for a sidecar only when its
// sourceLabels are among the proxy's pod labels and its sourceNamespace
// is the proxy's (Istio's matchTCP and matchTLS); at gateways those two
// are not applied yet. Gateway TCP servers and AUTO_PASSTHROUGH are
// reported and left out.

// l4Match is what L4MatchAttributes and TLSMatchAttributes share.
type l4Match interface {
	GetPort() uint32
	GetGateways() []string
	GetDestinationSubnets() []string
	GetSourceLabels() map[string]string
	GetSourceNamespace() string
}

// l4Holds reports whether m applies to port and gateway ("mesh" for
// sidecars); a nil m (a route without matches) always does.
func l4Holds(m l4Match, ns string, port int32, gateway string) bool {
	if m == nil {
		return true
	}
	if m.GetPort() != 0 && int32(m.GetPort()) != port {
		return false
	}
	return len(m.GetGateways()) == 0 || matchesGateway(m.GetGateways(), ns, gateway)
}

// l4HoldsFor is l4HoldsFor for the class's proxies, recording the
// namespace question the match's sourceNamespace asks.
func (sc *Scope) l4HoldsFor(m l4Match, ns string, port int32) bool {
	if m != nil {
		sc.readSource(m)
	}
	return l4HoldsFor(m, ns, port, sc.Proxy)
}

// l4HoldsFor is l4Holds for a sidecar p: the match's sourceLabels and
// sourceNamespace must select p too.
func l4HoldsFor(m l4Match, ns string, port int32, p *model.Proxy) bool {
	if m == nil {
		return true
	}
	return l4Holds(m, ns, port, "mesh") && sourceHolds(m.GetSourceLabels(), m.GetSourceNamespace(), p)
}

// subnetsContain reports whether one of subnets (CIDRs or addresses)
// contains one of addrs; no subnets contain everything.
func subnetsContain(subnets, addrs []string) bool {
	if len(subnets) == 0 {
		return true
	}
	for _, s := range subnets {
		pfx, ok := parseSubnet(s)
		if !ok {
			continue
		}
		for _, a := range addrs {
			if ip, err := netip.ParseAddr(a); err == nil && pfx.Contains(ip) {
				return true
			}
		}
	}
	return false
}

func parseSubnet(s string) (netip.Prefix, bool) {
	if pfx, err := netip.ParsePrefix(s); err == nil {
		return pfx.Masked(), true
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(ip, ip.BitLen()), true
	}
	return netip.Prefix{}, false
}

// tcpRouteFilter is the tcp_proxy of one tcp or tls route: one cluster or
// weighted clusters; nil when the route has no destination with weight.
// host and port resolve destinations without a port, as for http routes.
func tcpRouteFilter(sc *Scope, ns string, rds []*networking.RouteDestination, host string, port int32) *listenerv3.Filter {
	var wcs []*tcpv3.TcpProxy_WeightedCluster_ClusterWeight
	for _, d := range rds {
		dst := d.GetDestination()
		if dst == nil {
			continue
		}
		dhost, dport := destination(sc, ns, dst, host, port)
		w := d.GetWeight()
		if len(rds) == 1 && w == 0 {
			w = 100
		}
		if w <= 0 {
			continue
		}
		wcs = append(wcs, &tcpv3.TcpProxy_WeightedCluster_ClusterWeight{Name: ClusterName(dport, dst.GetSubset(), dhost), Weight: uint32(w)})
	}
	switch len(wcs) {
	case 0:
		return nil
	case 1:
		return sc.outTel().tcpProxy(wcs[0].Name, wcs[0].Name)
	}
	return &listenerv3.Filter{
		Name: "envoy.filters.network.tcp_proxy",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&tcpv3.TcpProxy{
			StatPrefix: wcs[0].Name,
			ClusterSpecifier: &tcpv3.TcpProxy_WeightedClusters{WeightedClusters: &tcpv3.TcpProxy_WeightedCluster{
				Clusters: wcs,
			}},
			AccessLog: sc.outTel().logs(),
		})},
	}
}

// meshL4VirtualServices are the VirtualServices whose tcp and tls routes
// a sidecar goes through for host, their unsupported fields reported.
func (g *Generator) meshL4VirtualServices(sc *Scope, host string) []*model.Config {
	vss := sc.l4VirtualServices(host)
	for _, c := range vss {
		vs := c.Object.(*networkingv1.VirtualService)
		g.warn(c, vs.ResourceVersion, &vs.Spec, vsFields)
	}
	return vss
}

// meshTCPFilters are the filters of a sidecar's chain for a TCP service
// port: istio.stats, then the tcp_proxy of the first tcp route of the
// host's VirtualServices that holds, else to the port's default cluster.
func (g *Generator) meshTCPFilters(sc *Scope, svc *model.Service, port int32) []*listenerv3.Filter {
	t := sc.outTel()
	for _, c := range g.meshL4VirtualServices(sc, svc.Hostname) {
		vs := c.Object.(*networkingv1.VirtualService)
		for _, r := range vs.Spec.GetTcp() {
			if !sc.tcpRouteHolds(r, c.Key.Namespace, port, svc.Addresses) {
				continue
			}
			if f := tcpRouteFilter(sc, c.Key.Namespace, r.GetRoute(), svc.Hostname, port); f != nil {
				return t.stack(f)
			}
		}
	}
	cluster := ClusterName(port, "", svc.Hostname)
	return t.stack(t.tcpProxy(cluster, cluster))
}

// tcpRouteHolds is tcpRouteHolds for the class's proxies, recording the
// namespace questions the matches' sourceNamespace ask.
func (sc *Scope) tcpRouteHolds(r *networking.TCPRoute, ns string, port int32, addrs []string) bool {
	for _, m := range r.GetMatch() {
		sc.readSource(m)
	}
	return tcpRouteHolds(r, ns, port, addrs, sc.Proxy)
}

func tcpRouteHolds(r *networking.TCPRoute, ns string, port int32, addrs []string, p *model.Proxy) bool {
	if len(r.GetMatch()) == 0 {
		return true
	}
	for _, m := range r.GetMatch() {
		if l4HoldsFor(m, ns, port, p) && subnetsContain(m.GetDestinationSubnets(), addrs) {
			return true
		}
	}
	return false
}

// chainClaims keeps the filter chain matches of one listener unique, as
// Envoy requires: every (destination prefix, server name) pair belongs to
// the first chain that claims it.
type chainClaims map[string]bool

// claim removes from m the prefixes whose pairs are claimed already and
// claims the rest; it reports whether m still matches anything.
func (cc chainClaims) claim(m *listenerv3.FilterChainMatch) bool {
	names := m.GetServerNames()
	if len(names) == 0 {
		names = []string{""}
	}
	pfxs := []string{""}
	if len(m.GetPrefixRanges()) > 0 {
		pfxs = pfxs[:0]
		for _, r := range m.GetPrefixRanges() {
			pfxs = append(pfxs, r.GetAddressPrefix()+"/"+itoa(int32(r.GetPrefixLen().GetValue())))
		}
	}
	var keep []*corev3.CidrRange
	kept := false
	for i, p := range pfxs {
		free := true
		for _, n := range names {
			free = free && !cc[p+"|"+n]
		}
		if !free {
			continue
		}
		for _, n := range names {
			cc[p+"|"+n] = true
		}
		kept = true
		if p != "" {
			keep = append(keep, m.PrefixRanges[i])
		}
	}
	if len(m.GetPrefixRanges()) > 0 {
		m.PrefixRanges = keep
	}
	return kept
}

// addressRanges turns addresses or CIDRs into prefix ranges, skipping
// what does not parse, sorted and without repeats.
func addressRanges(addrs []string) []*corev3.CidrRange {
	var pfxs []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for _, a := range addrs {
		if pfx, ok := parseSubnet(a); ok && !seen[pfx] {
			seen[pfx] = true
			pfxs = append(pfxs, pfx)
		}
	}
	sort.Slice(pfxs, func(i, j int) bool { return pfxs[i].String() < pfxs[j].String() })
	out := make([]*corev3.CidrRange, 0, len(pfxs))
	for _, p := range pfxs {
		out = append(out, &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))})
	}
	return out
}

// isTLS reports whether a port carries TLS the sidecar does not terminate.
func isTLS(p model.Protocol) bool { return p == model.ProtocolHTTPS || p == model.ProtocolTLS }

// meshTLSChains builds a sidecar's filter chains for a TLS service port:
// one per tls route match of the host's VirtualService, else one for the
// service's addresses (or its hostname as SNI when it has none) to the
// default cluster. Chains whose matches are all claimed are left out.
func (g *Generator) meshTLSChains(sc *Scope, svc *model.Service, port int32, claims chainClaims) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	base := RouteName(svc.Hostname, port)
	for i, c := range g.meshL4VirtualServices(sc, svc.Hostname) {
		out = append(out, meshTLSRouteChains(sc, c, i > 0, svc, port, claims)...)
	}
	if len(out) > 0 {
		return out
	}
	match := &listenerv3.FilterChainMatch{PrefixRanges: addressRanges(svc.Addresses)}
	if len(match.PrefixRanges) == 0 {
		match.ServerNames = []string{svc.Hostname}
	}
	if !claims.claim(match) {
		return nil
	}
	cluster := ClusterName(port, "", svc.Hostname)
	t := sc.outTel()
	return []*listenerv3.FilterChain{{Name: base, FilterChainMatch: match, Filters: t.stack(t.tcpProxy(cluster, cluster))}}
}

// meshTLSRouteChains are the filter chains of one VirtualService's tls
// routes for a sidecar's TLS service port; the chains of a VirtualService
// after the first carry its name ("|ns/name"), to stay unique.
func meshTLSRouteChains(sc *Scope, c *model.Config, later bool, svc *model.Service, port int32, claims chainClaims) []*listenerv3.FilterChain {
	vs := c.Object.(*networkingv1.VirtualService)
	base := RouteName(svc.Hostname, port)
	if later {
		base += "|" + c.Key.Namespace + "/" + c.Key.Name
	}
	var out []*listenerv3.FilterChain
	for i, r := range vs.Spec.GetTls() {
		f := tcpRouteFilter(sc, c.Key.Namespace, r.GetRoute(), svc.Hostname, port)
		if f == nil {
			continue
		}
		for j, m := range r.GetMatch() {
			if !sc.l4HoldsFor(m, c.Key.Namespace, port) || len(m.GetSniHosts()) == 0 {
				continue
			}
			subnets := m.GetDestinationSubnets()
			if len(subnets) == 0 {
				subnets = svc.Addresses
			}
			match := &listenerv3.FilterChainMatch{ServerNames: sortedCopy(m.GetSniHosts()), PrefixRanges: addressRanges(subnets)}
			if claims.claim(match) {
				out = append(out, &listenerv3.FilterChain{
					Name: base + "|tls." + itoa(int32(i)) + "." + itoa(int32(j)), FilterChainMatch: match, Filters: []*listenerv3.Filter{f},
				})
			}
		}
	}
	return out
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// hasL4Routes reports whether a VirtualService for one of svcs (by
// hostname) routes tcp or tls traffic on sidecars: their port listener
// then depends on VirtualServices as well as services.
func hasL4Routes(sc *Scope, svcs []*model.Service) bool {
	for _, svc := range svcs {
		for _, c := range sc.l4VirtualServices(svc.Hostname) {
			vs := c.Object.(*networkingv1.VirtualService)
			if len(vs.Spec.GetTcp()) > 0 || len(vs.Spec.GetTls()) > 0 {
				return true
			}
		}
	}
	return false
}

// usesSNI reports whether a listener's chains match on server names.
func usesSNI(l *listenerv3.Listener) bool {
	for _, fc := range l.FilterChains {
		if len(fc.GetFilterChainMatch().GetServerNames()) > 0 {
			return true
		}
	}
	return false
}
