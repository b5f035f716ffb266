package gen

import (
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Services made from ServiceEntries differ from Kubernetes Services only in
// their outbound clusters, chosen by the entry's resolution as in Istio:
//
//	STATIC           EDS, endpoints from the entry (as for a Kubernetes Service)
//	NONE             ORIGINAL_DST on sidecars: the connection goes where the
//	                 application sent it (as for a headless Kubernetes
//	                 Service); EDS on gateways (see below)
//	DNS              STRICT_DNS, the endpoints' addresses (or the host) resolved by the proxy
//	DNS_ROUND_ROBIN  LOGICAL_DNS, the first endpoint's address (or the host)
//
// Gateways have no original destination to go to: like Istio, they get
// EDS clusters for passthrough services (resolution NONE, headless
// Kubernetes Services), with the services' endpoints. Proxyless gRPC has
// none either: NONE entries get no cluster and no listener there (Istio's
// grpcgen gives every cluster EDS), headless Services EDS clusters, and
// both DNS resolutions become LOGICAL_DNS, the one DNS cluster type
// grpc-go accepts.

// passthrough reports whether connections to svc go to the address the
// application dialled (Istio's Passthrough resolution): a headless
// Kubernetes Service or a ServiceEntry with resolution NONE.
func passthrough(svc *model.Service) bool {
	if svc.Entry != nil {
		return svc.Entry.Resolution == model.ResolutionNone
	}
	return svc.Headless
}

// originalDst reports whether p's clusters of svc are ORIGINAL_DST: only
// sidecars have an original destination (Istio's convertResolution).
func originalDst(p *model.Proxy, svc *model.Service) bool {
	return p.Type == model.ProxySidecar && !p.IsGRPC() && passthrough(svc)
}

// usesEDS reports whether svc's clusters get their endpoints over EDS on
// some proxy: all but DNS resolutions. Passthrough services take EDS on
// gateways and gRPC clients only; on sidecars their clusters are
// ORIGINAL_DST, without endpoints (outboundClusters decides per cluster).
func usesEDS(svc *model.Service) bool {
	return svc.Entry == nil || svc.Entry.Resolution == model.ResolutionStatic || svc.Entry.Resolution == model.ResolutionNone
}

// skipsGRPC reports whether a proxyless gRPC client cannot reach svc.
func skipsGRPC(svc *model.Service) bool {
	return svc.Entry != nil && svc.Entry.Resolution == model.ResolutionNone
}

// serviceCluster builds the outbound cluster of one service port and
// subset for a proxy without an original destination (a gateway, or a
// proxyless gRPC client when envoy is false); sidecars make the clusters
// of passthrough services ORIGINAL_DST (originalDstCluster).
func serviceCluster(svc *model.Service, name string, port model.Port, eps *model.ServiceEndpoints, subset map[string]string, envoy bool) *clusterv3.Cluster {
	c := edsCluster(name, port.Protocol, envoy)
	if usesEDS(svc) {
		return c
	}
	c.EdsClusterConfig = nil
	kind := clusterv3.Cluster_STRICT_DNS
	if svc.Entry.Resolution == model.ResolutionDNSRoundRobin || !envoy {
		kind = clusterv3.Cluster_LOGICAL_DNS
	}
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: kind}
	c.DnsLookupFamily = clusterv3.Cluster_V4_ONLY
	c.LoadAssignment = dnsAssignment(name, svc, port, eps, subset, kind == clusterv3.Cluster_LOGICAL_DNS)
	return c
}

// dnsRefresh gives a DNS cluster Istio's resolution settings: the
// MeshConfig's dnsRefreshRate (60s by default), and the records' own TTL
// when it is shorter (respect_dns_ttl), as istiod's buildCluster does.
func dnsRefresh(c *clusterv3.Cluster, w *view) {
	if t := c.GetType(); t != clusterv3.Cluster_STRICT_DNS && t != clusterv3.Cluster_LOGICAL_DNS {
		return
	}
	rate := w.Mesh().Proto().GetDnsRefreshRate()
	if rate == nil {
		rate = durationpb.New(60 * time.Second)
	}
	c.DnsRefreshRate = durationpb.New(rate.AsDuration())
	c.RespectDnsTtl = true
}

