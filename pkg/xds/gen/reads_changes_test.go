package gen

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

const withoutWorld = efBase + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
`

// Changes leaving a key out (changes.without, which shares the indexes
// and, for a key standing for no object, the resolved objects) answer
// every question as the changes of the other keys do: on random sets of
// keys big and small (linear and indexed), of objects that are in the
// World and that are not, asked by every Reads of a class.
func TestChangesWithoutAKeyAreThoseOfTheRest(t *testing.T) {
	w := loadWorld(t, withoutWorld).World()
	pc := generate(t, w, labelled(t, "sidecar", "default", map[string]string{"app": "productpage"}))
	var reads []*Reads
	collect := func(r *Reads) {
		r.walk(func(o *Reads) bool { reads = append(reads, o); return false })
	}
	collect(pc.Class.reads)
	for _, u := range pc.Class.units {
		collect(u.reads)
		collect(u.clusterReads)
	}
	pool := []model.Key{model.MeshKey}
	for _, ns := range []string{"default", "other"} {
		for _, name := range []string{"reviews", "productpage", "absent"} {
			for _, kind := range []model.Kind{model.KindService, model.KindEndpoints, model.KindVirtualService, model.KindDestinationRule, model.KindEnvoyFilter, model.KindSidecar} {
				pool = append(pool, model.Key{Kind: kind, Namespace: ns, Name: name})
			}
		}
	}
	for _, c := range w.Configs(model.KindEnvoyFilter) {
		pool = append(pool, c.Key)
	}
	slices.SortFunc(pool, compareKeys)
	pool = slices.Compact(pool)
	without := func(keys []model.Key, out ...model.Key) []model.Key {
		return slices.DeleteFunc(slices.Clone(keys), func(k model.Key) bool { return slices.Contains(out, k) })
	}
	rng := rand.New(rand.NewPCG(22, 1))
	asked := 0
	for trial := range 400 {
		keys := slices.Clone(pool)
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		keys = keys[:1+rng.IntN(2*indexAbove+4)]
		cs := changesOf(w, w, keys)
		if trial%2 == 0 {
			cs.resolve() // as a class's units ask cs before they ask it without their own endpoints
		}
		k, k2 := keys[rng.IntN(len(keys))], pool[rng.IntN(len(pool))]
		for _, tc := range []struct {
			name      string
			got, want *changes
		}{
			{"without " + k.String(), cs.without(k), changesOf(w, w, without(keys, k))},
			{"without " + k.String() + " and " + k2.String(), cs.without(k).without(k2), changesOf(w, w, without(keys, k, k2))},
		} {
			for _, q := range pool {
				if g, wt := tc.got.has(q), tc.want.has(q); g != wt {
					t.Fatalf("trial %d, %d keys, %s: has(%s) = %v, want %v", trial, len(keys), tc.name, q, g, wt)
				}
				if g, wt := tc.got.hasKind(q.Kind), tc.want.hasKind(q.Kind); g != wt {
					t.Fatalf("trial %d, %d keys, %s: hasKind(%s) = %v, want %v", trial, len(keys), tc.name, q.Kind, g, wt)
				}
				kn := kindNS{q.Kind, q.Namespace}
				if g, wt := tc.got.hasIn(kn), tc.want.hasIn(kn); g != wt {
					t.Fatalf("trial %d, %d keys, %s: hasIn(%v) = %v, want %v", trial, len(keys), tc.name, kn, g, wt)
				}
			}
			if tc.got.mesh != tc.want.mesh {
				t.Fatalf("trial %d, %s: mesh %v, want %v", trial, tc.name, tc.got.mesh, tc.want.mesh)
			}
			for i, r := range reads {
				if g, wt := r.touchedBy(tc.got), r.touchedBy(tc.want); g != wt {
					t.Fatalf("trial %d, %d keys, %s: reads %d touched %v, want %v", trial, len(keys), tc.name, i, g, wt)
				}
				asked++
			}
		}
	}
	if len(reads) < 10 || asked == 0 {
		t.Fatalf("the class has %d reads: the test asks too little", len(reads))
	}
}

func compareKeys(a, b model.Key) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
