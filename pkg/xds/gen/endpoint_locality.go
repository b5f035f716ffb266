package gen

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Locality load balancing, as istiod applies it (pilot/pkg/networking/
// core/loadbalancer, pilot/pkg/xds/endpoints):
//
//   - The setting in force for a cluster is its DestinationRule's
//     trafficPolicy.loadBalancer.localityLbSetting (port-level and subset
//     policies override it as a whole loadBalancer), else the MeshConfig's
//     localityLbSetting (Istio's default: enabled, nothing else); enabled
//     false at the level that decides turns it off.
//   - distribute: the first entry whose from matches the proxy's locality
//     sets the localities' weights (an endpoint group matching no to gets
//     no endpoints); proxies matching no from get the endpoints as they are.
//   - otherwise, only when the cluster's policy has outlierDetection
//     (without it Envoy never sees a priority fail): failoverPriority
//     splits the endpoints into priorities by how many of the listed labels
//     they share with the proxy, and failover (or, without
//     failoverPriority, always) gives priorities by region, zone and
//     subzone relative to the proxy, a failover entry naming the region
//     the proxy's region falls back to.
//   - The cluster gets locality_weighted_lb_config when distribute is set,
//     or when failover or failoverPriority is set and outlierDetection too.
//
// The proxy's locality is istiod's (setTopologyLabels): its topology
// labels, else its locality label, else its Node's, else the xDS node's;
// its labels for failoverPriority are its workload's with the topology
// labels Istio adds (region, zone, subzone, cluster, node, network), and
// so are the endpoints'.
//
// What a class of proxies is sent must not depend on anything its key
// does not name: the parts of a proxy that locality load balancing reads
// (lbDeps) enter the class key, and the shared clusters and endpoints of
// a service (class_parts.go), only where some setting in force reads them.
//
// A service's traffic distribution (model.TrafficDistribution: its
// spec.trafficDistribution or Istio's annotation, else its namespace's)
// stands where no DestinationRule sets localityLbSetting, before the
// mesh's, as istiod's GetEffectiveLbSetting: failoverPriority by network,
// region and zone (PreferSameZone), or those and subzone and node
// (PreferSameNode), and failover forced, outlier detection or not; its
// unready endpoints are always sent (Envoy's health is how it spills
// over), where a policy with outlierDetection.minHealthPercent would
// otherwise drop them.
//
// Not applied: zoneAwareLbSetting (reported where set), and the inline
// endpoints of DNS clusters, which carry no locality.

// proxyTopology is what locality load balancing reads of a proxy.
type proxyTopology struct {
	loc model.Locality
	// labels are the workload's own labels (the node metadata's LABELS).
	labels                 map[string]string
	cluster, node, network string
}

// topologyOf resolves p's locality in w as istiod's setTopologyLabels
// does: the workload's locality (its locality label, else its Node's
// topology labels) is added to its labels as topology labels; the
// proxy's locality is then read from those labels when any is present,
// else it is the xDS node's.
func topologyOf(w *view, p *model.Proxy) proxyTopology {
	t := proxyTopology{labels: p.Labels(), cluster: p.Metadata.ClusterID, node: p.Metadata.NodeName, network: p.Metadata.Network}
	nodeName := p.Metadata.NodeName
	if pod := w.Pod(p.Namespace, p.PodName); pod != nil && pod.Node != "" {
		nodeName = pod.Node
	}
	var wl model.Locality
	if v := model.LocalityLabel(t.labels); v != "" {
		wl = model.ParseLocality(v)
	} else if n := w.Node(nodeName); n != nil {
		wl = n.Locality
	}
	found := false
	part := func(fromWorkload string, label string) string {
		if fromWorkload != "" {
			found = true
			return fromWorkload
		}
		v, ok := t.labels[label]
		found = found || ok
		return v
	}
	loc := model.Locality{
		Region:  part(wl.Region, model.LabelTopologyRegion),
		Zone:    part(wl.Zone, model.LabelTopologyZone),
		Subzone: part(wl.Subzone, model.LabelTopologySubzone),
	}
	if !found {
		loc = p.NodeLocality
	}
	t.loc = loc
	return t
}

// label is the proxy's value of a label as istiod sees its labels:
// the topology labels it adds win when it has a value for them.
func (t *proxyTopology) label(k string) string {
	if v := augmented(k, t.loc, t.cluster, t.node); v != "" {
		return v
	}
	if v := t.labels[k]; v != "" || k != model.LabelTopologyNetwork {
		return v
	}
	return t.network
}

// hasLabels reports whether the proxy has any label as istiod sees them
// (failoverPriority does nothing for a proxy without).
func (t *proxyTopology) hasLabels() bool {
	return len(t.labels) > 0 || !t.loc.IsZero() || t.cluster != "" || t.node != "" || t.network != ""
}

// augmented is the value of a topology label Istio adds to the labels of
// a workload in loc, of cluster, on node (Istio's AugmentLabels); "" when
// it adds none.
func augmented(k string, loc model.Locality, cluster, node string) string {
	switch k {
	case model.LabelTopologyRegion:
		return loc.Region
	case model.LabelTopologyZone:
		return loc.Zone
	case model.LabelTopologySubzone:
		return loc.Subzone
	case model.LabelTopologyCluster:
		return cluster
	case model.LabelHostname:
		return node
	}
	return ""
}

// endpointLabel is an endpoint's value of a label as istiod sees it: its
// workload's labels with the topology labels of its locality, cluster
// and node.
func endpointLabel(ep *model.Endpoint, k string) string {
	if v := augmented(k, ep.Locality, model.ClusterID, ep.Node); v != "" {
		return v
	}
	return ep.Labels[k]
}

// localityLB is the locality load balancing setting in force for a
// cluster whose traffic policy is tp (nil for none) of a service whose
// traffic distribution is td: the rule's, else td's, else the mesh's; nil
// when off. force says failover applies without outlier detection (td's).
func localityLB(mesh *networking.LocalityLoadBalancerSetting, tp *networking.TrafficPolicy, td model.TrafficDistribution) (lb *networking.LocalityLoadBalancerSetting, force bool) {
	lb = tp.GetLoadBalancer().GetLocalityLbSetting()
	if lb == nil {
		if lb = trafficDistributionLB(td); lb != nil {
			return lb, true
		}
		lb = mesh
	}
	if lb == nil || (lb.GetEnabled() != nil && !lb.GetEnabled().GetValue()) {
		return nil, false
	}
	return lb, false
}

// The settings istiod gives a traffic distribution (GetEffectiveLbSetting).
var (
	preferSameZoneLB = &networking.LocalityLoadBalancerSetting{
		Enabled:          wrapperspb.Bool(true),
		FailoverPriority: []string{model.LabelTopologyNetwork, model.LabelTopologyRegion, model.LabelTopologyZone},
	}
	preferSameNodeLB = &networking.LocalityLoadBalancerSetting{
		Enabled: wrapperspb.Bool(true),
		FailoverPriority: []string{
			model.LabelTopologyNetwork, model.LabelTopologyRegion, model.LabelTopologyZone,
			model.LabelTopologySubzone, model.LabelHostname,
		},
	}
)

func trafficDistributionLB(td model.TrafficDistribution) *networking.LocalityLoadBalancerSetting {
	switch td {
	case model.TrafficDistributionPreferSameZone:
		return preferSameZoneLB
	case model.TrafficDistributionPreferSameNode:
		return preferSameNodeLB
	}
	return nil
}

// sendsUnready reports whether a cluster of a service whose traffic
// distribution is td, under policy tp, gets its unready endpoints (marked
// UNHEALTHY), as istiod's supportsUnhealthyEndpoints: always, unless
// outlier detection sets a minHealthPercent (Envoy's panic mode would then
// send traffic to them), which a traffic distribution overrides.
func sendsUnready(tp *networking.TrafficPolicy, td model.TrafficDistribution) bool {
	return trafficDistributionLB(td) != nil || tp.GetOutlierDetection().GetMinHealthPercent() <= 0
}

// applyLocalityCluster sets what locality load balancing changes of an
// Envoy cluster itself (istiod's LocalityLBSettings.ApplyToCluster):
// locality_weighted_lb_config when weights are distributed, or when
// failover applies (the cluster has outlier detection) with failover or
// failoverPriority set.
func applyLocalityCluster(c *clusterv3.Cluster, mesh *networking.LocalityLoadBalancerSetting, tp *networking.TrafficPolicy, td model.TrafficDistribution) {
	lb, force := localityLB(mesh, tp, td)
	if lb == nil {
		return
	}
	failover := c.GetOutlierDetection() != nil || force
	if force {
		// Its unready endpoints are sent (sendsUnready): the panic
		// threshold is off, whatever minHealthPercent says, as istiod's
		// applyOutlierDetection for a service that forces them.
		if c.CommonLbConfig == nil {
			c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
		}
		c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: 0}
	}
	if len(lb.GetDistribute()) == 0 && !(failover && (len(lb.GetFailover()) > 0 || len(lb.GetFailoverPriority()) > 0)) {
		return
	}
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.LocalityConfigSpecifier = &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
		LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
	}
}

