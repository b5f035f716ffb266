package gen

import (
	"fmt"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// labeledProxy is a sidecar of namespace ns whose canonical service is
// name.
func labeledProxy(t testing.TB, ns, name string) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.9.0.1~%s.%s~%s.svc.cluster.local", name, ns, ns),
		map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": ns, model.MetaLabels: map[string]any{"app": name, canonicalNameLabel: name}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// setCounter counts what Set.WriteAll writes: as shapeWriter, and the
// bytes and the names and versions.
type setCounter struct {
	shapeWriter
	size, heads int
}

func (c *setCounter) Copy(b []byte)  { c.size += len(b); c.shapeWriter.Copy(b) }
func (c *setCounter) Share(b []byte) { c.size += len(b); c.shapeWriter.Share(b) }
func (c *setCounter) Resource(name, version, suffix string, _ int) {
	c.heads += len(name) + len(version) + len(suffix)
}

// TestViewShapesShared: the views whose values are as long share one
// shape; one whose values are longer has its own. Each is the shape
// counted afresh for that view, and bounds what it writes.
func TestViewShapesShared(t *testing.T) {
	w := fourNamespaces(t)
	g, _ := newWithOptions(t, true, true)
	rep := labeledProxy(t, "ns-0", "web")
	base := mustClass(t, g, w, rep, nil)
	view := func(name string) *retagView {
		t.Helper()
		v := mustVariant(t, g, base, w, labeledProxy(t, "ns-0", name), nil)
		s := v.Sets[ListenerType]
		if s.view == nil {
			t.Fatalf("%s: its listeners are no view", name)
		}
		return s.view
	}
	a, b, long := view("aaaa"), view("bbbb"), view("a-much-longer-name")
	for _, v := range []*retagView{a, b, long} {
		got := v.shapeOf(wholeSmall)
		if fresh := v.countShape(wholeSmall); *got != *fresh {
			t.Errorf("%s: shape %+v, counted afresh %+v", v.tab.rt.to, *got, *fresh)
		}
		c := &setCounter{shapeWriter: shapeWriter{small: wholeSmall}}
		(&Set{view: v}).WriteAll(c)
		if c.size != got.size || c.copied > got.copied || c.shared != got.shared || c.heads != got.heads {
			t.Errorf("%s: written %d bytes, %d copied, %d shared, %d named; the shape says %d, at most %d, %d and %d",
				v.tab.rt.to, c.size, c.copied, c.shared, c.heads, got.size, got.copied, got.shared, got.heads)
		}
	}
	if a.shapeOf(wholeSmall) != b.shapeOf(wholeSmall) {
		t.Error("views with values as long do not share their shape")
	}
	if a.shapeOf(wholeSmall) == long.shapeOf(wholeSmall) || a.shapeOf(wholeSmall).size == long.shapeOf(wholeSmall).size {
		t.Error("a view with longer values has the shorter one's shape")
	}
	if a.shapeOf(64) == a.shapeOf(wholeSmall) {
		t.Error("another part size has the same shape")
	}
}
