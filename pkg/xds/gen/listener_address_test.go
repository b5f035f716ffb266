package gen

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func chainOn(name string, m *listenerv3.FilterChainMatch) *listenerv3.FilterChain {
	return &listenerv3.FilterChain{Name: name, FilterChainMatch: m}
}

func prefix(a string, bits uint32) *corev3.CidrRange {
	return &corev3.CidrRange{AddressPrefix: a, PrefixLen: wrapperspb.UInt32(bits)}
}

func chainsNamed(cs []*listenerv3.FilterChain) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.GetName())
	}
	return out
}

// TestSplitListenerByAddress: the chains that name exact addresses move
// to a listener per address; what else can match a connection to an
// address goes with it (the other chains naming it, the default chain
// when a chain may not match) and what may match other addresses stays.
func TestSplitListenerByAddress(t *testing.T) {
	port := func() *listenerv3.Listener {
		return &listenerv3.Listener{
			Name:                "0.0.0.0_80",
			Address:             socketAddress("0.0.0.0", 80),
			BindToPort:          wrapperspb.Bool(false),
			ListenerFilters:     []*listenerv3.ListenerFilter{{Name: "envoy.filters.listener.http_inspector"}},
			AdditionalAddresses: []*listenerv3.AdditionalAddress{{Address: socketAddress("::", 80)}},
			FilterChains: []*listenerv3.FilterChain{
				chainOn("a", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{prefix("10.0.0.1", 32)}}),
				chainOn("b-http", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{prefix("10.0.0.2", 32)}, ApplicationProtocols: []string{"http/1.1"}}),
				chainOn("b-tcp", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{prefix("10.0.0.2", 32)}}),
				chainOn("mixed", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{prefix("10.0.0.3", 32), prefix("192.168.0.0", 16)}}),
				chainOn("taken", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{prefix("10.0.0.4", 32)}}),
				chainOn("v6", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{prefix("fd00::1", 128), prefix("10.0.0.1", 32)}}),
				chainOn("addressless", nil),
			},
			DefaultFilterChain: chainOn("default", nil),
		}
	}
	taken := func(n string) bool { return n == "10.0.0.4_80" }
	// split runs splitResource on l marshaled and decodes what it made.
	split := func(l *listenerv3.Listener) (*listenerv3.Listener, []*listenerv3.Listener) {
		t.Helper()
		r, err := NewResource(l.Name, ListenerType, l)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := splitResource(r, taken, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sp == nil {
			return l, nil
		}
		decode := func(r *Resource) *listenerv3.Listener {
			out := &listenerv3.Listener{}
			if err := r.Any.UnmarshalTo(out); err != nil {
				t.Fatal(err)
			}
			if out.Name != r.Name {
				t.Errorf("resource %s holds listener %s", r.Name, out.Name)
			}
			return out
		}
		var addrs []*listenerv3.Listener
		for _, a := range sp.addrs {
			addrs = append(addrs, decode(a))
		}
		return decode(sp.rest), addrs
	}
	rest, addrs := split(port())

	if got, want := chainsNamed(rest.FilterChains), []string{"mixed", "taken", "addressless"}; !slices.Equal(got, want) {
		t.Errorf("port listener keeps %v, want %v", got, want)
	}
	if rest.DefaultFilterChain.GetName() != "default" || rest.Name != "0.0.0.0_80" || len(rest.AdditionalAddresses) != 1 {
		t.Errorf("port listener %s lost its default chain: %v", rest.Name, rest.DefaultFilterChain)
	}
	want := []struct {
		name    string
		chains  []string
		deflt   bool
		address string
	}{
		{"10.0.0.1_80", []string{"a", "v6"}, false, "10.0.0.1"},
		{"10.0.0.2_80", []string{"b-http", "b-tcp"}, true, "10.0.0.2"},
		{"10.0.0.3_80", []string{"mixed"}, false, "10.0.0.3"},
		{"fd00::1_80", []string{"v6"}, false, "fd00::1"},
	}
	if len(addrs) != len(want) {
		t.Fatalf("got %d address listeners, want %d", len(addrs), len(want))
	}
	for i, w := range want {
		a := addrs[i]
		if a.Name != w.name || !slices.Equal(chainsNamed(a.FilterChains), w.chains) {
			t.Errorf("listener %d: %s with %v, want %s with %v", i, a.Name, chainsNamed(a.FilterChains), w.name, w.chains)
		}
		if (a.DefaultFilterChain != nil) != w.deflt {
			t.Errorf("%s: default chain %v, want one: %v (a chain that may not match needs it)", a.Name, a.DefaultFilterChain, w.deflt)
		}
		sa := a.GetAddress().GetSocketAddress()
		if sa.GetAddress() != w.address || sa.GetPortValue() != 80 || a.GetBindToPort().GetValue() {
			t.Errorf("%s: on %s:%d bind %v, want %s:80 not bound", a.Name, sa.GetAddress(), sa.GetPortValue(), a.GetBindToPort().GetValue(), w.address)
		}
		if len(a.ListenerFilters) != 1 || len(a.AdditionalAddresses) != 0 {
			t.Errorf("%s: listener filters %v, want the port listener's", a.Name, a.ListenerFilters)
		}
		if err := a.ValidateAll(); err != nil {
			t.Errorf("%s: %v", a.Name, err)
		}
	}

	// A chain matched by destination port comes before every prefix in
	// Envoy's order: such a listener stays whole.
	l := port()
	l.FilterChains = append(l.FilterChains, chainOn("by-port", &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(80)}))
	if _, addrs := split(l); len(addrs) != 0 {
		t.Errorf("a listener with a destination-port chain was split into %d", len(addrs))
	}
	// A listener that binds its port is not handed connections: its
	// address listeners would bind service addresses.
	for _, bind := range []*wrapperspb.BoolValue{nil, wrapperspb.Bool(true)} {
		l := port()
		l.BindToPort = bind
		if _, addrs := split(l); len(addrs) != 0 {
			t.Errorf("a listener with bind_to_port %v was split into %d", bind, len(addrs))
		}
	}
}