// clusterEndpoints is the load assignment of the cluster name (port and
// subset ss of svc) for the class of sc: the endpoints grouped by
// locality, with the priorities and weights locality load balancing gives
// them for the class's proxies.
func (sc *Scope) clusterEndpoints(svc *model.Service, name string, port model.Port, eps *model.ServiceEndpoints, ss Subset) *endpointv3.ClusterLoadAssignment {
	tp := sc.clusterPolicy(svc.Hostname, ss.Name, port.Port)
	td := sc.w.TrafficDistribution(svc)
	cla, groups := buildLoadAssignment(name, port, eps, ss.Labels, sendsUnready(tp, td), sc.w.paMTLSOff(svc.Namespace))
	if len(cla.Endpoints) == 0 {
		return cla
	}
	lb, force := localityLB(sc.w.Mesh().LocalityLB(), tp, td)
	if lb == nil {
		return cla
	}
	top := sc.topology()
	applyLocalityLB(cla, groups, &top, lb, tp.GetOutlierDetection() != nil || force)
	return cla
}

// applyLocalityLB is istiod's ApplyLocalityLoadBalancer: groups holds
// the endpoints behind each of cla's locality groups, in order.
func applyLocalityLB(cla *endpointv3.ClusterLoadAssignment, groups [][]*model.Endpoint, t *proxyTopology, lb *networking.LocalityLoadBalancerSetting, failover bool) {
	switch {
	case len(lb.GetDistribute()) > 0:
		applyLocalityWeights(t.loc, cla, lb.GetDistribute())
	case !failover:
	case len(lb.GetFailoverPriority()) > 0:
		applyFailoverPriorities(cla, groups, t, lb.GetFailoverPriority())
		if len(lb.GetFailover()) > 0 {
			applyLocalityFailover(t.loc, cla, lb.GetFailover())
		}
	default:
		applyLocalityFailover(t.loc, cla, lb.GetFailover())
	}
}

