package server

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// BenchmarkInitialConfigOverGRPC connects 100 sidecars (XDS_BENCH_PROXIES)
// at once, over
// loopback gRPC, to a server holding a 1,000-service World (50
// namespaces, 10 endpoints each, ports 80 and 7070: per proxy 2,003
// clusters, 2,000 endpoint sets, 2,000 routes). Each asks for CDS, LDS,
// then EDS and RDS by name, acknowledging everything, as Envoy would. It
// reports the time until the slowest proxy has everything (p100) and the
// median, and the bytes each proxy received.
func BenchmarkInitialConfigOverGRPC(b *testing.B) {
	proxies := 100
	if n, err := strconv.Atoi(os.Getenv("XDS_BENCH_PROXIES")); err == nil && n > 0 {
		proxies = n // e.g. XDS_BENCH_PROXIES=1000 for the istiod comparison
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(1000, 50, 10)...); err != nil {
		b.Fatal(err)
	}
	ts := startServer(b, store)
	g := newGen(b)
	// What each namespace's sidecars subscribe to by name, worked out
	// before the clock starts.
	eds, routes := map[string][]string{}, map[string][]string{}
	for n := 0; n < 20; n++ {
		ns := fmt.Sprintf("ns-%d", n)
		proxy, err := model.ParseProxy("sidecar~10.0.0.1~x."+ns+"~"+ns+".svc.cluster.local", nil)
		if err != nil {
			b.Fatal(err)
		}
		cls, err := g.Class(store.World(), proxy, nil)
		if err != nil {
			b.Fatal(err)
		}
		eds[ns], routes[ns] = cls.Sets[gen.EndpointType].Names, cls.Sets[gen.RouteType].Names
	}
	b.ReportAllocs()
	b.ResetTimer()
	var all []time.Duration
	var bytes int64
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := time.Now()
		for p := 0; p < proxies; p++ {
			ns := fmt.Sprintf("ns-%d", p%20)
			id := fmt.Sprintf("sidecar~10.200.%d.%d~p%d-%d.%s~%s.svc.cluster.local", p/250, p%250, i, p, ns, ns)
			wg.Add(1)
			go func() {
				defer wg.Done()
				// One connection per proxy, as every Envoy has its own.
				c := newSotwClient(b, dial(b, ts.addr), node(id, nil))
				n := int64(0)
				take := func(typeURL string, names []string) []string {
					c.send(typeURL, names, "", "", "")
					r := c.next()
					for _, a := range r.GetResources() {
						n += int64(len(a.GetValue()))
					}
					c.ack(r, names)
					return names
				}
				take(gen.ClusterType, nil)
				take(gen.ListenerType, nil)
				take(gen.EndpointType, eds[ns])
				take(gen.RouteType, routes[ns])
				d := time.Since(start)
				c.cancel()
				mu.Lock()
				all = append(all, d)
				bytes += n
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(all[len(all)/2].Seconds(), "p50-s")
	b.ReportMetric(all[len(all)-1].Seconds(), "p100-s")
	b.ReportMetric(float64(bytes)/float64(len(all)), "bytes/proxy")
}
