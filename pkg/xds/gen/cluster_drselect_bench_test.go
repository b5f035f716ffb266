package gen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// worldWithRules is world1000 with a DestinationRule (two subsets) for
// every service, in the service's namespace, and, per namespace, one rule
// with a workloadSelector (app=client-N) for the namespace's first
// service.
func worldWithRules(b *testing.B) *model.Store {
	b.Helper()
	store := world1000(b)
	var y strings.Builder
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-%d, namespace: ns-%d}\nspec:\n  host: svc-%d\n  subsets: [{name: a, labels: {v: a}}, {name: b, labels: {v: b}}]\n", i, i%50, i)
	}
	for n := 0; n < 50; n++ {
		fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: selected, namespace: ns-%d}\nspec:\n  host: svc-%d\n  workloadSelector: {matchLabels: {app: client-%d}}\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n", n, n, n)
	}
	evs, err := worldtest.Decode([]byte(y.String()))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Apply(evs...); err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkClassWithDestinationRules generates the class of a sidecar in
// a World where every service has a DestinationRule and every namespace a
// rule with a workloadSelector, for a proxy the selector does not select
// and for one it does.
func BenchmarkClassWithDestinationRules(b *testing.B) {
	for _, app := range []string{"other", "client-0"} {
		b.Run("app="+app, func(b *testing.B) {
			store := worldWithRules(b)
			g := newForTest(quietLog())
			p := labelled(b, "sidecar", "ns-0", map[string]string{"app": app})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := g.Class(store.World(), p, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClassKeyWithDestinationRules computes the class key of proxies
// with varied labels in the same World.
func BenchmarkClassKeyWithDestinationRules(b *testing.B) {
	store := worldWithRules(b)
	w := store.World()
	proxies := make([]*model.Proxy, 100)
	for i := range proxies {
		proxies[i] = labelled(b, "sidecar", fmt.Sprintf("ns-%d", i%50), map[string]string{"app": fmt.Sprintf("client-%d", i%100), "version": "v1"})
	}
	ClassKey(w, proxies[0]) // the World's index, built once per World
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ClassKey(w, proxies[i%len(proxies)])
	}
}
