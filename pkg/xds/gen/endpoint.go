package gen

import (
	"net/netip"
	"sort"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshplane/discovery/pkg/model"
)

// loadAssignment builds the ClusterLoadAssignment of one service port and
// subset: endpoints grouped by locality (every group with a Locality and a
// weight, as grpc-go requires), health from readiness, weight 1 each.
// Locality load balancing is not applied (Scope.clusterEndpoints does).
func loadAssignment(name string, port model.Port, eps *model.ServiceEndpoints, subset map[string]string) *endpointv3.ClusterLoadAssignment {
	cla, _ := buildLoadAssignment(name, port, eps, subset, true, nil)
	return cla
}

// buildLoadAssignment is loadAssignment, with the endpoints behind each
// locality group's LbEndpoints, in order; unready endpoints are left out
// unless unready is set (sendsUnready). An endpoint for which mtlsOff
// (nil: none) reports mTLS disabled on its port has no tlsMode metadata.
func buildLoadAssignment(name string, port model.Port, eps *model.ServiceEndpoints, subset map[string]string, unready bool, mtlsOff func(*model.Endpoint, int32) bool) (*endpointv3.ClusterLoadAssignment, [][]*model.Endpoint) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if eps == nil {
		return cla, nil
	}
	groups := map[model.Locality][]*endpointv3.LbEndpoint{}
	members := map[model.Locality][]*model.Endpoint{}
	weights := map[model.Locality]uint32{}
	for _, ep := range eps.Endpoints {
		if !matchLabels(subset, ep.Labels) || (!ep.Ready && !unready) {
			continue
		}
		target, ok := endpointPort(ep, port)
		if !ok {
			continue
		}
		if _, err := netip.ParseAddr(ep.Address); err != nil {
			// EDS carries addresses; Envoy rejects a host name there (a
			// ServiceEntry endpoint named by DNS, seen by a gateway).
			continue
		}
		health := corev3.HealthStatus_HEALTHY
		if !ep.Ready {
			health = corev3.HealthStatus_UNHEALTHY
		}
		weight := ep.Weight
		if weight == 0 {
			weight = 1
		}
		md := tlsModeMetadata(ep)
		if md != nil && mtlsOff != nil && mtlsOff(ep, target) {
			md = nil
		}
		groups[ep.Locality] = append(groups[ep.Locality], &endpointv3.LbEndpoint{
			HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(ep.Address, target)}},
			HealthStatus:        health,
			LoadBalancingWeight: wrapperspb.UInt32(weight),
			Metadata:            md,
		})
		members[ep.Locality] = append(members[ep.Locality], ep)
		weights[ep.Locality] += weight
	}
	locs := make([]model.Locality, 0, len(groups))
	for l := range groups {
		locs = append(locs, l)
	}
	sort.Slice(locs, func(i, j int) bool {
		a, b := locs[i], locs[j]
		if a.Region != b.Region {
			return a.Region < b.Region
		}
		if a.Zone != b.Zone {
			return a.Zone < b.Zone
		}
		return a.Subzone < b.Subzone
	})
	out := make([][]*model.Endpoint, 0, len(locs))
	for _, l := range locs {
		lbs := groups[l]
		cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.Subzone},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(weights[l]),
		})
		out = append(out, members[l])
	}
	return cla, out
}

// endpointPort finds the port an endpoint serves for a service port: the
// EndpointSlice port of the same name, else a numeric targetPort.
func endpointPort(ep *model.Endpoint, port model.Port) (int32, bool) {
	if p, ok := ep.PortFor(port.Name); ok {
		return p, true
	}
	if n, err := strconv.Atoi(port.TargetPort); err == nil && n > 0 {
		return int32(n), true
	}
	return 0, false
}

func matchLabels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