// localityMatch is Istio's LocalityMatch: a rule's region/zone/subzone,
// "*" matching anything, a missing zone or subzone too.
func localityMatch(l model.Locality, rule string) bool {
	r := strings.Split(rule, "/")
	part := func(i int) string {
		if i < len(r) {
			return r[i]
		}
		return ""
	}
	region, zone, subzone := part(0), part(1), part(2)
	return (region == "*" || l.Region == region) &&
		(zone == "*" || zone == "" || l.Zone == zone) &&
		(subzone == "*" || subzone == "" || l.Subzone == subzone)
}

func claLocality(le *endpointv3.LocalityLbEndpoints) model.Locality {
	l := le.GetLocality()
	return model.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}
}

// applyLocalityWeights is istiod's: the first distribute entry whose from
// matches the proxy divides each to weight among the groups it matches,
// in proportion to their weights, and empties the groups no to matches.
// (Istio visits the to entries in map order; here they go in order of
// their keys, which only matters when several match one group.)
func applyLocalityWeights(loc model.Locality, cla *endpointv3.ClusterLoadAssignment, distribute []*networking.LocalityLoadBalancerSetting_Distribute) {
	for _, d := range distribute {
		if d == nil || !localityMatch(loc, d.GetFrom()) {
			continue
		}
		unmatched := make(map[int]bool, len(cla.Endpoints))
		for i := range cla.Endpoints {
			unmatched[i] = true
		}
		tos := make([]string, 0, len(d.GetTo()))
		for to := range d.GetTo() {
			tos = append(tos, to)
		}
		sort.Strings(tos)
		for _, to := range tos {
			weight := d.GetTo()[to]
			orig := map[int]uint32{}
			var total uint32
			for i, le := range cla.Endpoints {
				if !unmatched[i] || !localityMatch(claLocality(le), to) {
					continue
				}
				delete(unmatched, i)
				orig[i] = 1
				if w := le.GetLoadBalancingWeight(); w != nil {
					orig[i] = w.GetValue()
				}
				total += orig[i]
			}
			for i, ow := range orig {
				if w := float64(ow*weight) / float64(total); w > 0 {
					cla.Endpoints[i].LoadBalancingWeight = wrapperspb.UInt32(uint32(math.Ceil(w)))
				}
			}
		}
		for i := range unmatched {
			cla.Endpoints[i].LbEndpoints = nil
		}
		return
	}
}

