package kube

import (
	"context"
	"net/http"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// realCluster is a source running against a real kube-apiserver.
type realCluster struct {
	env   *testenv.Env
	istio istioclient.Interface
	crds  apiextclient.Interface
	store *model.Store
	src   *Source
	stop  func()
	// failed counts the source's requests that got no response, by the
	// resource they were for.
	failed *failureCounter
}

type failureCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *failureCounter) count(resource string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[resource]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap counts requests that fail without a response (the server is away).
func (f *failureCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err != nil {
			f.mu.Lock()
			f.n[path.Base(r.URL.Path)]++
			f.mu.Unlock()
		}
		return resp, err
	})
}

func startOnRealCluster(t *testing.T, before func(rc *realCluster)) *realCluster {
	t.Helper()
	env := testenv.Start(t)
	rc := &realCluster{env: env, store: model.NewStore(model.StoreOptions{}), failed: &failureCounter{n: map[string]int{}}}
	var err error
	if rc.istio, err = istioclient.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	if rc.crds, err = apiextclient.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(rc)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(rc.failed.wrap)
	if rc.src, err = New(cfg, DefaultOptions(), testLogger(t), prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rc.src.Start(ctx, rc.store) }()
	rc.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start returned %v", err)
		}
	}
	t.Cleanup(rc.stop)
	eventually(t, "the source has synced", rc.src.HasSynced)
	return rc
}

func (rc *realCluster) world() *model.World { return rc.store.World() }

