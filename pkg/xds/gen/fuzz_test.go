package gen

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// choices reads fuzz input as a stream of small decisions (0 once spent).
type choices struct{ b []byte }

func (c *choices) n(max int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0]) % max
	c.b = c.b[1:]
	return v
}

func (c *choices) pick(opts ...string) string { return opts[c.n(len(opts))] }

func (c *choices) match() *networking.StringMatch {
	switch c.n(4) {
	case 0:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: c.pick("a", "/x", "jason")}}
	case 1:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: c.pick("/", "/api", "b")}}
	case 2:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: c.pick(".*", "/v[0-9]+/.*", "^a|b$")}}
	}
	return &networking.StringMatch{}
}

func (c *choices) dur() *durationpb.Duration {
	return durationpb.New(time.Duration(1+c.n(100)) * 100 * time.Millisecond)
}

func (c *choices) policy() *networking.TrafficPolicy {
	tp := &networking.TrafficPolicy{}
	switch c.n(4) {
	case 1:
		tp.LoadBalancer = &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_SimpleLB(c.n(6))}}
	case 2:
		tp.LoadBalancer = &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
			HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}, MinimumRingSize: uint64(c.n(2000)),
		}}}
	}
	if c.n(2) == 1 {
		tp.ConnectionPool = &networking.ConnectionPoolSettings{
			Tcp:  &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: int32(c.n(200)), ConnectTimeout: c.dur()},
			Http: &networking.ConnectionPoolSettings_HTTPSettings{Http2MaxRequests: int32(c.n(200)), MaxRequestsPerConnection: int32(c.n(20)), IdleTimeout: c.dur()},
		}
	}
	if c.n(2) == 1 {
		tp.OutlierDetection = &networking.OutlierDetection{
			Consecutive_5XxErrors: wrapperspb.UInt32(uint32(c.n(10))), Interval: c.dur(), BaseEjectionTime: c.dur(),
			MaxEjectionPercent: int32(c.n(101)), MinHealthPercent: int32(c.n(101)),
		}
	}
	if m := c.n(5); m > 0 {
		tp.Tls = &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_TLSmode(m - 1), Sni: c.pick("", "a.example"), SubjectAltNames: []string{c.pick("a.example", "spiffe://cluster.local/ns/ns-0/sa/a")}}
	}
	return tp
}

func (c *choices) httpRoute(hosts []string) *networking.HTTPRoute {
	hr := &networking.HTTPRoute{}
	for i := c.n(3); i > 0; i-- {
		m := &networking.HTTPMatchRequest{Uri: c.match(), Headers: map[string]*networking.StringMatch{"h": c.match()}}
		if c.n(2) == 1 {
			m.QueryParams = map[string]*networking.StringMatch{"q": c.match()}
			m.WithoutHeaders = map[string]*networking.StringMatch{"w": c.match()}
		}
		switch c.n(4) {
		case 1:
			m.SourceLabels = map[string]string{"app": c.pick("client", "other")}
		case 2:
			m.SourceNamespace = c.pick("ns-0", "ns-1")
		case 3:
			m.Gateways = []string{c.pick("mesh", "edge")}
		}
		hr.Match = append(hr.Match, m)
	}
	switch c.n(6) {
	case 5:
		hr.Delegate = &networking.Delegate{Name: c.pick("d0", "d1", "d2", "nothing"), Namespace: c.pick("", "ns-1")}
		return hr
	case 0:
		hr.Redirect = &networking.HTTPRedirect{Uri: "/r", RedirectCode: uint32(c.pick("301", "302", "307", "308")[2]-'0') + 300}
		return hr
	case 1:
		hr.DirectResponse = &networking.HTTPDirectResponse{Status: uint32(200 + c.n(400))}
		return hr
	}
	for i := 1 + c.n(3); i > 0; i-- {
		hr.Route = append(hr.Route, &networking.HTTPRouteDestination{
			Destination: &networking.Destination{Host: hosts[c.n(len(hosts))], Subset: c.pick("", "v1", "v2")},
			Weight:      int32(c.n(101)),
		})
	}
	if c.n(2) == 1 {
		hr.Timeout, hr.Retries = c.dur(), &networking.HTTPRetry{Attempts: int32(c.n(5)), PerTryTimeout: c.dur()}
	}
	if c.n(2) == 1 {
		hr.Fault = &networking.HTTPFaultInjection{
			Delay: &networking.HTTPFaultInjection_Delay{HttpDelayType: &networking.HTTPFaultInjection_Delay_FixedDelay{FixedDelay: c.dur()}, Percentage: &networking.Percent{Value: float64(c.n(101))}},
			Abort: &networking.HTTPFaultInjection_Abort{ErrorType: &networking.HTTPFaultInjection_Abort_GrpcStatus{GrpcStatus: c.pick("UNAVAILABLE", "14", "internal")}},
		}
	}
	if c.n(2) == 1 {
		hr.Mirror, hr.MirrorPercentage = &networking.Destination{Host: hosts[0]}, &networking.Percent{Value: float64(c.n(101))}
		hr.Headers = &networking.Headers{Request: &networking.Headers_HeaderOperations{Set: map[string]string{"x": "1"}, Remove: []string{"y"}}}
		hr.CorsPolicy = &networking.CorsPolicy{AllowOrigins: []*networking.StringMatch{c.match()}, AllowMethods: []string{"GET"}, MaxAge: c.dur()}
	}
	return hr
}