// TestListenersPerAddress: with the option, a service added or removed
// changes the listeners of its address alone (one per port), a route edit
// none, and every generation equals one from scratch; NACK provenance
// of an address listener names what its chains were built from.
func TestListenersPerAddress(t *testing.T) {
	store := loadWorld(t, `
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec: {clusterIP: 10.96.0.1, ports: [{name: http, port: 80}, {name: tcp, port: 9000}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: ns}
spec: {clusterIP: 10.96.0.2, ports: [{name: http, port: 80}, {name: tcp, port: 9000}]}
---
apiVersion: v1
kind: Service
metadata: {name: h, namespace: ns}
spec: {clusterIP: None, ports: [{name: http, port: 80}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: b, namespace: ns}
spec:
  hosts: [b]
  tcp:
  - route: [{destination: {host: a}}]
`)
	// d has the ports c will have (80 and grpc 7070).
	if _, err := store.Apply(worldtest.Service("ns", "d", "10.96.0.4")); err != nil {
		t.Fatal(err)
	}
	g, o := newWithListeners(t, true)
	p := sidecar(t, "ns")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"10.96.0.1_80", "10.96.0.2_80", "10.96.0.1_9000", "10.96.0.2_9000", "0.0.0.0_80", "0.0.0.0_9000"} {
		if prev.Sets[ListenerType].Get(n) == nil {
			t.Errorf("no listener %s in %v", n, prev.Sets[ListenerType].Names)
		}
	}
	if got := (&ProxyConfig{Class: prev}).Sources(ListenerType, "10.96.0.2_9000"); !slices.ContainsFunc(got, func(r ConfigRef) bool { return r.Key.Kind == model.KindVirtualService && r.Key.Name == "b" }) {
		t.Errorf("Sources of 10.96.0.2_9000 = %v, want b's VirtualService (its tcp route is on the chain)", got)
	}

	edit, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a]
  http:
  - route: [{destination: {host: b}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		evs  []model.Event
		want []string
	}{
		{"a service added", []model.Event{worldtest.Service("ns", "c", "10.96.0.3")}, []string{"10.96.0.3_7070", "10.96.0.3_80"}},
		{"a route edit", edit, nil},
		{"the service removed", []model.Event{{Op: model.OpDelete, Key: worldtest.Service("ns", "c", "10.96.0.3").Key}}, []string{"10.96.0.3_7070", "10.96.0.3_80"}},
	}
	for _, st := range steps {
		if _, err := store.Apply(st.evs...); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		next, err := g.Class(store.World(), p, prev)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := next.Changed[ListenerType]; !slices.Equal(got, st.want) {
			t.Errorf("%s: listeners changed %v, want %v", st.name, got, st.want)
		}
		sameAsFreshWith(t, o, st.name, next, store.World(), p)
		prev = next
	}
}
