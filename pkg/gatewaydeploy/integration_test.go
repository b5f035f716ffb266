package gatewaydeploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	gw "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
	"github.com/meshplane/discovery/pkg/status"
)

// TestIntegrationGatewayDeployment runs the controller and the status
// writer (the Auditor's leader) against a real API server with the
// Gateway API's CRDs. A Gateway of class istio gets its ServiceAccount,
// Deployment and Service (server-side applied by istio.io/gateway-controller,
// owned by the Gateway); its status.addresses is the Service's hostname and
// Programmed stays False (AddressNotAssigned) while no replica is
// available (there is no kubelet); once the Deployment reports an
// available replica it is still False for the LoadBalancer's pending
// address, and True with the LoadBalancer's IP as the address once the
// Service has one. A Gateway of another class and one in manual mode get
// nothing. Deleting the Gateway deletes its objects (the test environment
// has no garbage collector: the controller's own cleanup does it).
func TestIntegrationGatewayDeployment(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallGatewayAPICRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config))
	gc := gatewayclient.NewForConfigOrDie(env.Config)
	kc := env.Client
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}))
	for name, ctrl := range map[string]string{"istio": gatewayapi.ControllerName, "other": "example.com/other"} {
		must(gc.GatewayV1().GatewayClasses().Create(ctx, &gw.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       gw.GatewayClassSpec{ControllerName: gw.GatewayController(ctrl)},
		}, metav1.CreateOptions{}))
	}
	hostType := gw.HostnameAddressType
	newGateway := func(name, class string, addrs []gw.GatewaySpecAddress) *gw.Gateway {
		return &gw.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"team": "a"}},
			Spec: gw.GatewaySpec{
				GatewayClassName: gw.ObjectName(class), Addresses: addrs,
				Listeners: []gw.Listener{{Name: "http", Port: 80, Protocol: gw.HTTPProtocolType}},
			},
		}
	}
	web, err := gc.GatewayV1().Gateways("shop").Create(ctx, newGateway("web", "istio", nil), metav1.CreateOptions{})
	must(web, err)
	must(gc.GatewayV1().Gateways("shop").Create(ctx, newGateway("foreign", "other", nil), metav1.CreateOptions{}))
	must(gc.GatewayV1().Gateways("shop").Create(ctx, newGateway("manual", "istio",
		[]gw.GatewaySpecAddress{{Type: &hostType, Value: "ingress"}}), metav1.CreateOptions{}))
	// parametersRef: an overlay that exists, and one that does not.
	must(kc.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "tuned-params", Namespace: "shop"},
		Data:       map[string]string{"deployment": "spec:\n  replicas: 2\n"},
	}, metav1.CreateOptions{}))
	withParams := func(name, cm string) *gw.Gateway {
		g := newGateway(name, "istio", nil)
		g.Annotations = map[string]string{ServiceTypeAnnotation: "ClusterIP"}
		g.Spec.Infrastructure = &gw.GatewayInfrastructure{ParametersRef: &gw.LocalParametersReference{Group: "", Kind: "ConfigMap", Name: cm}}
		return g
	}
	must(gc.GatewayV1().Gateways("shop").Create(ctx, withParams("tuned", "tuned-params"), metav1.CreateOptions{}))
	must(gc.GatewayV1().Gateways("shop").Create(ctx, withParams("broken", "missing"), metav1.CreateOptions{}))

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a, err := status.NewAuditor(status.DefaultOptions(), store.World, status.NewKubeWriter(dynamic.NewForConfigOrDie(env.Config), kc), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.CRDPoll = 100 * time.Millisecond
	ctrl, err := New(opts, kc, gc, newPods(t), a.GatewayInfraChanged, log, m)
	if err != nil {
		t.Fatal(err)
	}
	a.SetGatewayInfra(ctrl)
	store.Subscribe(a.Observe)
	background(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	background(t, a.Start)
	background(t, a.Lead)
	background(t, ctrl.Start)

	var sa *corev1.ServiceAccount
	var dep *appsv1.Deployment
	var svc *corev1.Service
	poll(t, "the ServiceAccount, Deployment and Service web-istio", func() (bool, string) {
		var err1, err2, err3 error
		sa, err1 = kc.CoreV1().ServiceAccounts("shop").Get(ctx, "web-istio", metav1.GetOptions{})
		dep, err2 = kc.AppsV1().Deployments("shop").Get(ctx, "web-istio", metav1.GetOptions{})
		svc, err3 = kc.CoreV1().Services("shop").Get(ctx, "web-istio", metav1.GetOptions{})
		return err1 == nil && err2 == nil && err3 == nil, fmt.Sprint(err1, err2, err3)
	})
	for _, o := range []metav1.Object{sa, dep, svc} {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != web.UID || refs[0].Kind != "Gateway" || refs[0].APIVersion != "gateway.networking.k8s.io/v1" || refs[0].Name != "web" {
			t.Errorf("%s: owner references %+v, want the Gateway web (uid %s)", o.GetName(), refs, web.UID)
		}
		if l := o.GetLabels(); l[ManagedLabel] != ManagedValue || l[GatewayNameLabel] != "web" || l["team"] != "a" {
			t.Errorf("%s: labels %v", o.GetName(), l)
		}
		applied := false
		for _, mf := range o.GetManagedFields() {
			applied = applied || (mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply)
		}
		if !applied {
			t.Errorf("%s: not server-side applied by %s: %+v", o.GetName(), FieldManager, o.GetManagedFields())
		}
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Port != StatusPort || svc.Spec.Ports[1].Port != 80 {
		t.Errorf("service type %s ports %+v", svc.Spec.Type, svc.Spec.Ports)
	}
	if dep.Spec.Template.Labels[GatewayNameLabel] != "web" || dep.Spec.Template.Spec.Containers[0].Args[1] != "router" {
		t.Errorf("pod template %v %v", dep.Spec.Template.Labels, dep.Spec.Template.Spec.Containers[0].Args)
	}

	programmed := func(g *gw.Gateway) string {
		for _, c := range g.Status.Conditions {
			if c.Type == string(gw.GatewayConditionProgrammed) {
				return fmt.Sprintf("%s/%s/g%d: %s", c.Status, c.Reason, c.ObservedGeneration, c.Message)
			}
		}
		return "none"
	}
	gatewayStatus := func(want string, addrs ...gw.GatewayStatusAddress) func() (bool, string) {
		return func() (bool, string) {
			g, err := gc.GatewayV1().Gateways("shop").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got := programmed(g)
			return got == want && addrString(g.Status.Addresses) == addrString(addrs), fmt.Sprintf("%s, addresses %s", got, addrString(g.Status.Addresses))
		}
	}
	host := "web-istio.shop.svc.cluster.local"
	poll(t, "status.addresses the Service's hostname, Programmed False without a replica", gatewayStatus(
		fmt.Sprintf(`False/AddressNotAssigned/g1: Failed to assign to any requested addresses: no instances found for hostname %q`, host),
		gw.GatewayStatusAddress{Type: &hostType, Value: host}))

	// Neither the Gateway of another class nor the one in manual mode got
	// anything, once the controller has looked at all five (the informer
	// queues the five Gateways before the first reconciliation, in order).
	poll(t, "every Gateway reconciled", func() (bool, string) {
		n := testutil.ToFloat64(m.reconciles.WithLabelValues("ok"))
		q := ctrl.queued()
		return n >= 5 && q == 0, fmt.Sprintf("%v reconciles, %d queued", n, q)
	})
	tuned, err := kc.AppsV1().Deployments("shop").Get(ctx, "tuned-istio", metav1.GetOptions{})
	must(tuned, err)
	if tuned.Spec.Replicas == nil || *tuned.Spec.Replicas != 2 {
		t.Errorf("tuned-istio replicas %v, want the parameters' 2", tuned.Spec.Replicas)
	}
	if s, err := kc.CoreV1().Services("shop").Get(ctx, "tuned-istio", metav1.GetOptions{}); err != nil || s.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("tuned-istio Service: %v, want type ClusterIP", err)
	}
	if _, err := kc.AppsV1().Deployments("shop").Get(ctx, "broken-istio", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment broken-istio: %v, want none (its parameters do not exist)", err)
	}
	poll(t, "a Gateway whose parameters do not exist Programmed False (Invalid)", func() (bool, string) {
		g, err := gc.GatewayV1().Gateways("shop").Get(ctx, "broken", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := programmed(g)
		return got == "False/Invalid/g1: spec.infrastructure.parametersRef: ConfigMap shop/missing does not exist", got
	})
	for _, name := range []string{"foreign-other", "manual-istio"} {
		if _, err := kc.AppsV1().Deployments("shop").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment %s: %v, want none", name, err)
		}
		if _, err := kc.CoreV1().Services("shop").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Service %s: %v, want none", name, err)
		}
	}

	// What the Deployment controller and the kubelet would report.
	dep.Status = appsv1.DeploymentStatus{Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1}
	must(kc.AppsV1().Deployments("shop").UpdateStatus(ctx, dep, metav1.UpdateOptions{}))
	poll(t, "Programmed False while the LoadBalancer's address is pending", gatewayStatus(
		fmt.Sprintf(`False/AddressNotAssigned/g1: Assigned to service(s) %s:80, but failed to assign to all requested addresses: address pending for hostname %q`, host, host),
		gw.GatewayStatusAddress{Type: &hostType, Value: host}))
	svc, err = kc.CoreV1().Services("shop").Get(ctx, "web-istio", metav1.GetOptions{})
	must(svc, err)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
	must(kc.CoreV1().Services("shop").UpdateStatus(ctx, svc, metav1.UpdateOptions{}))
	ipType := gw.IPAddressType
	poll(t, "Programmed True with the LoadBalancer's IP", gatewayStatus(
		fmt.Sprintf(`True/Programmed/g1: Resource programmed, assigned to service(s) %s:80`, host),
		gw.GatewayStatusAddress{Type: &ipType, Value: "203.0.113.7"}))

	if err := gc.GatewayV1().Gateways("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the deleted Gateway's objects deleted", func() (bool, string) {
		_, err1 := kc.CoreV1().ServiceAccounts("shop").Get(ctx, "web-istio", metav1.GetOptions{})
		_, err2 := kc.AppsV1().Deployments("shop").Get(ctx, "web-istio", metav1.GetOptions{})
		_, err3 := kc.CoreV1().Services("shop").Get(ctx, "web-istio", metav1.GetOptions{})
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2) && apierrors.IsNotFound(err3), fmt.Sprint(err1, err2, err3)
	})
	if _, ok := ctrl.GatewayInfra("shop", "web"); ok {
		t.Error("the deleted Gateway still has infrastructure status")
	}
}

func addrString(addrs []gw.GatewayStatusAddress) string {
	s := ""
	for _, a := range addrs {
		t := "<nil>"
		if a.Type != nil {
			t = string(*a.Type)
		}
		s += t + "/" + a.Value + " "
	}
	return s
}

func background(t *testing.T, start func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func poll(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
