package gen

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	securityapi "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func paEvent(ns, name, rv string, mode securityapi.PeerAuthentication_MutualTLS_Mode) model.Event {
	pa := &securityv1.PeerAuthentication{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	pa.Spec.Mtls = &securityapi.PeerAuthentication_MutualTLS{Mode: mode}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindPeerAuthentication, Namespace: ns, Name: name}, Object: pa}
}

// A namespace PeerAuthentication DISABLE turns auto mTLS off for the
// namespace's services in the next generation, cached parts or not.
func TestNamespacePeerAuthenticationReachesClusters(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(4, 2, 1)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	before, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := ClusterName(80, "", "svc-1.ns-1.svc.cluster.local")
	matches := func(cc *ClassConfig) int {
		return len(classResource(t, cc, ClusterType, name).(*clusterv3.Cluster).GetTransportSocketMatches())
	}
	if matches(before) == 0 {
		t.Fatal("auto mTLS is off before any PeerAuthentication")
	}
	if _, err := store.Apply(paEvent("ns-1", "default", "1", securityapi.PeerAuthentication_MutualTLS_DISABLE)); err != nil {
		t.Fatal(err)
	}
	after, err := g.Class(store.World(), p, before)
	if err != nil {
		t.Fatal(err)
	}
	if n := matches(after); n != 0 {
		t.Errorf("after a namespace DISABLE the cluster still has %d auto mTLS matches", n)
	}
}

func TestNamespacePeerAuthenticationFresh(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(append(worldtest.Mesh(4, 2, 1), paEvent("ns-1", "default", "1", securityapi.PeerAuthentication_MutualTLS_DISABLE))...); err != nil {
		t.Fatal(err)
	}
	cc, err := newForTest(quietLog()).Class(store.World(), sidecar(t, "ns-0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := classResource(t, cc, ClusterType, ClusterName(80, "", "svc-1.ns-1.svc.cluster.local")).(*clusterv3.Cluster)
	if len(c.GetTransportSocketMatches()) != 0 {
		t.Error("fresh: auto mTLS on")
	}
}

// An endpoint whose workload policy disables mTLS on its port loses its
// tlsMode metadata (istiod's mtlsChecker); the workload's other ports and
// other workloads keep it.
func TestEndpointMTLSFollowsWorkloadPolicy(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	pa := paEvent("ns-1", "api", "1", securityapi.PeerAuthentication_MutualTLS_PERMISSIVE)
	spec := &pa.Object.(*securityv1.PeerAuthentication).Spec
	spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "api"}}
	spec.PortLevelMtls = map[uint32]*securityapi.PeerAuthentication_MutualTLS{8080: {Mode: securityapi.PeerAuthentication_MutualTLS_DISABLE}}
	if _, err := store.Apply(append(worldtest.Mesh(2, 2, 1), pa)...); err != nil {
		t.Fatal(err)
	}
	off := indexFor(store.World()).pa.mtlsOff("ns-1")
	if off == nil {
		t.Fatal("a port-level DISABLE is not seen")
	}
	api := &model.Endpoint{Address: "10.1.0.1", Ready: true, Labels: map[string]string{"app": "api", TLSModeLabel: "istio"}}
	web := &model.Endpoint{Address: "10.1.0.2", Ready: true, Labels: map[string]string{"app": "web", TLSModeLabel: "istio"}}
	eps := &model.ServiceEndpoints{Endpoints: []*model.Endpoint{api, web}}
	for _, tc := range []struct {
		target   string
		wantMeta map[string]bool
	}{
		{"8080", map[string]bool{"10.1.0.1": false, "10.1.0.2": true}},
		{"9090", map[string]bool{"10.1.0.1": true, "10.1.0.2": true}},
	} {
		cla, _ := buildLoadAssignment("c", model.Port{Name: "http", Port: 80, TargetPort: tc.target}, eps, nil, true, off)
		for _, le := range cla.GetEndpoints() {
			for _, lb := range le.GetLbEndpoints() {
				addr := lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
				if got := lb.GetMetadata() != nil; got != tc.wantMeta[addr] {
					t.Errorf("port %s, endpoint %s: tlsMode metadata %v, want %v", tc.target, addr, got, tc.wantMeta[addr])
				}
			}
		}
	}
	if indexFor(store.World()).pa.mtlsOff("ns-0") == nil {
		t.Error("mtlsOff is nil although some policy disables mTLS")
	}
	empty := model.NewStore(model.StoreOptions{})
	if _, err := empty.Apply(worldtest.Mesh(2, 2, 1)...); err != nil {
		t.Fatal(err)
	}
	if indexFor(empty.World()).pa.mtlsOff("ns-1") != nil {
		t.Error("without a DISABLE anywhere, endpoints must not depend on PeerAuthentication")
	}
}
