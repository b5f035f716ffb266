package kube

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	networkingapi "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshplane/discovery/pkg/model"
)

// istioFake is istio.io/client-go's fake clientset made to behave like
// client-go's own fakes: its watches start at the list's resourceVersion
// (so nothing created between an informer's list and its watch is lost),
// and it tells the reflector it cannot stream lists.
type istioFake struct{ *istiofake.Clientset }

func (istioFake) IsWatchListSemanticsUnSupported() bool { return true }

func newIstioFake(objs ...runtime.Object) istioFake {
	cs := istiofake.NewSimpleClientset(objs...)
	cs.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		return true, w, err
	})
	return istioFake{cs}
}

type fixture struct {
	t     *testing.T
	kube  *kubefake.Clientset
	istio istioFake
	crds  *apiextfake.Clientset
	store *model.Store
	reg   *prometheus.Registry
	src   *Source
}

// objects sorts test objects into the fake clientset that serves them.
type objects struct {
	kube, istio, crds []runtime.Object
}

func newFixture(t *testing.T, objs objects) *fixture {
	t.Helper()
	f := &fixture{
		t:     t,
		kube:  kubefake.NewClientset(objs.kube...),
		istio: newIstioFake(objs.istio...),
		crds:  apiextfake.NewClientset(objs.crds...),
		store: model.NewStore(model.StoreOptions{}),
		reg:   prometheus.NewRegistry(),
	}
	src, err := NewForClients(Clients{Kube: f.kube, Istio: f.istio, CRDs: f.crds}, DefaultOptions(), testLogger(t), f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.src = src
	return f
}

func testLogger(t testing.TB) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// start runs the source until the test ends, and waits until it has synced.
func (f *fixture) start() {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.src.Start(ctx, f.store) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Start returned %v", err)
		}
	})
	eventually(f.t, "source has synced", f.src.HasSynced)
}

func (f *fixture) world() *model.World { return f.store.World() }

// eventually polls cond until it holds, failing the test after 10s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.96.0.10",
			Selector:  map[string]string{"app": name},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
}

func testPod(ns, name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "reviews"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "reviews-sa",
			NodeName:           "node-1",
			Containers:         []corev1.Container{{Name: "app", Image: "reviews:v1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9080}}}},
		},
		Status: corev1.PodStatus{
			PodIP:      ip,
			PodIPs:     []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func testSlice(ns, name, svc, ip, pod string) *discoveryv1.EndpointSlice {
	port, portName := int32(9080), "http"
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{ip},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
}

func testNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"istio-injection": "enabled"}}}
}

func testVirtualService(ns, name, host string) *networkingv1.VirtualService {
	return &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       networkingapi.VirtualService{Hosts: []string{host}},
	}
}

func testDestinationRule(ns, name string) *networkingv1.DestinationRule {
	return &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       networkingapi.DestinationRule{Host: name},
	}
}
