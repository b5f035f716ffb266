package loadkit

import (
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshplane/discovery/pkg/model"
)

func TestDecodeRefusesWhatEnvoyWould(t *testing.T) {
	hcmWithUnknownFilter := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name: "f", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/not.a.Known.Type"}},
	}}}}}
	for name, tc := range map[string]struct {
		typeURL string
		msg     proto.Message
		wantErr string
	}{
		"refuses a cluster without a name":                  {typeCDS, &clusterv3.Cluster{}, "invalid cds"},
		"refuses a listener whose filter config is unknown": {typeLDS, hcmWithUnknownFilter, "not.a.Known.Type"},
		"accepts Istio's own extensions, which Istio's Envoy knows": {typeLDS, &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "istio.metadata_exchange", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/istio.envoy.config.filter.network.metadata_exchange.Config"}},
		}}}}}, ""},
		"accepts a plain EDS cluster": {typeCDS, &clusterv3.Cluster{Name: "outbound|80||a.b.svc.cluster.local", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = decode(tc.typeURL, b)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSubSetCountsWhatIsMissing(t *testing.T) {
	s := newSubSet()
	s.ref(1)
	s.ref(2)
	s.ref(2)
	s.received(1)
	if s.missing != 1 {
		t.Fatalf("missing %d, want 1 (name 2)", s.missing)
	}
	s.unref(2)
	if s.missing != 1 {
		t.Fatalf("missing %d after dropping one of two references, want 1", s.missing)
	}
	s.unref(2)
	if s.missing != 0 {
		t.Fatalf("missing %d after dropping the last reference, want 0", s.missing)
	}
	sub, unsub := s.pending()
	if len(sub) != 1 || sub[0] != 1 || len(unsub) != 1 || unsub[0] != 2 {
		t.Fatalf("pending: subscribe %v, unsubscribe %v; want [1] and [2]", sub, unsub)
	}
	s.removed(1)
	if s.missing != 1 {
		t.Fatalf("missing %d after the server removed name 1, want 1", s.missing)
	}
}

func TestGeneratedProxiesAreValidIstioNodes(t *testing.T) {
	w, err := NewWorld(t.Context(), WorldOptions{Services: 7, Namespaces: 3, Ports: 3, EndpointsPer: 2, VirtualServices: 2, DomainSuffix: "cluster.local"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFleet(FleetOptions{Proxies: 15, IstioVersion: "1.28.0"}, w)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.proxies {
		md := p.node.GetMetadata()
		if md == nil {
			md = &structpb.Struct{}
		}
		px, err := model.ParseProxy(p.node.GetId(), md.AsMap())
		if err != nil {
			t.Fatalf("proxy %d: %v", p.idx, err)
		}
		if px.Type != model.ProxySidecar || px.Namespace == "" || len(px.IPs) != 1 {
			t.Fatalf("proxy %d parsed as %+v", p.idx, px)
		}
	}
}

func TestPercentilesUseNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := PercentilesOf(ds)
	if p.P50 != 100 || p.P90 != 180 || p.P99 != 198 || p.Max != 200 || p.Count != 200 {
		t.Fatalf("got %+v", p)
	}
}

// holdWorld gives proxy 0 exactly the world's configuration as the
// server's resources would: a cluster and endpoints per service port, one
// listener naming a route per HTTP port, routes with the current edit.
func holdWorld(t *testing.T, w *World, f *Fleet) {
	t.Helper()
	p := f.proxies[0]
	s := newSession(false, true)
	var cds, eds, rds []update
	listener := update{name: f.names.id("virtualOutbound")}
	for i, svc := range w.services {
		host := svc.host(w.opts.DomainSuffix)
		for _, port := range servicePorts[:w.opts.Ports] {
			c := f.names.id(clusterName(port.port, host))
			cds = append(cds, update{name: c, refs: []uint32{c}})
			eds = append(eds, update{name: c, fp: addressHash(svc.Endpoints)})
			if port.http {
				r := f.names.id(routeName(port.port, host))
				listener.refs = append(listener.refs, r)
				var fp uint64
				if i < w.opts.VirtualServices {
					fp = uint64(w.vsEdits[i]) + 1
				}
				rds = append(rds, update{name: r, fp: fp})
			}
		}
	}
	s.apply(typeCDS, cds, true)
	s.apply(typeEDS, eds, false)
	s.apply(typeLDS, []update{listener}, true)
	s.apply(typeRDS, rds, false)
	p.sess = s
}

func TestVerifyFindsWhatAProxyLacks(t *testing.T) {
	for name, tc := range map[string]struct {
		before, after func(w *World, n *Names) // changes to the world before and after the proxy got it
		want          string                   // "" when the proxy is correct
	}{
		"a proxy holding the world's configuration is correct": {},
		"endpoints the proxy has not got are stale": {
			after: func(w *World, n *Names) { _, _ = w.ChurnEndpoint(1, n) },
			want:  "stale endpoints for outbound|",
		},
		"a service the proxy has not got is missing": {
			after: func(w *World, n *Names) { _, _ = w.AddService(0, n) },
			want:  "no cluster outbound|",
		},
		"an older VirtualService edit is wrong": {
			after: func(w *World, n *Names) { _, _ = w.EditVirtualService(0, n) },
			want:  "holds VirtualService edit 0, want 1",
		},
		"the cluster of a removed service is wrong": {
			before: func(w *World, n *Names) { _, _ = w.AddService(0, n) },
			after:  func(w *World, n *Names) { _, _ = w.RemoveService(0, n) },
			want:   "cluster of a service that is gone: outbound|",
		},
	} {
		t.Run(name, func(t *testing.T) {
			w, err := NewWorld(t.Context(), WorldOptions{Services: 3, Namespaces: 1, Ports: 2, EndpointsPer: 3, VirtualServices: 1, DomainSuffix: "cluster.local"}, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewFleet(FleetOptions{Proxies: 1, Verify: true, IstioVersion: "1.28.0"}, w)
			if err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				tc.before(w, f.names)
			}
			holdWorld(t, w, f)
			if tc.after != nil {
				tc.after(w, f.names)
			}
			v := f.Verify(w)
			switch {
			case tc.want == "" && !v.OK():
				t.Fatalf("correct proxy found wrong: %v", v)
			case tc.want != "" && (v.OK() || len(v.Wrong) != 1 || !strings.Contains(v.Wrong[0], tc.want)):
				t.Fatalf("got %v, want one wrong proxy: %q", v, tc.want)
			}
		})
	}
}

func TestResumedSessionPresentsWhatItHolds(t *testing.T) {
	f := &Fleet{names: newNames(), versions: newNames()}
	s := newSession(true, false)
	c := f.names.id("outbound|80||a.ns.svc.cluster.local")
	s.apply(typeCDS, []update{{name: c, refs: []uint32{c}, version: f.versions.id("v1")}}, false)
	s.apply(typeEDS, []update{{name: c, version: f.versions.id("e1")}}, false)
	r := s.resume()
	if !r.resumed || r.gotCDS || r.complete {
		t.Fatalf("resumed session starts as %+v", r)
	}
	if got := r.held(typeCDS, f.names, f.versions); len(got) != 1 || got["outbound|80||a.ns.svc.cluster.local"] != "v1" {
		t.Fatalf("clusters presented: %v", got)
	}
	if got := r.held(typeEDS, f.names, f.versions); len(got) != 1 || got["outbound|80||a.ns.svc.cluster.local"] != "e1" {
		t.Fatalf("endpoints presented: %v", got)
	}
	// A cluster the server removes is no longer presented, nor its endpoints.
	r.remove(typeCDS, []uint32{c})
	if got := r.held(typeEDS, f.names, f.versions); len(got) != 0 {
		t.Fatalf("endpoints of a removed cluster presented: %v", got)
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestALaterChangeMeetsAnEarlierOnesExpectation(t *testing.T) {
	cla := func(addrs ...string) proto.Message {
		var lbs []*endpointv3.LbEndpoint
		for _, a := range addrs {
			lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: a}}},
			}}})
		}
		return &endpointv3.ClusterLoadAssignment{ClusterName: "c", Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}
	}
	routes := func(names ...string) proto.Message {
		var rs []*routev3.Route
		for _, n := range names {
			rs = append(rs, &routev3.Route{Name: n})
		}
		return &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{Name: "h", Routes: rs}}}
	}
	for name, tc := range map[string]struct {
		got  bool
		want bool
	}{
		"the churned address itself":                   {hasAddressFrom(cla("10.128.0.1", "10.128.0.9"), "10.128.0.9"), true},
		"a later churn's address in its place":         {hasAddressFrom(cla("10.128.0.1", "10.128.1.2"), "10.128.0.9"), true},
		"only the addresses from before the churn":     {hasAddressFrom(cla("10.128.0.1", "10.128.0.2"), "10.128.0.9"), false},
		"the edit's own route":                         {hasEditFrom(routes("edit-3", "default"), 3), true},
		"a later edit's route":                         {hasEditFrom(routes("edit-5", "default"), 3), true},
		"an earlier edit's route":                      {hasEditFrom(routes("edit-2", "default"), 3), false},
		"no edit route at all (the service's default)": {hasEditFrom(routes("default"), 0), false},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}
