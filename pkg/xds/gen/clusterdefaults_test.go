package gen

import (
	"math"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

func TestEnvoyClusterDefaultsAsIstiod(t *testing.T) {
	tests := map[string]struct {
		cluster   *clusterv3.Cluster
		pool      *networking.ConnectionPoolSettings
		lb        *networking.LoadBalancerSettings
		wantLB    clusterv3.Cluster_LbPolicy
		wantConns uint32
		wantReqs  uint32
	}{
		"a service cluster balances by least request without limits": {
			cluster: edsCluster("outbound|80||a.default.svc.cluster.local", model.ProtocolHTTP, true),
			wantLB:  clusterv3.Cluster_LEAST_REQUEST, wantConns: math.MaxUint32, wantReqs: math.MaxUint32,
		},
		"a DestinationRule's limits replace only the limits it sets": {
			cluster: edsCluster("outbound|80||a.default.svc.cluster.local", model.ProtocolHTTP, true),
			pool:    &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 10}},
			lb:      &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN}},
			wantLB:  clusterv3.Cluster_ROUND_ROBIN, wantConns: 10, wantReqs: math.MaxUint32,
		},
		"an original destination cluster keeps CLUSTER_PROVIDED": {
			cluster: originalDstCluster("outbound|80||h.default.svc.cluster.local", model.ProtocolTCP),
			wantLB:  clusterv3.Cluster_CLUSTER_PROVIDED, wantConns: math.MaxUint32, wantReqs: math.MaxUint32,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := tc.cluster
			envoyClusterDefaults(c)
			applyTraffic(c, &networking.TrafficPolicy{ConnectionPool: tc.pool, LoadBalancer: tc.lb})
			if c.GetLbPolicy() != tc.wantLB {
				t.Errorf("load balancer %v, want %v", c.GetLbPolicy(), tc.wantLB)
			}
			if p := c.GetCommonLbConfig().GetHealthyPanicThreshold(); p == nil || p.GetValue() != 0 {
				t.Errorf("panic threshold %v, want 0", p)
			}
			th := c.GetCircuitBreakers().GetThresholds()
			if len(th) != 1 || th[0].GetMaxConnections().GetValue() != tc.wantConns || th[0].GetMaxRequests().GetValue() != tc.wantReqs ||
				th[0].GetMaxRetries().GetValue() != math.MaxUint32 || th[0].GetMaxPendingRequests().GetValue() != math.MaxUint32 {
				t.Errorf("circuit breakers %v, want connections %d, requests %d, the rest unlimited", th, tc.wantConns, tc.wantReqs)
			}
		})
	}
}
