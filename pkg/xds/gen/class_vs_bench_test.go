package gen

import (
	"fmt"
	"testing"
)

// BenchmarkClassAfterEditWith100VirtualServices is the load tool's M1
// shape for one class: 1,000 services of which 100 have a VirtualService;
// one of them is edited and the class regenerated from its previous
// configuration. Sub-benchmarks: listeners per port (the default) and per
// address (--xds-listeners-per-address, 2,000 listeners more per class).
func BenchmarkClassAfterEditWith100VirtualServices(b *testing.B) {
	for _, perAddress := range []bool{false, true} {
		name := "port-listeners"
		if perAddress {
			name = "per-address"
		}
		b.Run(name, func(b *testing.B) { benchClassAfterEdit(b, perAddress) })
	}
}

func benchClassAfterEdit(b *testing.B, perAddress bool) {
	store := world1000(b)
	for i := 0; i < 100; i++ {
		ns, name := fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("svc-%d", i)
		if _, err := store.Apply(vsEvent(ns, name, name, "1", 50, 50)); err != nil {
			b.Fatal(err)
		}
	}
	g, _ := newWithListeners(b, perAddress)
	p := sidecar(b, "ns-0")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := store.Apply(vsEvent("ns-3", "svc-3", "svc-3", fmt.Sprint(i+2), int32(1+i%99), int32(99-i%99))); err != nil {
			b.Fatal(err)
		}
		if prev, err = g.Class(store.World(), p, prev); err != nil {
			b.Fatal(err)
		}
		if n := len(prev.Changed[RouteType]); n != 2 {
			b.Fatalf("edit changed %d routes, want the 2 of svc-3: %v", n, prev.Changed)
		}
	}
}
