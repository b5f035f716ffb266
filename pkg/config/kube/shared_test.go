package kube

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshplane/discovery/pkg/model"
)

// With Clients.Shared the source reads Namespaces through the process's
// informer: one list of namespaces for every reader, which all see the
// source's stripped objects, and the shared informer outlives the source.
func TestSharedKindsAreReadThroughTheSharedFactory(t *testing.T) {
	ns := testNamespace("shop")
	ns.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: "{}"}
	kube := kubefake.NewClientset(ns, testService("shop", "reviews"))
	shared := informers.NewSharedInformerFactory(kube, 0)
	src, err := NewForClients(Clients{Kube: kube, Istio: newIstioFake(), CRDs: apiextfake.NewClientset(), Shared: shared},
		DefaultOptions(), testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx, store) }()
	sharedCtx, stopShared := context.WithCancel(context.Background())
	defer shared.Shutdown()
	defer stopShared()
	shared.Start(sharedCtx.Done())
	eventually(t, "source has synced", src.HasSynced)
	if store.World().Namespace("shop") == nil || store.World().Service("shop", "reviews") == nil {
		t.Fatal("the Namespace or the Service did not reach the world")
	}
	got, err := shared.Core().V1().Namespaces().Lister().Get("shop")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Error("the shared informer kept kubectl's last-applied annotation: the source's transform is not set on it")
	}
	if n := countLists(kube.Actions(), "namespaces"); n != 1 {
		t.Errorf("namespaces listed %d times, want 1 (the shared informer's)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if shared.Core().V1().Namespaces().Informer().IsStopped() {
		t.Error("stopping the source stopped the shared informer")
	}
}

// A factory that started before the source was built cannot take the
// source's transform: NewForClients refuses it rather than serve
// unstripped objects.
func TestSharedFactoryStartedTooEarlyIsRefused(t *testing.T) {
	kube := kubefake.NewClientset()
	shared := informers.NewSharedInformerFactory(kube, 0)
	shared.Core().V1().Namespaces().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	defer shared.Shutdown()
	defer cancel()
	shared.Start(ctx.Done())
	shared.WaitForCacheSync(ctx.Done())
	_, err := NewForClients(Clients{Kube: kube, Istio: newIstioFake(), CRDs: apiextfake.NewClientset(), Shared: shared},
		DefaultOptions(), testLogger(t), prometheus.NewRegistry())
	if err == nil {
		t.Fatal("NewForClients accepted a shared factory that had started")
	}
}

func countLists(actions []k8stesting.Action, resource string) int {
	n := 0
	for _, a := range actions {
		if a.GetVerb() == "list" && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}