// lbPriority is Istio's LbPriority: 0 for the proxy's own subzone, 1 its
// zone, 2 its region, 3 elsewhere.
func lbPriority(proxy, ep model.Locality) int {
	switch {
	case proxy.Region != ep.Region:
		return 3
	case proxy.Zone != ep.Zone:
		return 2
	case proxy.Subzone != ep.Subzone:
		return 1
	}
	return 0
}

// applyLocalityFailover is istiod's: priorities by locality relative to
// the proxy (a region other than the failover target of the proxy's
// region goes last), composed with those failoverPriority gave, then
// renumbered from 0 without gaps.
func applyLocalityFailover(loc model.Locality, cla *endpointv3.ClusterLoadAssignment, failover []*networking.LocalityLoadBalancerSetting_Failover) {
	byPriority := map[int][]int{}
	for i, le := range cla.Endpoints {
		epLoc := claLocality(le)
		p := lbPriority(loc, epLoc)
		if p == 3 {
			for _, f := range failover {
				if f.GetFrom() == loc.Region {
					if le.GetLocality() == nil || epLoc.Region != f.GetTo() {
						p = 4
					}
					break
				}
			}
		}
		p += int(le.GetPriority()) * 5
		le.Priority = uint32(p)
		byPriority[p] = append(byPriority[p], i)
	}
	renumber(cla.Endpoints, byPriority)
}

// renumber makes the priorities of byPriority (priority: indexes of
// groups) contiguous from 0, in order.
func renumber(les []*endpointv3.LocalityLbEndpoints, byPriority map[int][]int) {
	ps := make([]int, 0, len(byPriority))
	for p := range byPriority {
		ps = append(ps, p)
	}
	sort.Ints(ps)
	for i, p := range ps {
		if i == p {
			continue
		}
		for _, idx := range byPriority[p] {
			les[idx].Priority = uint32(i)
		}
	}
}

