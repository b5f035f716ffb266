package gen

import (
	"fmt"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// world1000WithTelemetry is world1000 with Istio's chart's telemetry: the
// prometheus provider and the MeshConfig access log on every listener.
func world1000WithTelemetry(b *testing.B) *model.Store {
	b.Helper()
	store := world1000(b)
	ev, err := worldtest.MeshConfig("defaultProviders: {metrics: [prometheus]}\naccessLogFile: /dev/stdout\n")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Apply(ev); err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkClassFromScratchWithTelemetry is BenchmarkClassFromScratch with
// istio.stats and access logs in every connection manager and TCP chain.
func BenchmarkClassFromScratchWithTelemetry(b *testing.B) {
	store := world1000WithTelemetry(b)
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

// BenchmarkClassAfterVirtualServiceEditWithTelemetry checks that telemetry
// does not make an unrelated edit rebuild the listeners: only the edited
// host's routes change.
func BenchmarkClassAfterVirtualServiceEditWithTelemetry(b *testing.B) {
	store := world1000WithTelemetry(b)
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
		if len(prev.Changed[ListenerType]) > 0 {
			b.Fatalf("a VirtualService edit rebuilt listeners %v", prev.Changed[ListenerType])
		}
	}
}
