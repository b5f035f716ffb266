package envoyfilter

import (
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// ClusterMatches reports whether some CLUSTER patch of ps for ctx may
// change the cluster named name (hosts: the services of an inbound
// cluster), so that a caller decodes only those. The match reads the
// name only.
func ClusterMatches(ctx networking.EnvoyFilter_PatchContext, ps Patches, name string, hosts []string) bool {
	for _, p := range ps[networking.EnvoyFilter_CLUSTER] {
		if (p.Operation == networking.EnvoyFilter_Patch_REMOVE || isMerge(p.Operation)) && p.contextMatch(ctx) && clusterMatch(name, p, hosts) {
			return true
		}
	}
	return false
}

// PatchCluster applies ps's CLUSTER patches for ctx to c in place, as
// istiod's ApplyClusterMerge; false means a REMOVE patch removed it.
// hosts are the service hosts of an inbound cluster (its name has none).
func PatchCluster(ctx networking.EnvoyFilter_PatchContext, ps Patches, c *cluster.Cluster, hosts []string, applied Applied) bool {
	for _, p := range ps[networking.EnvoyFilter_CLUSTER] {
		if !p.contextMatch(ctx) || !clusterMatch(c.GetName(), p, hosts) {
			continue
		}
		switch {
		case p.Operation == networking.EnvoyFilter_Patch_REMOVE:
			applied.note(p)
			return false
		case isMerge(p.Operation):
			if !mergeClusterTransportSocket(c, p.Value.(*cluster.Cluster)) {
				mergeValue(p.Operation, c, p.Value)
			}
			applied.note(p)
		}
	}
	return true
}

// mergeClusterTransportSocket is istiod's mergeTransportSocketCluster:
// a patch with a transport socket merges it into the socket of that name
// (among the transport socket matches when there are some, where no
// socket of the name means nothing is done) or sets it; true means done
// (the rest of the patch is not merged).
func mergeClusterTransportSocket(c, patch *cluster.Cluster) bool {
	pts := patch.GetTransportSocket()
	if pts == nil {
		return false
	}
	ts := c.GetTransportSocket()
	if tsm := c.GetTransportSocketMatches(); len(tsm) > 0 {
		i := slices.IndexFunc(tsm, func(m *cluster.Cluster_TransportSocketMatch) bool {
			return m.GetTransportSocket() != nil && m.GetTransportSocket().GetName() == pts.GetName()
		})
		if i < 0 {
			return true
		}
		ts = tsm[i].GetTransportSocket()
	} else if ts != nil && ts.GetName() != pts.GetName() {
		ts = nil
	}
	if ts == nil {
		c.TransportSocket = proto.Clone(pts).(*cluster.Cluster).TransportSocket
		return true
	}
	if ts.GetTypedConfig() != nil && pts.GetTypedConfig() != nil {
		if merged, err := MergeAny(ts.GetTypedConfig(), pts.GetTypedConfig()); err == nil {
			proto.Reset(ts.GetTypedConfig())
			proto.Merge(ts.GetTypedConfig(), merged)
		}
	}
	return true
}

// AddedClusters are clones of the clusters ps's ADD patches add for ctx
// (ANY adds to SIDECAR_OUTBOUND and GATEWAY only, as in istiod).
func AddedClusters(ctx networking.EnvoyFilter_PatchContext, ps Patches, applied Applied) []*cluster.Cluster {
	var out []*cluster.Cluster
	for _, p := range ps[networking.EnvoyFilter_CLUSTER] {
		if p.Operation == networking.EnvoyFilter_Patch_ADD && addsIn(ctx, p) {
			out = append(out, proto.Clone(p.Value).(*cluster.Cluster))
			applied.note(p)
		}
	}
	return out
}

// clusterMatch is istiod's: by name, else by the service, subset and
// port of an outbound|PORT|SUBSET|HOST or inbound|PORT|SUBSET|HOST name
// (an inbound cluster's service is any of hosts).
func clusterMatch(name string, p *Patch, hosts []string) bool {
	cm := p.Match.GetCluster()
	if cm == nil {
		return true
	}
	if cm.GetName() != "" {
		return cm.GetName() == name
	}
	dir, subset, host, port := parseClusterName(name)
	if cm.GetSubset() != "" && cm.GetSubset() != subset {
		return false
	}
	if cm.GetService() != "" {
		candidates := []string{host}
		if dir == "inbound" && len(hosts) > 0 {
			candidates = hosts
		}
		if !slices.Contains(candidates, cm.GetService()) {
			return false
		}
	}
	return cm.GetPortNumber() == 0 || int(cm.GetPortNumber()) == port
}

// parseClusterName is istiod's ParseSubsetKey: DIRECTION|PORT|SUBSET|HOST,
// or the DNS SRV form outbound_.PORT_.SUBSET_.HOST; what a name of another
// shape lacks is left empty (as far as it parsed).
func parseClusterName(name string) (dir, subset, host string, port int) {
	sep := "|"
	if strings.HasPrefix(name, "outbound_.") || strings.HasPrefix(name, "inbound_.") {
		sep = "_."
	}
	dir, rest, ok := strings.Cut(name, sep)
	if !ok {
		return "", "", "", 0
	}
	p, rest, ok := strings.Cut(rest, sep)
	if !ok {
		return dir, "", "", 0
	}
	port, _ = strconv.Atoi(p)
	ss, rest, ok := strings.Cut(rest, sep)
	if !ok {
		return dir, "", "", port
	}
	if strings.Contains(rest, sep) {
		return dir, ss, "", port
	}
	return dir, ss, rest, port
}
