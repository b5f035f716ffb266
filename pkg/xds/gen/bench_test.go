package gen

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func world1000(b testing.TB) *model.Store {
	b.Helper()
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(1000, 50, 10)...); err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkClassFromScratch generates everything one sidecar class sees
// of a 1,000-service World (2,000 clusters, 2,000 endpoint sets of 10
// endpoints, 2,000 routes, 3 listeners), with nothing to reuse.
func BenchmarkClassFromScratch(b *testing.B) {
	store := world1000(b)
	g := newForTest(quietLog())
	p := sidecar(b, "ns-0")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.Class(store.World(), p, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClassAfterVirtualServiceEdit regenerates a class after one
// VirtualService edit, reusing what did not change.
func BenchmarkClassAfterVirtualServiceEdit(b *testing.B) {
	store := world1000(b)
	g := newForTest(quietLog())
	p := sidecar(b, "ns-0")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := store.Apply(vsEvent("ns-3", "svc-3", "svc-3", fmt.Sprint(i), int32(1+i%99), int32(99-i%99))); err != nil {
			b.Fatal(err)
		}
		if prev, err = g.Class(store.World(), p, prev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEndpointUpdate regenerates one service's endpoints in a class.
func BenchmarkEndpointUpdate(b *testing.B) {
	store := world1000(b)
	g := newForTest(quietLog())
	p := sidecar(b, "ns-0")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	svc := []model.NamespacedName{{Namespace: "ns-7", Name: "svc-7"}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := store.Apply(worldtest.Slice("ns-7", "svc-7", fmt.Sprintf("10.77.%d.%d", i/250%250, i%250+1))); err != nil {
			b.Fatal(err)
		}
		prev, _ = g.UpdateEndpoints(prev, store.World(), svc)
	}
}

// BenchmarkClassFromScratchSniffed is BenchmarkClassFromScratch with the
// services' port 80 unnamed, so that sidecars sniff it: each service has
// a TCP and an HTTP chain on 0.0.0.0_80 instead of one HTTP chain.
func BenchmarkClassFromScratchSniffed(b *testing.B) {
	evs := worldtest.Mesh(1000, 50, 10)
	for _, ev := range evs {
		if svc, ok := ev.Object.(*corev1.Service); ok {
			svc.Spec.Ports[0].Name = ""
		}
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		b.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(b, "ns-0")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.Class(store.World(), p, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClassAfterServiceAdded regenerates a class after a service is
// added to (odd iterations: removed from) a 1,000-service World: the new
// service's unit and its port's listener are built, everything else is
// reused. listener-bytes/op are the bytes of the listeners that changed,
// what delta xDS sends each proxy of the class: the port listeners
// (port) or the new address's listeners (address,
// Options.ListenersPerAddress); lds-bytes and listeners are the class's
// whole listener set.
func BenchmarkClassAfterServiceAdded(b *testing.B) {
	for _, shape := range []struct {
		name       string
		perAddress bool
	}{{"port", false}, {"address", true}} {
		b.Run(shape.name, func(b *testing.B) {
			store := world1000(b)
			o := DefaultOptions(quietLog())
			o.ListenersPerAddress = shape.perAddress
			g, err := New(o)
			if err != nil {
				b.Fatal(err)
			}
			p := sidecar(b, "ns-0")
			prev, err := g.Class(store.World(), p, nil)
			if err != nil {
				b.Fatal(err)
			}
			svc := worldtest.Service("ns-9", "added", "10.97.0.1")
			var sent int
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ev := svc
				if i%2 == 1 {
					ev.Op, ev.Object = model.OpDelete, nil
				}
				if _, err := store.Apply(ev); err != nil {
					b.Fatal(err)
				}
				if prev, err = g.Class(store.World(), p, prev); err != nil {
					b.Fatal(err)
				}
				for _, n := range prev.Changed[ListenerType] {
					if r := prev.Sets[ListenerType].Get(n); r != nil {
						sent += r.Size()
					}
				}
			}
			b.ReportMetric(float64(sent)/float64(b.N), "listener-bytes/op")
			lds := 0
			for _, r := range prev.Sets[ListenerType].rs {
				lds += r.Size()
			}
			b.ReportMetric(float64(lds), "lds-bytes")
			b.ReportMetric(float64(prev.Sets[ListenerType].Len()), "listeners")
		})
	}
}
