package gen

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// inboundWorld is two namespaces, each with a Service "web" of an HTTP and
// a gRPC port selecting app=web.
func inboundWorld(t *testing.T) *model.World {
	t.Helper()
	yaml := ""
	for _, ns := range []string{"ns-a", "ns-b"} {
		yaml += fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %s}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: grpc, port: 7070, targetPort: 7070}
`, ns)
	}
	return applyYAML(t, model.NewStore(model.StoreOptions{}), yaml)
}

// The inbound listeners of proxies of two namespaces whose ports and
// policies are the same are views of one set when their classes are
// shared, and each is served byte for byte what it is without sharing,
// naming its own namespace and canonical service.
func TestInboundListenerSharedAcrossNamespaces(t *testing.T) {
	w := inboundWorld(t)
	proxy := func(ns, name string) *model.Proxy {
		p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.9.0.1~%s-0.%s~%s.svc.cluster.local", name, ns, ns),
			map[string]any{model.MetaIstioVersion: "1.32.0", "NAMESPACE": ns,
				model.MetaLabels: map[string]any{"app": "web", canonicalNameLabel: name}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ps := []*model.Proxy{proxy("ns-a", "web-one"), proxy("ns-b", "web-two")}
	for _, perAddress := range []bool{false, true} {
		what := fmt.Sprintf("per-address=%v", perAddress)
		g := sharedGen(t, perAddress)
		plainOpts := DefaultOptions(quietLog())
		plainOpts.ListenersPerAddress = perAddress
		plain, err := New(plainOpts)
		if err != nil {
			t.Fatal(err)
		}
		var bases []*Set
		for _, p := range ps {
			base := mustClass(t, g, w, p, nil)
			if !base.Shared() {
				t.Fatalf("%s: the class of %s is not shared", what, p.ID)
			}
			own := g.Proxy(w, p, mustVariant(t, g, base, w, p, nil)).Own
			want := plain.Proxy(w, p, mustClass(t, plain, w, p, nil)).Own
			sameSets(t, what+" "+p.ID, own, want)
			ls := own[ListenerType]
			if ls.view == nil {
				t.Fatalf("%s: %s's inbound listeners are its own, not a view", what, p.ID)
			}
			bases = append(bases, ls.view.base)
			noPlaceholders(t, what, ls)
			got := ls.Get(VirtualInbound).Wire().GetValue()
			for _, value := range []string{p.Metadata.Namespace, p.Labels()[canonicalNameLabel]} {
				if !bytes.Contains(got, []byte(value)) {
					t.Errorf("%s: %s's inbound listener does not name %q", what, p.ID, value)
				}
			}
			if h, _ := ls.Hash(VirtualInbound); h == want[ListenerType].Get(VirtualInbound).Hash {
				t.Errorf("%s: a view's version is its listener's hash; want the base's with the view's suffix", what)
			}
		}
		if bases[0] != bases[1] {
			t.Errorf("%s: the two proxies' inbound listeners are views of two sets", what)
		}
		// The two proxies' own sets differ, and the difference is the
		// listener: what a push to a proxy moved between them sends.
		a := g.Proxy(w, ps[0], mustVariant(t, g, mustClass(t, g, w, ps[0], nil), w, ps[0], nil)).Own[ListenerType]
		b := g.Proxy(w, ps[1], mustVariant(t, g, mustClass(t, g, w, ps[1], nil), w, ps[1], nil)).Own[ListenerType]
		if d := DiffNames(a, b); len(d) != 1 || d[0] != VirtualInbound {
			t.Errorf("%s: DiffNames of two views = %v, want [%s]", what, d, VirtualInbound)
		}
		if d := DiffNames(a, a); len(d) != 0 {
			t.Errorf("%s: DiffNames of a view with itself = %v", what, d)
		}
	}
}
