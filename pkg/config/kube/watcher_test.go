package kube

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/meshplane/discovery/pkg/model"
)

// unstartedWatcher returns a watcher whose informer never runs: the test
// calls its handler methods directly, and drain hands what they queued to
// a real Store.
func unstartedWatcher(t *testing.T, kind model.Kind) (*watcher, func() *model.World) {
	t.Helper()
	src, err := NewForClients(Clients{Kube: kubefake.NewClientset(), Istio: newIstioFake(), CRDs: apiextfake.NewClientset()},
		DefaultOptions(), testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWatcher(src, kind)
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	drain := func() *model.World {
		for batch := src.queue.take(); batch != nil; batch = src.queue.take() {
			if _, err := store.Apply(batch...); err != nil {
				t.Fatal(err)
			}
		}
		return store.World()
	}
	return w, drain
}

func TestDeleteHandlesTombstones(t *testing.T) {
	svc := testService("shop", "reviews")
	tests := map[string]struct {
		deleted any
		gone    bool
	}{
		"a plain delete removes the object": {
			deleted: svc,
			gone:    true,
		},
		"a tombstone removes the object its key names": {
			deleted: cache.DeletedFinalStateUnknown{Key: "shop/reviews", Obj: svc},
			gone:    true,
		},
		"a tombstone whose object is stale still removes by key": {
			deleted: cache.DeletedFinalStateUnknown{Key: "shop/reviews", Obj: "not an object"},
			gone:    true,
		},
		"a tombstone with an unparseable key is ignored": {
			deleted: cache.DeletedFinalStateUnknown{Key: "a/b/c", Obj: svc},
		},
		"a delete of something without metadata is ignored": {
			deleted: 42,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w, drain := unstartedWatcher(t, model.KindService)
			w.OnAdd(svc, true)
			if drain().Service("shop", "reviews") == nil {
				t.Fatal("added Service missing")
			}
			w.OnDelete(tc.deleted)
			if gone := drain().Service("shop", "reviews") == nil; gone != tc.gone {
				t.Errorf("Service gone = %v, want %v", gone, tc.gone)
			}
		})
	}
}

func TestUpdateWithTheSameResourceVersionIsSkipped(t *testing.T) {
	w, _ := unstartedWatcher(t, model.KindService)
	old := testService("shop", "reviews")
	w.OnUpdate(old, old.DeepCopy())
	if n := w.queue.pushedCount(); n != 0 {
		t.Fatalf("a resync queued %d events", n)
	}
	changed := old.DeepCopy()
	changed.ResourceVersion = "2"
	w.OnUpdate(old, changed)
	if n := w.queue.pushedCount(); n != 1 {
		t.Fatalf("a change queued %d events, want 1", n)
	}
}

func TestStopDeletesOnlyWhatIsStillReported(t *testing.T) {
	w, drain := unstartedWatcher(t, model.KindVirtualService)
	w.OnAdd(testVirtualService("shop", "a", "reviews"), true)
	w.OnAdd(testVirtualService("shop", "b", "ratings"), true)
	w.OnDelete(cache.DeletedFinalStateUnknown{Key: "shop/b"})
	if n := len(drain().Configs(model.KindVirtualService)); n != 1 {
		t.Fatalf("%d VirtualServices before stop, want 1", n)
	}
	if n := w.stop(); n != 1 {
		t.Errorf("stop deleted %d objects, want 1", n)
	}
	// A notification that arrives after the stop must not resurrect anything.
	w.OnAdd(testVirtualService("shop", "c", "details"), false)
	if n := len(drain().Configs(model.KindVirtualService)); n != 0 {
		t.Errorf("%d VirtualServices after stop, want 0", n)
	}
}

func TestUpsertOfANonObjectIsIgnored(t *testing.T) {
	w, _ := unstartedWatcher(t, model.KindPod)
	w.OnAdd("not an object", true)
	w.OnAdd(&corev1.PodList{}, true) // an object, but without ObjectMeta
	if n := w.queue.pushedCount(); n != 0 {
		t.Fatalf("%d events queued for bad input", n)
	}
}