// applyFailoverPriorities is istiod's: each locality group is split by
// how many of the failoverPriority labels (in order; "key=value" compares
// the endpoints' key with value instead of the proxy's) its endpoints
// share with the proxy, a leading topology.istio.io/network label never
// counting against an endpoint; priorities are then renumbered.
func applyFailoverPriorities(cla *endpointv3.ClusterLoadAssignment, groups [][]*model.Endpoint, t *proxyTopology, priorities []string) {
	if !t.hasLabels() || len(groups) == 0 {
		return
	}
	keys, overrides := priorityLabels(priorities)
	lowest := len(priorities)
	network := lowest > 0 && priorities[0] == model.LabelTopologyNetwork
	var out []*endpointv3.LocalityLbEndpoints
	for gi, le := range cla.Endpoints {
		byPriority := map[int][]int{}
		for i, ep := range groups[gi] {
			p, adjust := 0, 0
			for j, k := range keys {
				want, ok := overrides[k]
				if !ok {
					want = t.label(k)
				}
				if want != endpointLabel(ep, k) {
					if j == 0 && network {
						adjust = lowest
						continue
					}
					p = lowest - j
					break
				}
			}
			p += adjust
			byPriority[p] = append(byPriority[p], i)
		}
		ps := make([]int, 0, len(byPriority))
		for p := range byPriority {
			ps = append(ps, p)
		}
		sort.Ints(ps)
		for _, p := range ps {
			split := &endpointv3.LocalityLbEndpoints{Locality: le.GetLocality(), Priority: uint32(p)}
			var weight uint32
			for _, i := range byPriority[p] {
				split.LbEndpoints = append(split.LbEndpoints, le.LbEndpoints[i])
				weight += le.LbEndpoints[i].GetLoadBalancingWeight().GetValue()
			}
			split.LoadBalancingWeight = wrapperspb.UInt32(weight)
			out = append(out, split)
		}
	}
	byPriority := map[int][]int{}
	for i, le := range out {
		byPriority[int(le.Priority)] = append(byPriority[int(le.Priority)], i)
	}
	renumber(out, byPriority)
	cla.Endpoints = out
}

// priorityLabels splits failoverPriority entries into label keys, in
// order, and the values given with "key=value".
func priorityLabels(priorities []string) ([]string, map[string]string) {
	keys := make([]string, 0, len(priorities))
	overrides := map[string]string{}
	for _, p := range priorities {
		parts := strings.Split(p, "=")
		keys = append(keys, parts[0])
		if len(parts) == 2 {
			overrides[parts[0]] = parts[1]
		}
	}
	return keys, overrides
}

// lbDeps is what locality load balancing reads of a proxy for some set
// of clusters: its whole locality (failover), which from of each
// distribute list it matches, and its values of failoverPriority labels.
// Proxies that agree on these get the same endpoints for those clusters.
type lbDeps struct {
	locality   bool
	distribute [][]*networking.LocalityLoadBalancerSetting_Distribute
	// labels are failoverPriority entries ("key" or "key=value"),
	// sorted, each once.
	labels []string
}

func (d *lbDeps) empty() bool {
	return d == nil || (!d.locality && len(d.distribute) == 0 && len(d.labels) == 0)
}

// add records what a cluster whose setting in force is lb (nil: off)
// reads, failover saying whether it has outlier detection.
func (d *lbDeps) add(lb *networking.LocalityLoadBalancerSetting, failover bool) {
	switch {
	case lb == nil:
	case len(lb.GetDistribute()) > 0:
		d.addDistribute(lb.GetDistribute())
	case !failover:
	case len(lb.GetFailoverPriority()) > 0:
		d.addLabels(lb.GetFailoverPriority())
		if len(lb.GetFailover()) > 0 {
			d.locality = true
		}
	default:
		d.locality = true
	}
}

func (d *lbDeps) addDistribute(dist []*networking.LocalityLoadBalancerSetting_Distribute) {
	for _, have := range d.distribute {
		if slices.Equal(have, dist) {
			return
		}
	}
	d.distribute = append(d.distribute, dist)
}

func (d *lbDeps) addLabels(ls []string) {
	for _, l := range ls {
		if i, found := slices.BinarySearch(d.labels, l); !found {
			d.labels = slices.Insert(d.labels, i, l)
		}
	}
}

