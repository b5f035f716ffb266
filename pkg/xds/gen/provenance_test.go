package gen

import (
	"strconv"
	"strings"
	"testing"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func drEvent(ns, name, host string, gen int64) model.Event {
	dr := &networkingv1.DestinationRule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "7", Generation: gen}}
	dr.Spec.Host = host
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindDestinationRule, Namespace: ns, Name: name}, Object: dr}
}

func TestSources(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(10, 5, 3)...); err != nil {
		t.Fatal(err)
	}
	vs := vsEvent("ns-3", "svc-3", "svc-3", "11", 90, 10)
	vs.Object.(*networkingv1.VirtualService).Generation = 4
	if _, err := store.Apply(vs, drEvent("ns-2", "svc-2", "svc-2", 2)); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	cc, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(store.World(), p, cc)
	vsKey := model.Key{Kind: model.KindVirtualService, Namespace: "ns-3", Name: "svc-3"}
	drKey := model.Key{Kind: model.KindDestinationRule, Namespace: "ns-2", Name: "svc-2"}
	host3, host2 := model.Hostname("svc-3", "ns-3", "cluster.local"), model.Hostname("svc-2", "ns-2", "cluster.local")
	// find returns the first resource of typeURL whose name passes ok.
	find := func(typeURL string, ok func(string) bool) string {
		for _, n := range pc.Names(typeURL) {
			if ok(n) {
				return n
			}
		}
		t.Fatalf("no such %s resource", ShortType(typeURL))
		return ""
	}
	drCluster := find(ClusterType, func(n string) bool { return strings.HasPrefix(n, "outbound|") && strings.HasSuffix(n, "|"+host2) })
	otherCluster := find(ClusterType, func(n string) bool { return strings.HasPrefix(n, "outbound|") && !strings.HasSuffix(n, "|"+host2) })
	cases := map[string]struct {
		typeURL, name string
		want          []ConfigRef
	}{
		"a VirtualService's host route carries that VirtualService at its generation": {
			RouteType, find(RouteType, func(n string) bool { return strings.HasPrefix(n, host3+":") }),
			[]ConfigRef{{Key: vsKey, Generation: 4, ResourceVersion: "11"}},
		},
		"a DestinationRule's cluster carries that DestinationRule": {
			ClusterType, drCluster, []ConfigRef{{Key: drKey, Generation: 2, ResourceVersion: "7"}},
		},
		"a DestinationRule's host route carries the rule (routes read it: hash policy, subsets)": {
			RouteType, find(RouteType, func(n string) bool { return strings.HasPrefix(n, host2+":") }),
			[]ConfigRef{{Key: drKey, Generation: 2, ResourceVersion: "7"}},
		},
		"another host's route carries nothing": {
			RouteType, find(RouteType, func(n string) bool {
				return strings.Contains(n, ".svc.cluster.local:") && !strings.HasPrefix(n, host2+":") && !strings.HasPrefix(n, host3+":")
			}), nil,
		},
		"a cluster of a host without DestinationRule carries nothing": {ClusterType, otherCluster, nil},
		"virtualInbound without policies carries nothing":             {ListenerType, VirtualInbound, nil},
		"an unknown name carries nothing":                             {RouteType, "no-such-route", nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := pc.Sources(tc.typeURL, tc.name)
			if len(got) != len(tc.want) {
				t.Fatalf("Sources(%s, %s) = %+v, want %+v", ShortType(tc.typeURL), tc.name, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("Sources(%s, %s)[%d] = %+v, want %+v", ShortType(tc.typeURL), tc.name, i, got[i], tc.want[i])
				}
			}
		})
	}
}

// BenchmarkSources looks up the sources of every route of a sidecar in a
// 1,000-service mesh with a VirtualService per tenth service: what a NACK
// (or an ACK while a rejection is outstanding) of every route costs.
func BenchmarkSources(b *testing.B) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(1000, 10, 3)...); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 1000; i += 10 {
		ns := "ns-" + strconv.Itoa(i%10)
		svc := "svc-" + strconv.Itoa(i)
		if _, err := store.Apply(vsEvent(ns, svc, svc, "1", 50, 50)); err != nil {
			b.Fatal(err)
		}
	}
	g := newForTest(quietLog())
	p := sidecar(b, "ns-0")
	cc, err := g.Class(store.World(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	pc := g.Proxy(store.World(), p, cc)
	routes := pc.Names(RouteType)
	found := 0
	for _, n := range routes {
		found += len(pc.Sources(RouteType, n))
	}
	if found == 0 {
		b.Fatal("no route traced to a VirtualService")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, n := range routes {
			_ = pc.Sources(RouteType, n)
		}
	}
	b.ReportMetric(float64(len(routes)), "routes")
}
