package gen

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"

	"github.com/meshplane/discovery/pkg/model"
)

// AuthorizationPolicy on gateways, as Istio enforces it at ingress and
// egress gateways. The policies are those a sidecar of the gateway's
// namespace and labels would get (authzPolicies: the root namespace's and
// the gateway namespace's that select its labels). A gateway class
// carries its namespace and labels (ClassKey), so they are translated once
// per class and put on every chain of the class's listeners:
//
//	HTTP server, HTTPS terminated   HTTP RBAC filters in the connection
//	                                manager, before CORS, fault and router
//	TCP server, TLS terminated      network RBAC filters before tcp_proxy
//	with tcp routes, PASSTHROUGH
//	AUTO_PASSTHROUGH                none: Istio builds these chains without
//	                                authorization ("we do not want any authz
//	                                here"); the client's mTLS goes through to
//	                                the destination's sidecar, which enforces
//	                                its own policies with the client's identity
//
// Filter names and stat prefixes are Istio's: every HTTP RBAC filter is
// envoy.filters.http.rbac, every network one envoy.filters.network.rbac
// with stat prefix "tcp." (tcp.rbac.allowed, tcp.rbac.denied); policies
// are named ns[NS]-policy[NAME]-rule[N]. CUSTOM policies put their RBAC
// and ext_authz filters first, as on sidecars (authz_custom.go).
//
// Client addresses. The connection managers of a gateway use the peer's
// address (use_remote_address) and trust xff_num_trusted_hops proxies in
// front, Istio's numTrustedProxies, as Istio sets them on gateways
// (buildGatewayConnectionManager). remote_ip (remoteIpBlocks, remote.ip)
// is then the client address Envoy derives: the peer when no proxy is
// trusted, else the address the outermost trusted proxy appended to
// X-Forwarded-For; direct_remote_ip (ipBlocks, source.ip) is always the
// peer. On TCP chains both are the peer. Paths are normalized before RBAC
// and routing (normalize_path, Istio's default path normalization BASE),
// so that "/a/../admin" meets a policy on /admin.

// gatewayAuthz is what AuthorizationPolicy adds to a gateway class's
// listeners.
type gatewayAuthz struct {
	inboundAuthz
	// trustedHops is xff_num_trusted_hops (Istio's numTrustedProxies).
	trustedHops uint32
	// tel is the gateway class's telemetry.
	tel *listenerTelemetry
}

// gatewayRBACNames are Istio's names: one HTTP filter name for every
// action (Envoy accepts repeated names), one stat prefix.
var gatewayRBACNames = rbacNames{
	http:       [3]string{RBACAllowFilter, RBACAllowFilter, RBACAllowFilter},
	custom:     RBACAllowFilter,
	statPrefix: func(security.AuthorizationPolicy_Action) string { return "tcp." },
}

// gatewayAuthorization translates the policies that apply to the class's
// gateway.
func (g *Generator) gatewayAuthorization(sc *Scope) gatewayAuthz {
	return gatewayAuthz{
		inboundAuthz: g.authzFilters(sc.w, sc.Proxy, gatewayRBACNames),
		trustedHops:  gatewayTrustedHops(sc.Proxy),
		tel:          sc.outTel(),
	}
}

// gatewayTrustedHops is numTrustedProxies for p's gateway. Istio reads it
// from the proxy's ProxyConfig (gatewayTopology.numTrustedProxies: the
// node metadata PROXY_CONFIG, which the pod's proxy.istio.io/config
// annotation and MeshConfig's defaultConfig feed), 0 when unset. Neither
// is read yet: the node metadata discovery parses (model.ProxyMetadata)
// does not keep PROXY_CONFIG, and a class is shared by the gateways of
// one namespace and label set, so honouring it needs the value parsed
// into the proxy and made part of its class. Until then every gateway
// trusts no proxy in front, Istio's default: X-Forwarded-For never
// decides remote_ip, so it cannot be forged into an allow-list, and
// clients behind a load balancer are seen as the load balancer (allow
// its address, or preserve client addresses at the load balancer).
func gatewayTrustedHops(*model.Proxy) uint32 { return 0 }

// gatewayManager is the connection manager of a gateway HTTP or HTTPS
// chain: RDS for route, the RBAC filters first, client addresses as Istio
// sets them on gateways (paths are normalized by rdsManager, as
// everywhere).
func gatewayManager(statPrefix, route string, a gatewayAuthz) *hcmv3.HttpConnectionManager {
	m := rdsManager(nil, statPrefix, route)
	m.UseRemoteAddress = wrapperspb.Bool(true)
	m.XffNumTrustedHops = a.trustedHops
	return a.tel.manager(m, a.http, faultFilter(), corsFilter())
}

// tcpChain is the filters of a policed TCP chain: the network RBAC
// filters, istio.stats, then f (a tcp_proxy). Istio adds the TCP metadata
// exchange first on ISTIO_MUTUAL TCP servers; discovery does not (its
// gateways terminate ISTIO_MUTUAL with the mesh certificate, and the peer
// exchange runs on the sidecars behind them).
func (a gatewayAuthz) tcpChain(f *listenerv3.Filter) []*listenerv3.Filter {
	out := append(make([]*listenerv3.Filter, 0, len(a.tcp)+2), a.tcp...)
	return append(out, a.tel.stack(f)...)
}
