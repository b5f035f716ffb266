package gen

import (
	"math"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

const eastWest = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
---
`

// meshPod is a pod that runs Istio's sidecar, and its slice.
func meshPod(name, ip string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: default, labels: {app: web, security.istio.io/tlsMode: istio}}\n" +
		"spec: {containers: [{name: app, image: web}]}\nstatus: {podIP: " + ip + ", conditions: [{type: Ready, status: \"True\"}]}\n---\n" +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-" + name + ", namespace: default, labels: {kubernetes.io/service-name: web}}\n" +
		"addressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints:\n- addresses: [" + ip + "]\n  conditions: {ready: true}\n" +
		"  targetRef: {kind: Pod, name: " + name + ", namespace: default}\n---\n"
}

const web = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.0.7
  ports:
  - {name: http, port: 8080}
---
`

func edsAddresses(t *testing.T, cc *ClassConfig, name string) string {
	t.Helper()
	r := cc.Sets[EndpointType].Get(name)
	if r == nil {
		t.Fatalf("no endpoints %s", name)
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := r.Any.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func TestAutoPassthroughEndpointUpdate(t *testing.T) {
	const sni = "outbound_.8080_._.web.default.svc.cluster.local"
	p := routerProxy(t, "istio=eastwestgateway")
	cc, store := classFromYAML(t, p, eastWest+web+meshPod("web-1", "10.1.0.1"))
	if got := edsAddresses(t, cc, sni); got != "10.1.0.1" {
		t.Fatalf("%s has endpoints %s, want 10.1.0.1", sni, got)
	}
	evs, err := worldtest.Decode([]byte(meshPod("web-2", "10.1.0.2")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	next, names := g.UpdateEndpoints(cc, store.World(), []model.NamespacedName{{Namespace: "default", Name: "web"}})
	if !slices.Contains(names, sni) {
		t.Errorf("changed EDS %v, want %s among them", names, sni)
	}
	if got := edsAddresses(t, next, sni); got != "10.1.0.1,10.1.0.2" {
		t.Errorf("after the endpoint update %s has %s, want 10.1.0.1,10.1.0.2", sni, got)
	}
}

func TestAutoPassthroughAddedByGatewayEdit(t *testing.T) {
	const sni = "outbound_.8080_._.web.default.svc.cluster.local"
	p := routerProxy(t, "istio=eastwestgateway")
	cc, store := classFromYAML(t, p, web+meshPod("web-1", "10.1.0.1"))
	if cc.Sets[ClusterType].Get(sni) != nil {
		t.Fatalf("cluster %s without an AUTO_PASSTHROUGH server", sni)
	}
	evs, err := worldtest.Decode([]byte(eastWest))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	next, err := newForTest(quietLog()).Class(store.World(), p, cc)
	if err != nil {
		t.Fatal(err)
	}
	for _, typeURL := range []string{ClusterType, EndpointType} {
		if next.Sets[typeURL].Get(sni) == nil {
			t.Errorf("no %s %s after the Gateway gained an AUTO_PASSTHROUGH server", ShortType(typeURL), sni)
		}
	}
	if l := listener(t, next, "0.0.0.0_15443"); l == nil || len(l.FilterChains) != 1 || l.FilterChains[0].GetFilterChainMatch().GetServerNames()[0] != sni {
		t.Errorf("listener 0.0.0.0_15443 = %v, want one chain for %s", l, sni)
	}
}

func TestAutoPassthroughClustersStayWithTheGateway(t *testing.T) {
	evs, err := worldtest.Decode([]byte(eastWest + web + meshPod("web-1", "10.1.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	// One Generator: classes may share a service's clusters (class_parts.go).
	g := newForTest(quietLog())
	gw, err := g.Class(store.World(), routerProxy(t, "istio=eastwestgateway"), nil)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := g.Class(store.World(), sidecar(t, "default"), nil)
	if err != nil {
		t.Fatal(err)
	}
	const sni = "outbound_.8080_._.web.default.svc.cluster.local"
	if gw.Sets[ClusterType].Get(sni) == nil {
		t.Fatalf("the gateway has no cluster %s", sni)
	}
	for _, typeURL := range []string{ClusterType, EndpointType} {
		for _, n := range sc.Sets[typeURL].Names {
			if strings.HasPrefix(n, "outbound_.") {
				t.Errorf("the sidecar got the gateway's %s %s", ShortType(typeURL), n)
			}
		}
	}
}

// An AUTO_PASSTHROUGH cluster has istiod's defaults of every outbound
// cluster (unlimited circuit breakers, LEAST_REQUEST, panic threshold 0),
// not Envoy's (round robin, 1,024 connections, 3 retries) (conformance
// gw-autopassthrough).
func TestAutoPassthroughClusterDefaults(t *testing.T) {
	const sni = "outbound_.8080_._.web.default.svc.cluster.local"
	cc, _ := classFromYAML(t, routerProxy(t, "istio=eastwestgateway"), eastWest+web+meshPod("web-1", "10.1.0.1"))
	r := cc.Sets[ClusterType].Get(sni)
	if r == nil {
		t.Fatalf("no cluster %s", sni)
	}
	c := &clusterv3.Cluster{}
	if err := r.Any.UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("lb policy %v, want LEAST_REQUEST", c.GetLbPolicy())
	}
	if p := c.GetCommonLbConfig().GetHealthyPanicThreshold(); p == nil || p.GetValue() != 0 {
		t.Errorf("healthy panic threshold %v, want 0", p)
	}
	th := c.GetCircuitBreakers().GetThresholds()
	if len(th) == 0 || th[0].GetMaxConnections().GetValue() != math.MaxUint32 || th[0].GetMaxRetries().GetValue() != math.MaxUint32 {
		t.Errorf("circuit breakers %v, want istiod's unlimited ones", th)
	}
}
