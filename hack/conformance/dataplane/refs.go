package dataplane

import (
	"sort"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// RouteNames lists the RDS names the listeners' connection managers
// (filter chains and API listeners) subscribe to, sorted.
func RouteNames(ls []*listenerv3.Listener) []string {
	set := map[string]bool{}
	add := func(h *hcmv3.HttpConnectionManager) {
		if n := h.GetRds().GetRouteConfigName(); n != "" {
			set[n] = true
		}
	}
	for _, l := range ls {
		if h := apiListenerHCM(l); h != nil {
			add(h)
		}
		for _, fc := range allChains(l) {
			if h := chainHCM(fc); h != nil {
				add(h)
			}
		}
	}
	return sortedSet(set)
}

// ClusterNames lists the clusters the routes send to or mirror to, sorted.
func ClusterNames(rs []*routev3.RouteConfiguration) []string {
	set := map[string]bool{}
	for _, rc := range rs {
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				a := r.GetRoute()
				if a == nil {
					continue
				}
				if c := a.GetCluster(); c != "" {
					set[c] = true
				}
				for _, w := range a.GetWeightedClusters().GetClusters() {
					set[w.GetName()] = true
				}
				for _, m := range a.GetRequestMirrorPolicies() {
					set[m.GetCluster()] = true
				}
			}
		}
	}
	return sortedSet(set)
}

func allChains(l *listenerv3.Listener) []*listenerv3.FilterChain {
	out := append([]*listenerv3.FilterChain(nil), l.GetFilterChains()...)
	if d := l.GetDefaultFilterChain(); d != nil {
		out = append(out, d)
	}
	return out
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
