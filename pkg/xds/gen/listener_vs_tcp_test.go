package gen

import (
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func TestChainClaims(t *testing.T) {
	tests := map[string]struct {
		first, second []string // addresses, then "sni:" names
		want          bool
		wantLeft      int // prefix ranges the second keeps
	}{
		"a second chain on the same address and no SNI is left out": {
			first: []string{"10.0.0.1"}, second: []string{"10.0.0.1"}, want: false,
		},
		"the same address with another SNI name is kept": {
			first: []string{"10.0.0.1", "sni:a"}, second: []string{"10.0.0.1", "sni:b"}, want: true, wantLeft: 1,
		},
		"an overlapping chain keeps only its unclaimed addresses": {
			first: []string{"10.0.0.1"}, second: []string{"10.0.0.1", "10.0.0.2"}, want: true, wantLeft: 1,
		},
		"an SNI-only chain with a claimed name is left out": {
			first: []string{"sni:a"}, second: []string{"sni:a"}, want: false,
		},
	}
	build := func(spec []string) *listenerv3.FilterChainMatch {
		m := &listenerv3.FilterChainMatch{}
		var addrs []string
		for _, s := range spec {
			if name, ok := strings.CutPrefix(s, "sni:"); ok {
				m.ServerNames = append(m.ServerNames, name)
			} else {
				addrs = append(addrs, s)
			}
		}
		m.PrefixRanges = addressRanges(addrs)
		return m
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := chainClaims{}
			if !c.claim(build(tc.first)) {
				t.Fatal("the first chain was not kept")
			}
			m := build(tc.second)
			if got := c.claim(m); got != tc.want {
				t.Fatalf("claim = %v, want %v", got, tc.want)
			}
			if tc.want && len(m.PrefixRanges) != tc.wantLeft {
				t.Errorf("%d prefix ranges left, want %d", len(m.PrefixRanges), tc.wantLeft)
			}
		})
	}
}

func TestTCPRouteHolds(t *testing.T) {
	addrs := []string{"10.96.0.5"}
	tests := map[string]struct {
		match []*networking.L4MatchAttributes
		want  bool
	}{
		"a route without matches holds":              {want: true},
		"a match on another port does not hold":      {match: []*networking.L4MatchAttributes{{Port: 81}}, want: false},
		"a match on the port holds":                  {match: []*networking.L4MatchAttributes{{Port: 80}}, want: true},
		"a subnet holding the address holds":         {match: []*networking.L4MatchAttributes{{DestinationSubnets: []string{"10.96.0.0/16"}}}, want: true},
		"a subnet elsewhere does not hold":           {match: []*networking.L4MatchAttributes{{DestinationSubnets: []string{"192.168.0.0/16", "bad"}}}, want: false},
		"a single address as subnet holds":           {match: []*networking.L4MatchAttributes{{DestinationSubnets: []string{"10.96.0.5"}}}, want: true},
		"a match for a gateway only does not hold":   {match: []*networking.L4MatchAttributes{{Gateways: []string{"edge"}}}, want: false},
		"any of several matches holding is enough":   {match: []*networking.L4MatchAttributes{{Port: 81}, {Gateways: []string{"mesh"}}}, want: true},
		"sourceLabels among the proxy's labels hold": {match: []*networking.L4MatchAttributes{{SourceLabels: map[string]string{"app": "web"}}}, want: true},
		"sourceLabels the proxy lacks do not hold":   {match: []*networking.L4MatchAttributes{{SourceLabels: map[string]string{"app": "web", "version": "v2"}}}, want: false},
		"the proxy's sourceNamespace holds":          {match: []*networking.L4MatchAttributes{{SourceNamespace: "default"}}, want: true},
		"another sourceNamespace does not hold":      {match: []*networking.L4MatchAttributes{{SourceNamespace: "other"}}, want: false},
		"a listed gateway does not excuse sourceLabels": {
			match: []*networking.L4MatchAttributes{{Gateways: []string{"mesh"}, SourceLabels: map[string]string{"app": "db"}}}, want: false,
		},
	}
	p := sidecar(t, "default")
	p.Metadata.Labels = map[string]string{"app": "web", "version": "v1"}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tcpRouteHolds(&networking.TCPRoute{Match: tc.match}, "default", 80, addrs, p); got != tc.want {
				t.Errorf("tcpRouteHolds = %v, want %v", got, tc.want)
			}
		})
	}
}

func tcpVSEvent(ns, name, host, rv, subset string) model.Event {
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	vs.Spec.Hosts = []string{host}
	vs.Spec.Tcp = []*networking.TCPRoute{{Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: host, Subset: subset}}}}}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: name}, Object: vs}
}

// listenerCluster returns the cluster of the tcp_proxy of the chain named
// chain in listener name.
func listenerCluster(t *testing.T, cc *ClassConfig, name, chain string) string {
	t.Helper()
	r := cc.Sets[ListenerType].Get(name)
	if r == nil {
		t.Fatalf("no listener %s", name)
	}
	m, err := r.Any.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	for _, fc := range m.(*listenerv3.Listener).FilterChains {
		if fc.Name != chain {
			continue
		}
		tp := &tcpv3.TcpProxy{}
		if err := fc.Filters[len(fc.Filters)-1].GetTypedConfig().UnmarshalTo(tp); err != nil {
			t.Fatal(err)
		}
		return tp.GetCluster()
	}
	t.Fatalf("listener %s has no chain %s", name, chain)
	return ""
}

func TestTCPRouteEditResendsPortListener(t *testing.T) {
	evs, err := worldtest.Decode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: default}\n" +
		"spec:\n  clusterIP: 10.96.0.9\n  ports:\n  - {name: tcp, port: 5432}\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "default")
	const host, listener = "db.default.svc.cluster.local", "0.0.0.0_5432"
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := listenerCluster(t, prev, listener, host+":5432"); got != "outbound|5432||"+host {
		t.Fatalf("without a VirtualService the chain goes to %s", got)
	}
	for i, subset := range []string{"v1", "v2"} {
		if _, err := store.Apply(tcpVSEvent("default", "db", host, itoa(int32(i+1)), subset)); err != nil {
			t.Fatal(err)
		}
		next, err := g.Class(store.World(), p, prev)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := listenerCluster(t, next, listener, host+":5432"), "outbound|5432|"+subset+"|"+host; got != want {
			t.Errorf("after the VirtualService names %s the chain goes to %s, want %s", subset, got, want)
		}
		if !slices.Contains(next.Changed[ListenerType], listener) {
			t.Errorf("changed listeners %v, want %s among them", next.Changed[ListenerType], listener)
		}
		prev = next
	}
}