// fuzzSniffed adds to worldtest.Mesh(4, 2, 1) ports that sidecars sniff:
// an unnamed port of a Service with an address, one sharing port 80 with
// the HTTP services, a headless one with an endpoint and a ServiceEntry
// port without protocol nor address.
const fuzzSniffed = `apiVersion: v1
kind: Service
metadata: {name: legacy, namespace: ns-0, resourceVersion: "1"}
spec:
  clusterIP: 10.96.200.1
  ports: [{port: 9000, name: a}, {port: 80, name: b}]
---
apiVersion: v1
kind: Service
metadata: {name: peers, namespace: ns-1, resourceVersion: "1"}
spec:
  clusterIP: None
  ports: [{port: 7100}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: peers-1, namespace: ns-1, labels: {kubernetes.io/service-name: peers}}
addressType: IPv4
ports: [{port: 7100}]
endpoints: [{addresses: [10.1.9.7]}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: ns-0, resourceVersion: "1"}
spec:
  hosts: [ext.example.com]
  resolution: DNS
  ports: [{number: 9000, name: x}]
`

// fuzzConfigs turns fuzz input into DestinationRules and VirtualServices
// for the services of worldtest.Mesh(4, 2, 1) and fuzzSniffed.
func fuzzConfigs(data []byte) []model.Event {
	c := &choices{b: data}
	hosts := []string{
		"svc-0.ns-0.svc.cluster.local", "svc-1.ns-1.svc.cluster.local", "svc-2", "svc-3.ns-1.svc.cluster.local",
		"legacy.ns-0.svc.cluster.local", "peers.ns-1.svc.cluster.local", "ext.example.com",
	}
	var evs []model.Event
	for i, h := range hosts {
		if c.n(2) == 1 {
			dr := &networkingv1.DestinationRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: fmt.Sprintf("dr%d", i), ResourceVersion: "1"}}
			dr.Spec.Host, dr.Spec.TrafficPolicy = h, c.policy()
			dr.Spec.Subsets = []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}, TrafficPolicy: c.policy()}, {Name: "v2", Labels: map[string]string{"version": "v2"}}}
			evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindDestinationRule, Namespace: "ns-0", Name: dr.Name}, Object: dr})
		}
		if c.n(2) == 1 {
			vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: fmt.Sprintf("vs%d", i), ResourceVersion: "1"}}
			vs.Spec.Hosts = []string{h}
			for j := 1 + c.n(3); j > 0; j-- {
				vs.Spec.Http = append(vs.Spec.Http, c.httpRoute(hosts))
			}
			evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: "ns-0", Name: vs.Name}, Object: vs})
		}
	}
	return append(evs, c.delegates(hosts)...)
}

// delegates are VirtualServices without hosts, in either namespace, that
// the roots above may name; their routes may delegate again (refused).
func (c *choices) delegates(hosts []string) []model.Event {
	var evs []model.Event
	for i := c.n(4); i > 0; i-- {
		ns := c.pick("ns-0", "ns-1")
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.pick("d0", "d1", "d2"), ResourceVersion: "1"}}
		if c.n(2) == 1 {
			vs.Spec.ExportTo = []string{c.pick(".", "ns-0", "*")}
		}
		for j := 1 + c.n(3); j > 0; j-- {
			vs.Spec.Http = append(vs.Spec.Http, c.httpRoute(hosts))
		}
		evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: vs.Name}, Object: vs})
	}
	return evs
}

// FuzzGenerate feeds random valid DestinationRules and VirtualServices
// (delegates and sourceLabels/sourceNamespace matches among them) to the
// generator, with sniffed ports among the services: it must neither panic
// nor leave out an invalid resource nor publish an inconsistent class,
// for sidecars and proxyless gRPC alike.
func FuzzGenerate(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{1}, 200))
	f.Add([]byte("\x01\x02\x01\x03\x01\x01\x02\x04\x01\x01\x01\x01\x03\x01\x02\x01\x00\x01\x01\x01\x01\x01\x01\x04"))
	sniffedEvs, err := worldtest.Decode([]byte(fuzzSniffed))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		store := model.NewStore(model.StoreOptions{})
		evs := append(append(worldtest.Mesh(4, 2, 1), sniffedEvs...), fuzzConfigs(data)...)
		if _, err := store.Apply(evs...); err != nil {
			t.Skip(err)
		}
		labelled := sidecar(t, "ns-1")
		labelled.Metadata.Labels = map[string]string{"app": "client"}
		for _, p := range []*model.Proxy{sidecar(t, "ns-0"), labelled, grpcProxy(t, "ns-0")} {
			var logs bytes.Buffer
			g := newForTest(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})))
			if _, err := g.Class(store.World(), p, nil); err != nil {
				t.Fatalf("%s: %v", p.Class(), err)
			}
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("%s: %s", p.Class(), logs.String())
			}
		}
	})
}

func grpcProxy(t testing.TB, ns string) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy("sidecar~127.0.0.1~client."+ns+"~"+ns+".svc.cluster.local", map[string]any{"GENERATOR": "grpc", "NAMESPACE": ns})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
