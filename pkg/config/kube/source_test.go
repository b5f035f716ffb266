package kube

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

var bg = context.Background()

func TestInitialStateIsInTheWorldOnceSynced(t *testing.T) {
	f := newFixture(t, objects{
		kube: []runtime.Object{
			testNamespace("shop"),
			testService("shop", "reviews"),
			testPod("shop", "reviews-1", "10.0.0.5"),
			testSlice("shop", "reviews-abc", "reviews", "10.0.0.5", "reviews-1"),
		},
		istio: []runtime.Object{testVirtualService("shop", "reviews-route", "reviews")},
		crds:  []runtime.Object{kubetest.MarkEstablished(kubetest.CRD(model.KindVirtualService))},
	})
	f.start()

	// HasSynced promises that the initial state has been applied: no polling.
	w := f.world()
	if w.Namespace("shop") == nil || w.Service("shop", "reviews") == nil || w.Pod("shop", "reviews-1") == nil {
		t.Fatalf("core objects missing: ns=%v svc=%v pod=%v", w.Namespace("shop"), w.Service("shop", "reviews"), w.Pod("shop", "reviews-1"))
	}
	eps := w.Endpoints("shop", "reviews")
	if eps == nil || len(eps.Endpoints) != 1 || eps.Endpoints[0].ServiceAccount != "reviews-sa" {
		t.Fatalf("endpoints not joined with their pod: %+v", eps)
	}
	if w.Config(model.KindVirtualService, "shop", "reviews-route") == nil {
		t.Fatal("VirtualService missing")
	}
	want := append(slices.Clone(model.KubeKinds), model.KindVirtualService)
	slices.Sort(want)
	if got := f.src.Kinds(); !slices.Equal(got, want) {
		t.Errorf("Kinds() = %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(f.src.metrics.events.WithLabelValues("Service", "upsert")); got != 1 {
		t.Errorf("Service upsert events = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.src.metrics.watched.WithLabelValues("VirtualService")); got != 1 {
		t.Errorf("VirtualService watched gauge = %v, want 1", got)
	}
}

func TestChangesAndDeletesReachTheWorld(t *testing.T) {
	f := newFixture(t, objects{crds: []runtime.Object{kubetest.MarkEstablished(kubetest.CRD(model.KindVirtualService))}})
	f.start()
	kc := f.kube.CoreV1()

	svc := testService("shop", "ratings")
	if _, err := kc.Services("shop").Create(bg, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service is in the World", func() bool { return f.world().Service("shop", "ratings") != nil })

	svc = svc.DeepCopy()
	svc.ResourceVersion = "2"
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: 7070})
	if _, err := kc.Services("shop").Update(bg, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service has two ports", func() bool {
		s := f.world().Service("shop", "ratings")
		return s != nil && len(s.Ports) == 2
	})

	vs := testVirtualService("shop", "ratings", "ratings")
	if _, err := f.istio.NetworkingV1().VirtualServices("shop").Create(bg, vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the VirtualService is in the World", func() bool {
		return f.world().Config(model.KindVirtualService, "shop", "ratings") != nil
	})

	if err := kc.Services("shop").Delete(bg, "ratings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.istio.NetworkingV1().VirtualServices("shop").Delete(bg, "ratings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both are gone", func() bool {
		return f.world().Service("shop", "ratings") == nil && f.world().Config(model.KindVirtualService, "shop", "ratings") == nil
	})
	if got := testutil.ToFloat64(f.src.metrics.events.WithLabelValues("Service", "delete")); got != 1 {
		t.Errorf("Service delete events = %v, want 1", got)
	}
}

