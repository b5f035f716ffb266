package gen

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// BenchmarkPlanBaseListeners plans the 2,000 address listeners of an M1
// class as the first variant of a new base does (retagPlanOf for each):
// the cost a service change adds per base class with injected labels.
func BenchmarkPlanBaseListeners(b *testing.B) {
	store := world1000(b)
	g, _ := newWithListeners(b, true)
	id := "sidecar~10.9.0.1~client.ns-0~ns-0.svc.cluster.local"
	p, err := model.ParseProxy(id, map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": "ns-0",
		model.MetaLabels: map[string]any{canonicalNameLabel: "client", canonicalRevisionLabel: "v1"}})
	if err != nil {
		b.Fatal(err)
	}
	c, err := g.Class(store.World(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	ls := c.Sets[ListenerType]
	from := tagValues(p)
	var rs []*Resource
	for _, r := range ls.All() {
		rs = append(rs, r)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range rs {
			r.plan.Store(nil)
			if _, err := retagPlanOf(r, from); err != nil {
				b.Fatal(err)
			}
		}
	}
}
