package loadkit

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
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
			lbs = append(lbs, lbEndpoint(a))
		}
		return &endpointv3.ClusterLoadAssignment{ClusterName: "c", Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}
	}
	routes := func(names ...string) proto.Message {
		var rs []*routev3.Route
		for _, n := range names {
			rs = append(rs, testRoute(n))
		}
		return &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{Name: "h", Domains: []string{"*"}, Routes: rs}}}
	}
	for name, tc := range map[string]struct {
		m     proto.Message
		match func(*digest) bool
		want  bool
	}{
		"the churned address itself":                   {cla("10.128.0.1", "10.128.0.9"), func(d *digest) bool { return hasAddressFrom(d, "10.128.0.9") }, true},
		"a later churn's address in its place":         {cla("10.128.0.1", "10.128.1.2"), func(d *digest) bool { return hasAddressFrom(d, "10.128.0.9") }, true},
		"only the addresses from before the churn":     {cla("10.128.0.1", "10.128.0.2"), func(d *digest) bool { return hasAddressFrom(d, "10.128.0.9") }, false},
		"the edit's own route":                         {routes("edit-3", "default"), func(d *digest) bool { return hasEditFrom(d, 3) }, true},
		"a later edit's route":                         {routes("edit-5", "default"), func(d *digest) bool { return hasEditFrom(d, 3) }, true},
		"an earlier edit's route":                      {routes("edit-2", "default"), func(d *digest) bool { return hasEditFrom(d, 3) }, false},
		"no edit route at all (the service's default)": {routes("default"), func(d *digest) bool { return hasEditFrom(d, 0) }, false},
	} {
		t.Run(name, func(t *testing.T) {
			full, light := digests(t, tc.m)
			if got := tc.match(&full); got != tc.want {
				t.Fatalf("full decode: got %v, want %v", got, tc.want)
			}
			if got := tc.match(&light); got != tc.want {
				t.Fatalf("light decode: got %v, want %v", got, tc.want)
			}
		})
	}
}

func testRoute(name string) *routev3.Route {
	return &routev3.Route{Name: name, Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 200}}}
}

func lbEndpoint(addr string) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}},
	}}}
}

func typeOf(m proto.Message) string {
	switch m.(type) {
	case *clusterv3.Cluster:
		return typeCDS
	case *listenerv3.Listener:
		return typeLDS
	case *endpointv3.ClusterLoadAssignment:
		return typeEDS
	case *routev3.RouteConfiguration:
		return typeRDS
	}
	return ""
}

// digests marshals m and digests it both ways.
func digests(t *testing.T, m proto.Message) (full, light digest) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dm, routes, err := decode(typeOf(m), b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	full = digestOf(dm, routes)
	light, err = scan(typeOf(m), b)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return full, light
}

