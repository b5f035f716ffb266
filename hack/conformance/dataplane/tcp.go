package dataplane

import (
	"fmt"
	"time"

	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
)

// tcp runs a TCP proxy: the connection goes to its cluster (or weighted
// clusters); an sni_cluster filter before it sends it to the cluster the
// SNI names.
func (e *evaluator) tcp(t *tcpv3.TcpProxy) Decision {
	d := Decision{Outcome: Forward}
	e.tcpProxy = true
	conn := fmt.Sprintf("tcp idle_timeout=%s max_connect_attempts=%d", dur(t.GetIdleTimeout(), time.Hour), u32(t.GetMaxConnectAttempts(), 1))
	if tc := t.GetTunnelingConfig(); tc != nil {
		conn += " tunnel=" + tc.GetHostname()
	}
	d.Connection = []string{conn}
	type target struct {
		name   string
		weight uint32
	}
	var targets []target
	switch cs := t.GetClusterSpecifier().(type) {
	case *tcpv3.TcpProxy_Cluster:
		targets = append(targets, target{cs.Cluster, 1})
	case *tcpv3.TcpProxy_WeightedClusters:
		for _, w := range cs.WeightedClusters.GetClusters() {
			if w.GetWeight() > 0 {
				targets = append(targets, target{w.GetName(), w.GetWeight()})
			}
		}
	}
	if e.sniCluster && e.sni != "" {
		targets = []target{{e.sni, 1}}
	}
	var total uint64
	for _, x := range targets {
		total += uint64(x.weight)
	}
	for _, x := range targets {
		d.Upstreams = append(d.Upstreams, Upstream{Weight: uint32(uint64(x.weight) * 1000000 / total), Cluster: e.describeCluster(x.name)})
	}
	if len(d.Upstreams) == 0 {
		return e.reset("tcp_proxy without cluster")
	}
	if reason := unreachable(d.Upstreams); reason != "" {
		r := e.reset(reason)
		r.Connection = d.Connection
		return r
	}
	return e.done(d)
}
