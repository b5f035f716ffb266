package dataplane

import (
	"fmt"
	"sort"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	typeHTTPProtocolOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	transportSocketMatchKey = "envoy.transport_socket_match"
)

// describeCluster turns a cluster name into what the cluster does for
// this request. Envoy's defaults are filled in, so that a setting left
// unset and one set to Envoy's default describe alike.
func (e *evaluator) describeCluster(name string) Cluster {
	c := e.cfg.Cluster(name)
	if c == nil {
		e.note("missing cluster %s", name)
		return Cluster{Missing: true}
	}
	e.note("cluster %s", name)
	out := Cluster{Discovery: discoveryType(c), LB: lbPolicy(c)}
	out.Settings = clusterSettings(c, e.req.Mode == GRPC, e.tcpProxy)
	out.Endpoints = e.endpoints(c, out.Discovery)
	return out
}

func discoveryType(c *clusterv3.Cluster) string {
	if ct := c.GetClusterType(); ct != nil {
		return "custom:" + ct.GetName()
	}
	return strings.ToLower(c.GetType().String())
}

func lbPolicy(c *clusterv3.Cluster) string {
	if p := c.GetLoadBalancingPolicy(); p != nil && len(p.GetPolicies()) > 0 {
		var names []string
		for _, x := range p.GetPolicies() {
			names = append(names, shortType(x.GetTypedExtensionConfig().GetTypedConfig().GetTypeUrl()))
		}
		return "policy:" + strings.Join(names, ",")
	}
	s := c.GetLbPolicy().String()
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_LEAST_REQUEST:
		n := uint32(2)
		if v := c.GetLeastRequestLbConfig().GetChoiceCount(); v != nil {
			n = v.GetValue()
		}
		s += fmt.Sprintf("(choices=%d)", n)
	case clusterv3.Cluster_RING_HASH:
		min := uint64(1024)
		if v := c.GetRingHashLbConfig().GetMinimumRingSize(); v != nil {
			min = v.GetValue()
		}
		s += fmt.Sprintf("(min_ring=%d)", min)
	}
	if c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil {
		s += "+locality_weighted"
	}
	if p := panicThreshold(c); p != 50 {
		s += fmt.Sprintf("+panic=%g", p)
	}
	return s
}

// panicThreshold is the healthy percentage under which Envoy sends to
// every host, healthy or not (50 unless set).
func panicThreshold(c *clusterv3.Cluster) float64 {
	if v := c.GetCommonLbConfig().GetHealthyPanicThreshold(); v != nil {
		return v.GetValue()
	}
	return 50
}

func shortType(u string) string {
	u = strings.TrimPrefix(u, "type.googleapis.com/")
	if i := strings.LastIndex(u, "."); i > 0 {
		return u[i+1:]
	}
	return u
}

func dur(d *durationpb.Duration, def time.Duration) string {
	if d == nil {
		return def.String()
	}
	return d.AsDuration().String()
}

// clusterSettings lists the connection settings that change behaviour,
// Envoy's defaults filled in. A proxyless gRPC client reads few of them;
// a TCP proxy none of the HTTP ones.
func clusterSettings(c *clusterv3.Cluster, grpc, tcp bool) []string {
	var out []string
	if grpc {
		if v := c.GetCircuitBreakers().GetThresholds(); len(v) > 0 && v[0].GetMaxRequests() != nil {
			out = append(out, fmt.Sprintf("max_requests=%d", v[0].GetMaxRequests().GetValue()))
		}
		return out
	}
	out = append(out, "connect_timeout="+dur(c.GetConnectTimeout(), 5*time.Second))
	if !tcp {
		out = append(out, upstreamProtocol(c)...)
	}
	th := struct{ conns, pending, reqs, retries uint32 }{1024, 1024, 1024, 3}
	for _, t := range c.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue
		}
		if v := t.GetMaxConnections(); v != nil {
			th.conns = v.GetValue()
		}
		if v := t.GetMaxPendingRequests(); v != nil {
			th.pending = v.GetValue()
		}
		if v := t.GetMaxRequests(); v != nil {
			th.reqs = v.GetValue()
		}
		if v := t.GetMaxRetries(); v != nil {
			th.retries = v.GetValue()
		}
	}
	out = append(out, fmt.Sprintf("limits: connections=%d pending=%d requests=%d retries=%d", th.conns, th.pending, th.reqs, th.retries))
	if od := c.GetOutlierDetection(); od != nil {
		out = append(out, fmt.Sprintf("outlier: 5xx=%d gateway=%d local=%d interval=%s ejection=%s max_percent=%d min_health=%d",
			u32(od.GetConsecutive_5Xx(), 5), u32(od.GetConsecutiveGatewayFailure(), 0), u32(od.GetConsecutiveLocalOriginFailure(), 0),
			dur(od.GetInterval(), 10*time.Second), dur(od.GetBaseEjectionTime(), 30*time.Second),
			u32(od.GetMaxEjectionPercent(), 10), u32(od.GetSuccessRateMinimumHosts(), 5)))
	}
	switch c.GetType() {
	case clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
		out = append(out, fmt.Sprintf("dns: family=%s respect_ttl=%v refresh=%s", c.GetDnsLookupFamily(), c.GetRespectDnsTtl(),
			dur(c.GetDnsRefreshRate(), 5*time.Second)))
	case clusterv3.Cluster_ORIGINAL_DST:
		if b := c.GetUpstreamBindConfig(); b != nil {
			out = append(out, "bind="+b.GetSourceAddress().GetAddress())
		}
	}
	if ka := c.GetUpstreamConnectionOptions().GetTcpKeepalive(); ka != nil {
		out = append(out, fmt.Sprintf("tcp_keepalive: probes=%d time=%d interval=%d",
			ka.GetKeepaliveProbes().GetValue(), ka.GetKeepaliveTime().GetValue(), ka.GetKeepaliveInterval().GetValue()))
	}
	return out
}

