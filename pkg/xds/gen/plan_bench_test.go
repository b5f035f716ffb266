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

// discardWire counts what a WireWriter is given.
type discardWire struct{ n int }

func (d *discardWire) Copy(b []byte)  { d.n += len(b) }
func (d *discardWire) Share(b []byte) { d.n += len(b) }

// BenchmarkVariantListenersSent makes and writes a variant's 2,000
// address listeners of an M1 class as a delta stream sends them: Get,
// then Size, WireShape and WriteWire for each (the codec's calls).
func BenchmarkVariantListenersSent(b *testing.B) {
	store := world1000(b)
	g, _ := newWithListeners(b, true)
	mk := func(name string) *model.Proxy {
		p, err := model.ParseProxy("sidecar~10.9.0.1~"+name+".ns-0~ns-0.svc.cluster.local", map[string]any{
			model.MetaIstioVersion: "1.32.0", "NAMESPACE": "ns-0",
			model.MetaLabels: map[string]any{canonicalNameLabel: name, canonicalRevisionLabel: "v1"}})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	w := store.World()
	base, err := g.Class(w, mk("client"), nil)
	if err != nil {
		b.Fatal(err)
	}
	p := mk("another-client")
	v, ok := g.Variant(base, ClassKey(w, p), p, nil)
	if !ok {
		b.Fatal("Variant refused")
	}
	ls := v.Sets[ListenerType]
	var d discardWire
	b.ReportAllocs()
	for b.Loop() {
		for _, n := range ls.Names {
			r := ls.Get(n)
			_ = r.Size()
			r.WireShape(256)
			r.WriteWire(&d)
		}
	}
}
