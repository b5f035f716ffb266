package gatewaydeploy

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

func TestInfraOf(t *testing.T) {
	host := "web-istio.shop.svc.cluster.local"
	svc := func(typ corev1.ServiceType, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web-istio", Namespace: "shop"}, Spec: corev1.ServiceSpec{Type: typ},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}},
		}
	}
	dep := func(available int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web-istio", Namespace: "shop"},
			Status:     appsv1.DeploymentStatus{AvailableReplicas: available},
		}
	}
	cases := map[string]struct {
		svc       *corev1.Service
		dep       *appsv1.Deployment
		want      string // status/reason
		addresses string
	}{
		"no Service: AddressNotUsable":                       {nil, dep(1), "False/AddressNotUsable", ""},
		"no Deployment: AddressNotAssigned":                  {svc(corev1.ServiceTypeClusterIP), nil, "False/AddressNotAssigned", "Hostname/" + host + " "},
		"no available replica: AddressNotAssigned":           {svc(corev1.ServiceTypeClusterIP), dep(0), "False/AddressNotAssigned", "Hostname/" + host + " "},
		"a ClusterIP Service with a replica is programmed":   {svc(corev1.ServiceTypeClusterIP), dep(2), "True/Programmed", "Hostname/" + host + " "},
		"a LoadBalancer without an address is not":           {svc(corev1.ServiceTypeLoadBalancer), dep(1), "False/AddressNotAssigned", "Hostname/" + host + " "},
		"a LoadBalancer's hostname and IP are the addresses": {svc(corev1.ServiceTypeLoadBalancer, corev1.LoadBalancerIngress{Hostname: "lb.example.com"}, corev1.LoadBalancerIngress{IP: "203.0.113.9"}), dep(1), "True/Programmed", "Hostname/lb.example.com IPAddress/203.0.113.9 "},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			si := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			di := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if tc.svc != nil {
				_ = si.Add(tc.svc)
			}
			if tc.dep != nil {
				_ = di.Add(tc.dep)
			}
			c := &Controller{opts: DefaultOptions(), services: corelisters.NewServiceLister(si), deployments: appslisters.NewDeploymentLister(di)}
			g := gateway()
			inf := c.infraOf(g, render(t, g, nil))
			if got := string(inf.Programmed.Status) + "/" + inf.Programmed.Reason; got != tc.want {
				t.Errorf("Programmed %s (%s), want %s", got, inf.Programmed.Message, tc.want)
			}
			if got := addrString(inf.Addresses); got != tc.addresses {
				t.Errorf("addresses %q, want %q", got, tc.addresses)
			}
		})
	}
}

func TestStatusOnly(t *testing.T) {
	g := gateway(func(g *gw.Gateway) { g.ResourceVersion, g.Generation = "1", 1 })
	status := g.DeepCopy()
	status.ResourceVersion = "2"
	spec := status.DeepCopy()
	spec.Generation = 2
	label := status.DeepCopy()
	label.Labels["new"] = "x"
	if !statusOnly(g, status) || statusOnly(g, spec) || statusOnly(g, label) || statusOnly(g, g.DeepCopy()) {
		t.Error("only a new version at the same generation, labels and annotations is a status-only update (a resync is not)")
	}
}