func u32(v *wrapperspb.UInt32Value, def uint32) uint32 {
	if v == nil {
		return def
	}
	return v.GetValue()
}

// upstreamProtocol reads the HTTP protocol options the cluster sets.
func upstreamProtocol(c *clusterv3.Cluster) []string {
	proto, idle, maxReqs := "http1", "1h0m0s", uint32(0)
	if c.GetHttp2ProtocolOptions() != nil {
		proto = "h2"
	}
	if raw, ok := c.GetTypedExtensionProtocolOptions()[typeHTTPProtocolOptions]; ok {
		var o httpv3.HttpProtocolOptions
		if err := raw.UnmarshalTo(&o); err == nil {
			switch {
			case o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil:
				proto = "h2"
			case o.GetExplicitHttpConfig() != nil:
				proto = "http1"
			case o.GetUseDownstreamProtocolConfig() != nil:
				proto = "downstream"
			case o.GetAutoConfig() != nil:
				proto = "auto"
			}
			if t := o.GetCommonHttpProtocolOptions().GetIdleTimeout(); t != nil {
				idle = t.AsDuration().String()
			}
			maxReqs = o.GetCommonHttpProtocolOptions().GetMaxRequestsPerConnection().GetValue()
		}
	}
	out := []string{"upstream_protocol=" + proto, "idle_timeout=" + idle}
	if maxReqs != 0 {
		out = append(out, fmt.Sprintf("max_requests_per_connection=%d", maxReqs))
	}
	return out
}

// endpoints lists the cluster's hosts with the TLS used to each.
func (e *evaluator) endpoints(c *clusterv3.Cluster, discovery string) []Endpoint {
	if discovery == "original_dst" {
		port := e.req.DstPort
		if o := c.GetOriginalDstLbConfig().GetUpstreamPortOverride(); o != nil {
			port = o.GetValue()
		}
		return []Endpoint{{Address: fmt.Sprintf("original-destination %s:%d", e.req.DstIP, port), Weight: 1,
			Health: "healthy", TLS: upstreamTLS(c.GetTransportSocket())}}
	}
	cla := c.GetLoadAssignment()
	if discovery == "eds" {
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		cla = e.cfg.LoadAssignment(name)
	}
	var out []Endpoint
	for _, le := range cla.GetEndpoints() {
		loc := locality(le.GetLocality())
		lw := le.GetLoadBalancingWeight().GetValue()
		for _, lbe := range le.GetLbEndpoints() {
			ep := Endpoint{Address: endpointAddress(lbe), Locality: loc, Priority: le.GetPriority(), Weight: 1, Health: health(lbe.GetHealthStatus())}
			if w := lbe.GetLoadBalancingWeight(); w != nil {
				ep.Weight = w.GetValue()
			}
			if e.req.Mode == GRPC && lw == 0 {
				// grpc-go picks no host in a locality without weight.
				ep.Health = "unusable(locality weight 0)"
			}
			if c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil {
				ep.Locality += fmt.Sprintf("(weight=%d)", lw)
			}
			ep.TLS = upstreamTLS(socketFor(c, lbe))
			if ep.Health == "unhealthy" && panicThreshold(c) == 0 {
				// With the panic threshold at 0 Envoy never sends to an
				// unhealthy host: it is as good as absent.
				continue
			}
			out = append(out, ep)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func endpointAddress(lbe *endpointv3.LbEndpoint) string {
	a := lbe.GetEndpoint().GetAddress()
	if sa := a.GetSocketAddress(); sa != nil {
		return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
	}
	if ia := a.GetEnvoyInternalAddress(); ia != nil {
		return "internal:" + ia.GetServerListenerName()
	}
	if p := a.GetPipe(); p != nil {
		return "pipe:" + p.GetPath()
	}
	return "?"
}

func locality(l *corev3.Locality) string {
	if l == nil || (l.GetRegion() == "" && l.GetZone() == "" && l.GetSubZone() == "") {
		return ""
	}
	return l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
}

func health(h corev3.HealthStatus) string {
	switch h {
	case corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY:
		return "healthy"
	}
	return strings.ToLower(h.String())
}

// socketFor picks the transport socket Envoy uses to reach an endpoint:
// the first transport_socket_matches entry whose match fields the
// endpoint's envoy.transport_socket_match metadata carries, else the
// cluster's transport socket.
func socketFor(c *clusterv3.Cluster, lbe *endpointv3.LbEndpoint) *corev3.TransportSocket {
	md := lbe.GetMetadata().GetFilterMetadata()[transportSocketMatchKey]
	for _, m := range c.GetTransportSocketMatches() {
		if structSubset(m.GetMatch(), md) {
			return m.GetTransportSocket()
		}
	}
	return c.GetTransportSocket()
}

func structSubset(match, md *structpb.Struct) bool {
	for k, v := range match.GetFields() {
		got, ok := md.GetFields()[k]
		if !ok || got.AsInterface() != v.AsInterface() {
			return false
		}
	}
	return true
}