func TestMissingCRDsDoNotBlockSyncAndAreWatchedOnceEstablished(t *testing.T) {
	f := newFixture(t, objects{
		// The object exists but its CRD does not: it must not be read yet.
		istio: []runtime.Object{testVirtualService("shop", "early", "reviews")},
	})
	f.start()
	if got := f.src.Kinds(); !slices.Equal(got, sortedKinds(model.KubeKinds)) {
		t.Fatalf("Kinds() = %v, want only the core kinds", got)
	}
	crds := f.crds.ApiextensionsV1().CustomResourceDefinitions()

	// A CRD that is not Established yet is not watched. The DestinationRule
	// CRD, created after it and handled in order, is the barrier.
	if _, err := crds.Create(bg, kubetest.CRD(model.KindVirtualService), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Create(bg, kubetest.MarkEstablished(kubetest.CRD(model.KindDestinationRule)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "DestinationRule is watched", func() bool { return slices.Contains(f.src.Kinds(), model.KindDestinationRule) })
	if slices.Contains(f.src.Kinds(), model.KindVirtualService) {
		t.Fatal("VirtualService is watched before its CRD is Established")
	}

	if _, err := crds.Update(bg, kubetest.MarkEstablished(kubetest.CRD(model.KindVirtualService)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the VirtualService is in the World", func() bool {
		return f.world().Config(model.KindVirtualService, "shop", "early") != nil
	})
}

func TestDeletedCRDRemovesItsObjectsAndComesBack(t *testing.T) {
	f := newFixture(t, objects{
		istio: []runtime.Object{testVirtualService("shop", "a", "reviews"), testVirtualService("shop", "b", "ratings")},
		crds:  []runtime.Object{kubetest.MarkEstablished(kubetest.CRD(model.KindVirtualService))},
	})
	f.start()
	if n := len(f.world().Configs(model.KindVirtualService)); n != 2 {
		t.Fatalf("%d VirtualServices after sync, want 2", n)
	}
	crds := f.crds.ApiextensionsV1().CustomResourceDefinitions()
	name := CRDName(model.KindVirtualService)
	if err := crds.Delete(bg, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the VirtualServices are gone", func() bool { return len(f.world().Configs(model.KindVirtualService)) == 0 })
	if slices.Contains(f.src.Kinds(), model.KindVirtualService) {
		t.Error("VirtualService still watched after its CRD was deleted")
	}
	if got := testutil.ToFloat64(f.src.metrics.watched.WithLabelValues("VirtualService")); got != 0 {
		t.Errorf("watched gauge = %v, want 0", got)
	}

	if _, err := crds.Create(bg, kubetest.MarkEstablished(kubetest.CRD(model.KindVirtualService)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the VirtualServices are back", func() bool { return len(f.world().Configs(model.KindVirtualService)) == 2 })
}

func TestCRDTombstoneStopsItsKind(t *testing.T) {
	f := newFixture(t, objects{
		istio: []runtime.Object{testVirtualService("shop", "a", "reviews")},
		crds:  []runtime.Object{kubetest.MarkEstablished(kubetest.CRD(model.KindVirtualService))},
	})
	f.start()
	f.src.onCRDDelete(cache.DeletedFinalStateUnknown{Key: CRDName(model.KindVirtualService)})
	eventually(t, "the VirtualService is gone", func() bool { return len(f.world().Configs(model.KindVirtualService)) == 0 })
}

func TestStartTwiceFails(t *testing.T) {
	f := newFixture(t, objects{})
	f.start()
	if err := f.src.Start(bg, f.store); err == nil {
		t.Fatal("second Start returned nil")
	}
}

func TestNewForClientsRejectsMissingClients(t *testing.T) {
	_, err := NewForClients(Clients{}, DefaultOptions(), testLogger(t), nil)
	if err == nil {
		t.Fatal("no error for missing clients")
	}
}

func TestCRDServes(t *testing.T) {
	deleting := metav1.Now()
	tests := map[string]struct {
		crd    func() *apiextv1.CustomResourceDefinition
		serves bool
	}{
		"serves an Established CRD with v1 served": {
			crd: func() *apiextv1.CustomResourceDefinition {
				return kubetest.MarkEstablished(kubetest.CRD(model.KindGateway))
			},
			serves: true,
		},
		"waits for a CRD that is not Established": {
			crd: func() *apiextv1.CustomResourceDefinition { return kubetest.CRD(model.KindGateway) },
		},
		"skips a CRD that does not serve v1": {
			crd: func() *apiextv1.CustomResourceDefinition {
				c := kubetest.MarkEstablished(kubetest.CRD(model.KindGateway))
				c.Spec.Versions[0].Name = "v1beta1"
				return c
			},
		},
		"skips a CRD whose v1 is defined but not served": {
			crd: func() *apiextv1.CustomResourceDefinition {
				c := kubetest.MarkEstablished(kubetest.CRD(model.KindGateway))
				c.Spec.Versions[0].Served = false
				return c
			},
		},
		"drops a CRD that is being deleted": {
			crd: func() *apiextv1.CustomResourceDefinition {
				c := kubetest.MarkEstablished(kubetest.CRD(model.KindGateway))
				c.DeletionTimestamp = &deleting
				return c
			},
		},
		"skips a CRD of another group": {
			crd: func() *apiextv1.CustomResourceDefinition {
				c := kubetest.MarkEstablished(kubetest.CRD(model.KindGateway))
				c.Spec.Group = "gateway.networking.k8s.io"
				return c
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, reason := crdServes(tc.crd(), model.KindGateway)
			if got != tc.serves {
				t.Errorf("crdServes = %v (%s), want %v", got, reason, tc.serves)
			}
			if !got && reason == "" {
				t.Error("no reason given for not serving")
			}
		})
	}
}

func sortedKinds(k []model.Kind) []model.Kind {
	out := slices.Clone(k)
	slices.Sort(out)
	return out
}

// rejectingSink applies events to a Store but reports two errors per batch,
// as a Store does for events it cannot use.
type rejectingSink struct{ store *model.Store }

func (r rejectingSink) Apply(events ...model.Event) (*model.Update, error) {
	u, _ := r.store.Apply(events...)
	return u, errors.Join(errors.New("first"), errors.New("second"))
}

func TestRejectedEventsAreCountedAndTheRestStillApplies(t *testing.T) {
	f := newFixture(t, objects{kube: []runtime.Object{testService("shop", "reviews")}})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- f.src.Start(ctx, rejectingSink{f.store}) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "source has synced", f.src.HasSynced)
	if f.world().Service("shop", "reviews") == nil {
		t.Fatal("Service missing")
	}
	if got := testutil.ToFloat64(f.src.metrics.applyErrors); got < 2 || int(got)%2 != 0 {
		t.Errorf("apply errors = %v, want two per batch", got)
	}
}
