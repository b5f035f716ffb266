package gen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// BenchmarkSidecarScoping generates one sidecar class of a 1,000-service,
// 50-namespace World with and without a Sidecar in every namespace that
// limits it to its own services ("./*"), and reports the configuration's
// size (bytes and resources per class) next to the generation time.
func BenchmarkSidecarScoping(b *testing.B) {
	for _, scoped := range []bool{false, true} {
		name := "without Sidecar"
		if scoped {
			name = "with ./* Sidecar"
		}
		b.Run(name, func(b *testing.B) {
			store := world1000(b)
			if scoped {
				var y strings.Builder
				for i := 0; i < 50; i++ {
					fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: ns-%d}\nspec:\n  egress:\n  - hosts: [\"./*\"]\n", i)
				}
				events, err := worldtest.Decode([]byte(y.String()))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := store.Apply(events...); err != nil {
					b.Fatal(err)
				}
			}
			g := newForTest(quietLog())
			p := sidecar(b, "ns-0")
			var cc *ClassConfig
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var err error
				if cc, err = g.Class(store.World(), p, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			bytes, n := classSize(cc)
			b.ReportMetric(float64(bytes), "bytes/class")
			b.ReportMetric(float64(n), "resources/class")
		})
	}
}

func classSize(cc *ClassConfig) (bytes, n int) {
	for _, set := range cc.Sets {
		for _, name := range set.Names {
			bytes += len(set.Get(name).Any.GetValue())
			n++
		}
	}
	return bytes, n
}