func (d *lbDeps) merge(o *lbDeps) {
	if o == nil {
		return
	}
	d.locality = d.locality || o.locality
	for _, dist := range o.distribute {
		d.addDistribute(dist)
	}
	d.addLabels(o.labels)
}

// view names what d reads of t: "" when d reads nothing.
func (d *lbDeps) view(t *proxyTopology) string {
	if d.empty() {
		return ""
	}
	var b strings.Builder
	if d.locality {
		b.WriteString("l:" + t.loc.Region + "/" + t.loc.Zone + "/" + t.loc.Subzone + ";")
	}
	for i, dist := range d.distribute {
		m := -1
		for j, e := range dist {
			if e != nil && localityMatch(t.loc, e.GetFrom()) {
				m = j
				break
			}
		}
		b.WriteString("d" + strconv.Itoa(i) + ":" + strconv.Itoa(m) + ";")
	}
	if len(d.labels) > 0 {
		if !t.hasLabels() {
			b.WriteString("nolabels;")
		}
		for _, l := range d.labels {
			if strings.Count(l, "=") == 1 {
				continue // compares the endpoints with a fixed value
			}
			k, _, _ := strings.Cut(l, "=")
			b.WriteString(k + "=" + t.label(k) + ";")
		}
	}
	return b.String()
}

// ruleLBDeps is what the clusters of one DestinationRule read of a proxy
// under mesh (the MeshConfig's setting): every subset and port-level
// policy is tried, the mesh's setting where none sets one.
func ruleLBDeps(mesh *networking.LocalityLoadBalancerSetting, dr *networking.DestinationRule, td model.TrafficDistribution) *lbDeps {
	d := &lbDeps{}
	subsets := []string{""}
	for _, s := range dr.GetSubsets() {
		subsets = append(subsets, s.GetName())
	}
	for _, ss := range subsets {
		// Port 0 stands for every port no portLevelSettings names.
		ports := map[int32]bool{0: true}
		for _, tp := range []*networking.TrafficPolicy{dr.GetTrafficPolicy(), subsetPolicy(dr, ss)} {
			for _, pl := range tp.GetPortLevelSettings() {
				ports[int32(pl.GetPort().GetNumber())] = true
			}
		}
		for port := range ports {
			tp := policy(dr, ss, port)
			lb, force := localityLB(mesh, tp, td)
			d.add(lb, tp.GetOutlierDetection() != nil || force)
		}
	}
	return d
}

func subsetPolicy(dr *networking.DestinationRule, name string) *networking.TrafficPolicy {
	if name == "" {
		return nil
	}
	for _, s := range dr.GetSubsets() {
		if s.GetName() == name {
			return s.GetTrafficPolicy()
		}
	}
	return nil
}

// lbIndex is, for one World, what locality load balancing reads of
// proxies: per DestinationRule that reads something, and per proxy
// namespace (the rules that may apply there, the mesh's setting, and the
// traffic distributions services have).
type lbIndex struct {
	meshLB *networking.LocalityLoadBalancerSetting
	mesh   *lbDeps
	// rules are the DestinationRules that read something, by key.
	rules  []lbRule
	byRule map[*model.Config]*lbDeps
	// td is what the traffic distributions in use read (nil for none).
	td *lbDeps
	mu sync.Mutex
	// byRuleTD is a rule's under a traffic distribution (where the rule
	// sets no localityLbSetting, the distribution's stands).
	byRuleTD map[ruleTD]*lbDeps
	byNS     map[string]*lbDeps
}

func drcObject(drc *model.Config) (*networkingv1.DestinationRule, bool) {
	if drc == nil {
		return nil, false
	}
	dr, ok := drc.Object.(*networkingv1.DestinationRule)
	return dr, ok
}

type ruleTD struct {
	drc *model.Config
	td  model.TrafficDistribution
}

type lbRule struct {
	ns       string
	selects  bool
	exportTo []string
	deps     *lbDeps
}

