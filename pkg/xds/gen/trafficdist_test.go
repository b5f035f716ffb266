package gen

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A traffic distribution is istiod's forced locality failover: endpoints
// in priorities by network, region and zone (PreferSameZone) relative to
// the proxy, without outlier detection, below a DestinationRule's
// localityLbSetting and above the mesh's.
func TestTrafficDistribution(t *testing.T) {
	const (
		zoneA     = "a=0/1(1) b=1/1(1) c=2/1(1)"
		zoneC     = "a=1/1(1) b=1/1(1) c=0/1(1)"
		unchanged = "a=0/1(1) b=0/1(1) c=0/1(1)"
	)
	for name, tc := range map[string]struct {
		extra        string
		a, c, aOther string
		weighted     bool
	}{
		"no preference: the endpoints as they are": {
			a: unchanged, c: unchanged, aOther: "a=0/1(1) c=0/1(1)",
		},
		"spec.trafficDistribution PreferClose": {
			extra: service("backend", "10.96.0.1", "", "trafficDistribution: PreferClose"),
			a:     zoneA, c: zoneC, aOther: "a=0/1(1) c=0/1(1)", weighted: true,
		},
		"the Service's annotation, any case": {
			extra: service("backend", "10.96.0.1", "{networking.istio.io/traffic-distribution: preferSameZone}", ""),
			a:     zoneA, c: zoneC, aOther: "a=0/1(1) c=0/1(1)", weighted: true,
		},
		"the namespace's annotation, for both services": {
			extra: namespace("{networking.istio.io/traffic-distribution: PreferSameNode}"),
			// PreferSameNode adds subzone and node: here each zone is one
			// node, so the priorities are those of the zones.
			a: "a=0/1(1) b=1/1(1) c=2/1(1)", c: zoneC, aOther: "a=0/1(1) c=1/1(1)", weighted: true,
		},
		"an unknown annotation on the Service is no preference, whatever its namespace says": {
			extra: namespace("{networking.istio.io/traffic-distribution: PreferClose}") +
				service("backend", "10.96.0.1", "{networking.istio.io/traffic-distribution: Nearby}", ""),
			a: unchanged, c: unchanged, aOther: "a=0/1(1) c=1/1(1)",
		},
		"a DestinationRule's localityLbSetting wins (here: off)": {
			extra: service("backend", "10.96.0.1", "", "trafficDistribution: PreferClose") + `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: ns}
spec: {host: backend, trafficPolicy: {loadBalancer: {localityLbSetting: {enabled: false}}}}
`,
			a: unchanged, c: unchanged, aOther: "a=0/1(1) c=0/1(1)",
		},
		"a DestinationRule without localityLbSetting leaves it in force": {
			extra: service("backend", "10.96.0.1", "", "trafficDistribution: PreferClose") + `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: ns}
spec: {host: backend, trafficPolicy: {connectionPool: {tcp: {maxConnections: 10}}}}
`,
			a: zoneA, c: zoneC, aOther: "a=0/1(1) c=0/1(1)", weighted: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := localityStore(t, tc.extra).World()
			g := newForTest(quietLog())
			for _, z := range []struct{ zone, want string }{{"a", tc.a}, {"c", tc.c}} {
				cc, err := g.Class(w, localityClient(t, z.zone, 0), nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := priorities(t, cc, backendEDS); got != z.want {
					t.Errorf("zone %s: backend %s, want %s", z.zone, got, z.want)
				}
				if z.zone == "a" {
					if got := priorities(t, cc, otherEDS); got != tc.aOther {
						t.Errorf("zone a: other %s, want %s", got, tc.aOther)
					}
					c := clusterOf(t, cc, backendEDS)
					if got := c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil; got != tc.weighted {
						t.Errorf("backend cluster locality_weighted_lb_config %v, want %v", got, tc.weighted)
					}
				}
			}
			// Proxies of one zone still share a class; zones apart only
			// where a preference reads them.
			ka, kc := ClassKey(w, localityClient(t, "a", 0)), ClassKey(w, localityClient(t, "c", 0))
			if ka != ClassKey(w, localityClient(t, "a", 1)) {
				t.Error("two clients of zone a in different classes")
			}
			if (tc.a != tc.c) && ka == kc {
				t.Error("zones a and c get different endpoints in one class")
			}
		})
	}
}

// A namespace's annotation changes no Service: the shared parts of its
// services must still be rebuilt, and unready endpoints follow istiod's
// rule (left out under outlierDetection.minHealthPercent, unless a
// traffic distribution needs them to spill over; an unready endpoint that
// says nothing of terminating is terminating to istiod, never sent).
func TestTrafficDistributionNamespaceChangeAndUnready(t *testing.T) {
	store := localityStore(t, `
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: backend-2, namespace: ns, labels: {kubernetes.io/service-name: backend}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.1.0.9], conditions: {ready: false, terminating: false}, nodeName: n-a}
- {addresses: [10.1.0.8], conditions: {ready: false}, nodeName: n-a}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: ns}
spec: {host: backend, trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5, minHealthPercent: 50}}}
`+namespace("{}"))
	g := newForTest(quietLog())
	p := localityClient(t, "a", 0)
	cc, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Outlier detection: failover by locality; the unready endpoint left out.
	if got, want := priorities(t, cc, backendEDS), zoneAReady; got != want {
		t.Errorf("minHealthPercent: backend %s, want %s", got, want)
	}
	if n := unhealthy(t, cc, backendEDS); n != 0 {
		t.Errorf("minHealthPercent: %d unready endpoints sent, want none", n)
	}

	evs, err := worldtest.Decode([]byte(namespace("{networking.istio.io/traffic-distribution: PreferClose}")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	cc, err = g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := unhealthy(t, cc, backendEDS); n != 1 {
		t.Errorf("PreferClose: %d unready endpoints sent, want 1 (marked UNHEALTHY)", n)
	}
	if got, want := priorities(t, cc, backendEDS), "a=0/2(2) b=1/1(1) c=2/1(1)"; got != want {
		t.Errorf("PreferClose: backend %s, want %s", got, want)
	}
}

const zoneAReady = "a=0/1(1) b=1/1(1) c=2/1(1)"

func service(name, ip, annotations, spec string) string {
	if annotations == "" {
		annotations = "{}"
	}
	if spec != "" {
		spec = ", " + spec
	}
	app := name
	return `
---
apiVersion: v1
kind: Service
metadata: {name: ` + name + `, namespace: ns, annotations: ` + annotations + `}
spec: {clusterIP: ` + ip + `, selector: {app: ` + app + `}, ports: [{name: http, port: 80, targetPort: 8080}]` + spec + `}
`
}

func namespace(annotations string) string {
	return `
---
apiVersion: v1
kind: Namespace
metadata: {name: ns, annotations: ` + annotations + `}
`
}

func clusterOf(t *testing.T, cc *ClassConfig, name string) *clusterv3.Cluster {
	t.Helper()
	return classResource(t, cc, ClusterType, name).(*clusterv3.Cluster)
}

func unhealthy(t *testing.T, cc *ClassConfig, name string) int {
	t.Helper()
	n := 0
	for _, le := range classResource(t, cc, EndpointType, name).(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
		for _, e := range le.GetLbEndpoints() {
			if e.GetHealthStatus().String() == "UNHEALTHY" {
				n++
			}
		}
	}
	return n
}
