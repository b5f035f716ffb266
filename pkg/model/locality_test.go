package model

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"big"}}}},
	}
}

// TestEndpointLocalityFromNode: an endpoint's locality is its pod's Node's
// (region, zone, subzone), as istiod reads it; a change of the Node's
// labels rebuilds the endpoints of its pods, a change the mesh does not
// see (status) publishes nothing, and a pod's locality label wins.
func TestEndpointLocalityFromNode(t *testing.T) {
	s := NewStore(StoreOptions{})
	es := slice("shop", "cart-1", "cart", map[string]string{"10.1.0.1": "cart-a", "10.1.0.2": "cart-b"}, true)
	zone := "slice-zone"
	for i := range es.Endpoints {
		es.Endpoints[i].Zone = &zone
	}
	a := pod("shop", "cart-a", "10.1.0.1", "sa", nil)
	a.Spec.NodeName = "n1"
	b := pod("shop", "cart-b", "10.1.0.2", "sa", map[string]string{LabelLocality: "eu"})
	b.Spec.NodeName = "n1"
	if _, err := s.Apply(
		Event{Op: OpUpsert, Key: Key{Kind: KindEndpointSlice, Namespace: "shop", Name: "cart-1"}, Object: es},
		Event{Op: OpUpsert, Key: Key{Kind: KindPod, Namespace: "shop", Name: "cart-a"}, Object: a},
		Event{Op: OpUpsert, Key: Key{Kind: KindPod, Namespace: "shop", Name: "cart-b"}, Object: b},
	); err != nil {
		t.Fatal(err)
	}
	locs := func() map[string]Locality {
		out := map[string]Locality{}
		for _, ep := range s.World().Endpoints("shop", "cart").Endpoints {
			out[ep.Pod] = ep.Locality
		}
		return out
	}
	// The Node is not known yet: the slice's zone.
	if got := locs(); got["cart-a"] != (Locality{Zone: "slice-zone"}) || got["cart-b"] != (Locality{Region: "eu"}) {
		t.Errorf("before the Node: %v", got)
	}
	u, err := s.Apply(Event{Op: OpUpsert, Key: Key{Kind: KindNode, Name: "n1"}, Object: node("n1", map[string]string{
		LabelTopologyRegion: "us", LabelTopologyZone: "us-1", LabelTopologySubzone: "rack", "unrelated": "x",
	})})
	if err != nil {
		t.Fatal(err)
	}
	if u == nil || !u.Kinds()[KindEndpoints] {
		t.Fatalf("the Node's arrival changed no endpoints: %v", u)
	}
	if got := locs(); got["cart-a"] != (Locality{"us", "us-1", "rack"}) || got["cart-b"] != (Locality{Region: "eu"}) {
		t.Errorf("with the Node: %v", got)
	}
	n := node("n1", map[string]string{LabelTopologyRegion: "us", LabelTopologyZone: "us-1", LabelTopologySubzone: "rack", "unrelated": "y"})
	n.Status.Images = nil
	if u, _ := s.Apply(Event{Op: OpUpsert, Key: Key{Kind: KindNode, Name: "n1"}, Object: n}); u != nil {
		t.Errorf("a Node change that moves no pod published %v", u.Changes)
	}
	// The deprecated labels count when the GA ones are missing.
	u, _ = s.Apply(Event{Op: OpUpsert, Key: Key{Kind: KindNode, Name: "n1"}, Object: node("n1", map[string]string{
		labelBetaRegion: "old", labelBetaZone: "old-1",
	})})
	if u == nil || !u.Kinds()[KindEndpoints] {
		t.Fatalf("a Node that moved changed no endpoints: %v", u)
	}
	if got := locs(); got["cart-a"] != (Locality{Region: "old", Zone: "old-1"}) {
		t.Errorf("with beta labels: %v", got)
	}
	if s.World().Node("n1") == nil {
		t.Error("Node not held")
	}
	if _, err := s.Apply(Event{Op: OpDelete, Key: Key{Kind: KindNode, Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if got := locs(); got["cart-a"] != (Locality{Zone: "slice-zone"}) {
		t.Errorf("after the Node's deletion: %v", got)
	}
}

// TestParseLocality reads locality labels as istiod does.
func TestParseLocality(t *testing.T) {
	for in, want := range map[string]Locality{
		"":              {},
		"r":             {Region: "r"},
		"r.z":           {Region: "r", Zone: "z"},
		"r.z.s":         {"r", "z", "s"},
		"r/z.1/s":       {"r", "z.1", "s"},
		"r/z/s/extra":   {"r", "z", "s"},
		"us-east.1a.x.": {"us-east", "1a", "x"},
	} {
		if got := ParseLocality(in); got != want {
			t.Errorf("ParseLocality(%q) = %+v, want %+v", in, got, want)
		}
	}
	if got := LocalityLabel(map[string]string{LabelLocality: "a", LabelTopologyLocality: "b"}); got != "b" {
		t.Errorf("LocalityLabel = %q, want topology.istio.io/locality's", got)
	}
	for l, want := range map[Locality]string{{}: "", {Region: "r"}: "r", {Zone: "z"}: "/z", {"r", "z", "s"}: "r/z/s", {"r", "", "s"}: "r"} {
		if got := l.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", l, got, want)
		}
	}
}