func newLBIndex(w *view) *lbIndex {
	mesh := w.Mesh().LocalityLB()
	ix := &lbIndex{meshLB: mesh, mesh: &lbDeps{}, byRule: map[*model.Config]*lbDeps{}, byNS: map[string]*lbDeps{}}
	meshLB, _ := localityLB(mesh, nil, model.TrafficDistributionAny)
	ix.mesh.add(meshLB, false)
	if zone, node := w.TrafficDistributionsInUse(); zone || node {
		ix.td = &lbDeps{}
		if zone {
			ix.td.add(preferSameZoneLB, true)
		}
		if node {
			ix.td.add(preferSameNodeLB, true)
		}
	}
	// Configs are sorted: the views number distribute lists in this order.
	for _, c := range w.Configs(model.KindDestinationRule) {
		dr, ok := c.Object.(*networkingv1.DestinationRule)
		if !ok {
			continue
		}
		d := ruleLBDeps(mesh, &dr.Spec, model.TrafficDistributionAny)
		if d.empty() {
			continue
		}
		ix.byRule[c] = d
		ix.rules = append(ix.rules, lbRule{ns: c.Key.Namespace, selects: dr.Spec.GetWorkloadSelector() != nil, exportTo: drExportTo(w, &dr.Spec), deps: d})
	}
	return ix
}

// forService is what the clusters of a service whose traffic
// distribution is td read of a proxy, drc being the DestinationRule in
// force for them (nil for none).
func (ix *lbIndex) forService(drc *model.Config, td model.TrafficDistribution) *lbDeps {
	if trafficDistributionLB(td) != nil {
		return ix.forRuleTD(drc, td)
	}
	if drc == nil {
		return ix.mesh
	}
	// ruleLBDeps counted the mesh's setting where the rule leaves it.
	return ix.byRule[drc]
}

func (ix *lbIndex) forRuleTD(drc *model.Config, td model.TrafficDistribution) *lbDeps {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	k := ruleTD{drc, td}
	if d, ok := ix.byRuleTD[k]; ok {
		return d
	}
	d := &lbDeps{}
	if dr, ok := drcObject(drc); ok {
		d = ruleLBDeps(ix.meshLB, &dr.Spec, td)
	} else {
		d.add(trafficDistributionLB(td), true)
	}
	if ix.byRuleTD == nil {
		ix.byRuleTD = map[ruleTD]*lbDeps{}
	}
	ix.byRuleTD[k] = d
	return d
}

// forNamespace is what the clusters a proxy of ns may see read of it: the
// mesh's setting and every rule that may apply there (a rule that
// selects workloads counts for all of its namespace: more than needed,
// never less).
func (ix *lbIndex) forNamespace(ns string) *lbDeps {
	if len(ix.rules) == 0 && ix.td == nil {
		return ix.mesh
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if d, ok := ix.byNS[ns]; ok {
		return d
	}
	d := &lbDeps{}
	d.merge(ix.mesh)
	// Any service's traffic distribution, visible here or not: more
	// than needed, never less.
	d.merge(ix.td)
	for _, r := range ix.rules {
		if (r.selects && r.ns == ns) || (!r.selects && exportedTo(r.exportTo, r.ns, ns)) {
			d.merge(r.deps)
		}
	}
	ix.byNS[ns] = d
	return d
}

// outboundEndpoints builds the endpoints of svc's EDS clusters edsRefs
// (outboundClusters' names, in its order) for the class of sc: those of a
// service whose locality load balancing reads the class's proxies.
func (g *Generator) outboundEndpoints(sc *Scope, svc *model.Service, eps *model.ServiceEndpoints, edsRefs []string) []*Resource {
	want := make(map[string]bool, len(edsRefs))
	for _, n := range edsRefs {
		want[n] = true
	}
	var out []*Resource
	for _, port := range svc.Ports {
		for _, ss := range sc.subsets(svc.Hostname) {
			if name := ClusterName(port.Port, ss.Name, svc.Hostname); want[name] {
				g.addTo(sc, &out, name, EndpointType, sc.clusterEndpoints(svc, name, port, eps, ss))
			}
		}
	}
	return out
}