func TestLightDecodeReadsWhatTheFullDecodeDoes(t *testing.T) {
	hcm := func(route string, inline bool) *listenerv3.Filter {
		h := &hcmv3.HttpConnectionManager{StatPrefix: "s", HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}}}
		if inline {
			h.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: route}}
		} else {
			h.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: route, ConfigSource: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}}
		}
		return &listenerv3.Filter{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, h)}}
	}
	tcp := &listenerv3.Filter{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, &tcpv3.TcpProxy{StatPrefix: "s", ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: "c"}})}}
	for name, tc := range map[string]struct {
		m    proto.Message
		want digest
	}{
		"an EDS cluster names its service_name": {&clusterv3.Cluster{Name: "outbound|80||a", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "svc-a"}}, digest{name: "outbound|80||a", eds: "svc-a"}},
		"an EDS cluster without a service_name asks by its own name": {&clusterv3.Cluster{Name: "outbound|80||b", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}}, digest{name: "outbound|80||b", eds: "outbound|80||b"}},
		"a static cluster asks for no endpoints": {&clusterv3.Cluster{Name: "BlackHoleCluster", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "ignored"}}, digest{name: "BlackHoleCluster"}},
		"a listener's RDS names, default chain last, inline routes and TCP proxies skipped": {&listenerv3.Listener{Name: "0.0.0.0_80",
			FilterChains:       []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{hcm("80", false)}}, {Filters: []*listenerv3.Filter{tcp}}, {Filters: []*listenerv3.Filter{hcm("inline", true)}}, {Filters: []*listenerv3.Filter{hcm("a:80", false)}}},
			DefaultFilterChain: &listenerv3.FilterChain{Filters: []*listenerv3.Filter{hcm("fallback", false)}}},
			digest{name: "0.0.0.0_80", routes: []string{"80", "a:80", "fallback"}}},
		"endpoints across localities, one named rather than addressed": {&endpointv3.ClusterLoadAssignment{ClusterName: "svc-a", Endpoints: []*endpointv3.LocalityLbEndpoints{
			{Locality: &corev3.Locality{Region: "r"}, LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.0.0.1"), lbEndpoint("10.0.0.2")}},
			{LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.0.1.1"), {HostIdentifier: &endpointv3.LbEndpoint_EndpointName{EndpointName: "named"}}}},
		}}, digest{name: "svc-a", addrs: []string{"10.0.0.1", "10.0.0.2", "10.0.1.1", ""}}},
		"the highest edit over every virtual host": {&routev3.RouteConfiguration{Name: "a:80", VirtualHosts: []*routev3.VirtualHost{
			{Name: "h1", Domains: []string{"a"}, Routes: []*routev3.Route{testRoute("edit-4"), testRoute("default")}}, {Name: "h2", Domains: []string{"b"}, Routes: []*routev3.Route{testRoute("edit-11"), testRoute("edit-x")}},
		}}, digest{name: "a:80", edit: 12}},
	} {
		t.Run(name, func(t *testing.T) {
			full, light := digests(t, tc.m)
			if !full.equal(tc.want) {
				t.Errorf("full decode: %+v, want %+v", full, tc.want)
			}
			if !light.equal(tc.want) {
				t.Errorf("light decode: %+v, want %+v", light, tc.want)
			}
		})
	}
	t.Run("malformed bytes are refused", func(t *testing.T) {
		for _, typ := range []string{typeCDS, typeLDS, typeEDS, typeRDS} {
			if _, err := scan(typ, []byte{0x0a, 0x05, 'a'}); err == nil {
				t.Errorf("%s: a truncated field was accepted", shortType(typ))
			}
		}
	})
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// FuzzLightDecode: scan never panics, and on any resource that unmarshals
// it reads what the full decode's digest holds (the resource is marshaled
// again first, since scan does not merge repeated singular messages as
// proto.Unmarshal does, and no marshaler writes them).
func FuzzLightDecode(f *testing.F) {
	for _, m := range []proto.Message{
		&clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}, EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "s"}},
		&endpointv3.ClusterLoadAssignment{ClusterName: "c", Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.0.0.1")}}}},
		&routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{Name: "h", Routes: []*routev3.Route{{Name: "edit-1"}}}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(uint8(typeIndex[typeOf(m)]), b)
	}
	types := []string{typeCDS, typeEDS, typeLDS, typeRDS}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		typ := types[int(which)%len(types)]
		_, _ = scan(typ, b)
		m := newResource(typ)
		if proto.Unmarshal(b, m) != nil {
			return
		}
		var routes []string
		if l, ok := m.(*listenerv3.Listener); ok {
			var err error
			if routes, err = unpackListener(l); err != nil {
				return
			}
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return
		}
		light, err := scan(typ, again)
		if err != nil {
			t.Fatalf("scan refused what proto.Marshal wrote: %v", err)
		}
		if full := digestOf(m, routes); !light.equal(full) {
			t.Fatalf("light %+v, full %+v", light, full)
		}
	})
}

func TestLightCodecReadsResponsesAsTheProtoCodecDoes(t *testing.T) {
	res := func(name string) *anypb.Any {
		return mustAny(t, &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}})
	}
	codec := lightCodec{fallback: encoding.GetCodecV2(grpcproto.Name)}
	for name, msg := range map[string]proto.Message{
		"delta": &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "v", TypeUrl: typeCDS, Nonce: "7", RemovedResources: []string{"gone"},
			Resources: []*discovery.Resource{{Name: "a", Version: "1", Resource: res("a"), Aliases: []string{"x"}}, {Name: "b", Version: "2", Resource: res("b")}, {Name: "c"}}},
		"state of the world": &discovery.DiscoveryResponse{VersionInfo: "v", TypeUrl: typeCDS, Nonce: "7", Resources: []*anypb.Any{res("a"), res("b")}},
		"empty delta":        &discovery.DeltaDiscoveryResponse{},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			got := msg.ProtoReflect().New().Interface()
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, msg) {
				t.Fatalf("got %v, want %v", got, msg)
			}
			release(got)
			if _, ok := held.Load(got); ok {
				t.Fatal("the response's buffer is still held after release")
			}
		})
	}
	t.Run("a truncated response is refused", func(t *testing.T) {
		b, _ := proto.Marshal(&discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{{Name: "a", Resource: res("a")}}})
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:len(b)-3])}, &discovery.DeltaDiscoveryResponse{}); err == nil {
			t.Fatal("accepted")
		}
	})
}

// The anonymous part of a process's RSS grows with what it allocates and
// touches, and stays within its RSS.
func TestReadProcSeparatesAnonymousMemory(t *testing.T) {
	before, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.Anon <= 0 || before.Anon > before.RSS {
		t.Fatalf("anonymous %d bytes of RSS %d", before.Anon, before.RSS)
	}
	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	after, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if grew := after.Anon - before.Anon; grew < 48<<20 {
		t.Errorf("anonymous memory grew %d bytes after touching 64 MiB", grew)
	}
	runtime.KeepAlive(b)
}