func mustCreate[T any](t *testing.T, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) T {
	t.Helper()
	out, err := create(bg, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestIntegrationWorldFollowsTheAPIServer(t *testing.T) {
	// Started before any Istio CRD exists: it must sync anyway.
	rc := startOnRealCluster(t, nil)
	// Core kinds, and the ConfigMaps' CA keys for BackendTLSPolicy (the
	// source has a Gateway API client).
	if got := rc.src.Kinds(); !slices.Equal(got, sortedKinds(append(slices.Clone(model.KubeKinds), model.KindCAConfigMap))) {
		t.Fatalf("Kinds() = %v before any CRD, want the core kinds and CAConfigMap", got)
	}
	c := rc.env.Client.CoreV1()
	mustCreate(t, c.Namespaces().Create, testNamespace("shop"))
	mustCreate(t, c.ServiceAccounts("shop").Create, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reviews-sa", Namespace: "shop"}})
	mustCreate(t, c.Services("shop").Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "reviews"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	pod := testPod("shop", "reviews-1", "")
	pod.Status = corev1.PodStatus{}
	pod = mustCreate(t, c.Pods("shop").Create, pod)
	// No kubelet here: report the pod running, as one would.
	pod.Status = testPod("shop", "reviews-1", "10.0.0.5").Status
	if _, err := c.Pods("shop").UpdateStatus(bg, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sliceClient := rc.env.Client.DiscoveryV1().EndpointSlices("shop")
	mustCreate(t, sliceClient.Create, testSlice("shop", "reviews-abc", "reviews", "10.0.0.5", "reviews-1"))

	eventually(t, "the Service, Pod and joined endpoints are in the World", func() bool {
		w := rc.world()
		eps := w.Endpoints("shop", "reviews")
		return w.Service("shop", "reviews") != nil && w.Pod("shop", "reviews-1") != nil && w.Namespace("shop") != nil &&
			eps != nil && len(eps.Endpoints) == 1 && eps.Endpoints[0].ServiceAccount == "reviews-sa" && eps.Endpoints[0].Ready
	})
	if ip := rc.world().Service("shop", "reviews").Addresses; len(ip) != 1 {
		t.Errorf("Service addresses = %v, want the allocated cluster IP", ip)
	}

	// The CRDs arrive after start-up, then a VirtualService.
	kubetest.InstallCRDs(bg, t, rc.crds)
	vss := rc.istio.NetworkingV1().VirtualServices("shop")
	mustCreate(t, vss.Create, testVirtualService("shop", "reviews-route", "reviews"))
	eventually(t, "the VirtualService is in the World", func() bool {
		return rc.world().Config(model.KindVirtualService, "shop", "reviews-route") != nil
	})
	if got := rc.src.Kinds(); len(got) != len(model.KubeKinds)+len(model.IstioKinds)+1 { // and CAConfigMap
		t.Errorf("Kinds() = %v after installing every CRD", got)
	}

	// Deletes.
	if err := vss.Delete(bg, "reviews-route", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sliceClient.Delete(bg, "reviews-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Pods("shop").Delete(bg, "reviews-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Services("shop").Delete(bg, "reviews", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "everything deleted is gone from the World", func() bool {
		w := rc.world()
		return w.Config(model.KindVirtualService, "shop", "reviews-route") == nil && w.Endpoints("shop", "reviews") == nil &&
			w.Pod("shop", "reviews-1") == nil && w.Service("shop", "reviews") == nil
	})
}

func TestIntegrationDeletedCRDTakesItsObjects(t *testing.T) {
	rc := startOnRealCluster(t, func(rc *realCluster) {
		kubetest.InstallCRDs(bg, t, rc.crds, model.KindDestinationRule)
	})
	drs := rc.istio.NetworkingV1().DestinationRules("default")
	mustCreate(t, drs.Create, testDestinationRule("default", "reviews"))
	eventually(t, "the DestinationRule is in the World", func() bool {
		return rc.world().Config(model.KindDestinationRule, "default", "reviews") != nil
	})
	if err := rc.crds.ApiextensionsV1().CustomResourceDefinitions().Delete(bg, CRDName(model.KindDestinationRule), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the DestinationRule is gone and its kind unwatched", func() bool {
		return rc.world().Config(model.KindDestinationRule, "default", "reviews") == nil &&
			!slices.Contains(rc.src.Kinds(), model.KindDestinationRule)
	})
}

func TestIntegrationWorldSurvivesAnAPIServerOutage(t *testing.T) {
	rc := startOnRealCluster(t, func(rc *realCluster) {
		kubetest.InstallCRDs(bg, t, rc.crds, model.KindVirtualService)
		mustCreate(t, rc.env.Client.CoreV1().Services("default").Create, newService("default", "before"))
		mustCreate(t, rc.istio.NetworkingV1().VirtualServices("default").Create, testVirtualService("default", "before", "before"))
	})
	holds := func(w *model.World) bool {
		return w.Service("default", "before") != nil && w.Config(model.KindVirtualService, "default", "before") != nil
	}
	if !holds(rc.world()) {
		t.Fatal("initial state missing after sync")
	}
	version := rc.world().Version

	t.Logf("%s stopping the API server", time.Now().Format(time.StampMilli))
	rc.env.StopAPIServer(t)
	t.Logf("%s stopped", time.Now().Format(time.StampMilli))
	// Wait until the informers have noticed: their watches broke and their
	// retries failed, twice, for a core kind and for an Istio kind.
	eventually(t, "the informers' retries fail", func() bool {
		return rc.failed.count("services") >= 2 && rc.failed.count("virtualservices") >= 2
	})
	if w := rc.world(); !holds(w) || w.Version != version {
		t.Fatalf("the World changed while the API server was away (version %d -> %d)", version, w.Version)
	}

	t.Logf("%s World unchanged during the outage; starting the API server", time.Now().Format(time.StampMilli))
	rc.env.StartAPIServer(t)
	t.Logf("%s started", time.Now().Format(time.StampMilli))
	mustCreate(t, rc.env.Client.CoreV1().Services("default").Create, newService("default", "after"))
	if err := rc.istio.NetworkingV1().VirtualServices("default").Delete(bg, "before", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the World catches up with changes made after the API server returned", func() bool {
		w := rc.world()
		return w.Service("default", "after") != nil && w.Service("default", "before") != nil &&
			w.Config(model.KindVirtualService, "default", "before") == nil
	})
}

// newService is testService ready to be created on a real API server.
func newService(ns, name string) *corev1.Service {
	s := testService(ns, name)
	s.ResourceVersion = ""
	s.Spec.ClusterIP = ""
	return s
}