// originalDstCluster is a sidecar's cluster of a passthrough service: the
// connection goes to its original destination (a headless Service's pod
// the application resolved and dialled), with Envoy's original destination
// load balancer.
func originalDstCluster(name string, proto model.Protocol) *clusterv3.Cluster {
	c := edsCluster(name, proto, true)
	c.EdsClusterConfig = nil
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}
	c.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED
	return c
}

// dnsAssignment lists the addresses a DNS cluster resolves: the matching
// endpoints' addresses at their ports, or the host itself at the port's
// target port. A LOGICAL_DNS cluster takes exactly one.
func dnsAssignment(name string, svc *model.Service, port model.Port, eps *model.ServiceEndpoints, subset map[string]string, one bool) *endpointv3.ClusterLoadAssignment {
	var lbs []*endpointv3.LbEndpoint
	if eps != nil {
		for _, ep := range eps.Endpoints {
			target, ok := endpointPort(ep, port)
			if !ok || !matchLabels(subset, ep.Labels) {
				continue
			}
			lb := dnsEndpoint(ep.Address, target)
			// istiod sets every DNS endpoint's weight (1 when unset);
			// discovery sets it only above 1, which Envoy reads alike.
			if ep.Weight > 1 {
				lb.LoadBalancingWeight = wrapperspb.UInt32(ep.Weight)
			}
			lbs = append(lbs, lb)
		}
	}
	if len(lbs) == 0 {
		target, err := strconv.Atoi(port.TargetPort)
		if err != nil || target <= 0 {
			target = int(port.Port)
		}
		lbs = append(lbs, dnsEndpoint(svc.Hostname, int32(target)))
	}
	if one {
		lbs = lbs[:1]
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints:   []*endpointv3.LocalityLbEndpoints{{Locality: &corev3.Locality{}, LbEndpoints: lbs}},
	}
}

func dnsEndpoint(host string, port int32) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: socketAddress(host, port),
	}}}
}

// entryFields and workloadEntryFields are the ServiceEntry and WorkloadEntry
// fields generation honours; others are logged and counted.
var (
	entryFields = newFieldSet("hosts", "addresses", "ports", "location", "resolution", "workloadSelector", "exportTo",
		"endpoints.address", "endpoints.ports", "endpoints.labels", "endpoints.locality", "endpoints.weight", "endpoints.serviceAccount")
	workloadEntryFields = newFieldSet("address", "ports", "labels", "locality", "weight", "serviceAccount")
)

// warnEntry logs the unsupported fields of the ServiceEntry behind svc and
// of the WorkloadEntries its endpoints came from.
func (g *Generator) warnEntry(w *view, svc *model.Service, eps *model.ServiceEndpoints) {
	w = w.unrecorded() // warnings shape no resource
	if svc.Entry == nil {
		return
	}
	if c := w.Config(model.KindServiceEntry, svc.Namespace, svc.Entry.Name); c != nil {
		if se, ok := c.Object.(*networkingv1.ServiceEntry); ok {
			g.warn(c, se.ResourceVersion, &se.Spec, entryFields)
		}
	}
	if eps == nil {
		return
	}
	prefix := string(model.KindWorkloadEntry) + "/" + svc.Namespace + "/"
	for _, ep := range eps.Endpoints {
		name, ok := strings.CutPrefix(ep.Slice, prefix)
		if !ok {
			continue
		}
		if c := w.Config(model.KindWorkloadEntry, svc.Namespace, name); c != nil {
			if we, ok := c.Object.(*networkingv1.WorkloadEntry); ok {
				g.warn(c, we.ResourceVersion, &we.Spec, workloadEntryFields)
			}
		}
	}
}
