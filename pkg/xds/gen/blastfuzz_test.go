package gen

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// The blast-radius fuzzer's world is worldtest.Mesh(4, 2, 1): its configs
// name only the victims (ns-1's services); ns-0's are the bystanders.
var victims = []string{"svc-1.ns-1.svc.cluster.local", "svc-3.ns-1.svc.cluster.local"}

// str reads a string of up to 15 bytes from the input, mostly from a few
// that Envoy's rules care about, so that the fuzzer reaches them soon. It
// is UTF-8, as every string decoded from JSON or YAML is.
func (c *choices) str() string {
	if c.n(2) == 0 {
		return c.pick("", "x-a", "a\r\nb", "x y", ":path", "host", "%", "%HOSTNAME%", "100%%", "v\x7f", "\t", "*", "(", "@request.auth.claims.sub", "a\x00")
	}
	n := c.n(16)
	if n > len(c.b) {
		n = len(c.b)
	}
	s := strings.ToValidUTF8(string(c.b[:n]), "\uFFFD")
	c.b = c.b[n:]
	return s
}

func (c *choices) anyMatch() *networking.StringMatch {
	switch c.n(4) {
	case 0:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: c.str()}}
	case 1:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: c.str()}}
	case 2:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: c.str()}}
	}
	return &networking.StringMatch{}
}

func (c *choices) headerOps() *networking.Headers {
	ops := func() *networking.Headers_HeaderOperations {
		return &networking.Headers_HeaderOperations{
			Set: map[string]string{c.str(): c.str()}, Add: map[string]string{c.str(): c.str()}, Remove: []string{c.str()},
		}
	}
	return &networking.Headers{Request: ops(), Response: ops()}
}

// anyRoute is an http route whose strings are anything the input says.
func (c *choices) anyRoute() *networking.HTTPRoute {
	hr := &networking.HTTPRoute{}
	for i := c.n(3); i > 0; i-- {
		m := &networking.HTTPMatchRequest{Uri: c.anyMatch()}
		switch c.n(5) {
		case 1:
			m.Headers = map[string]*networking.StringMatch{c.str(): c.anyMatch()}
		case 2:
			m.WithoutHeaders = map[string]*networking.StringMatch{c.str(): c.anyMatch()}
		case 3:
			m.QueryParams = map[string]*networking.StringMatch{c.str(): c.anyMatch()}
		case 4:
			m.Method, m.Authority, m.Scheme = c.anyMatch(), c.anyMatch(), c.anyMatch()
		}
		hr.Match = append(hr.Match, m)
	}
	switch c.n(4) {
	case 0:
		hr.Redirect = &networking.HTTPRedirect{Uri: c.str(), Authority: c.str()}
		return hr
	case 1:
		hr.Rewrite = &networking.HTTPRewrite{Uri: c.str(), Authority: c.str()}
	case 2:
		hr.Rewrite = &networking.HTTPRewrite{UriRegexRewrite: &networking.RegexRewrite{Match: c.str(), Rewrite: c.str()}}
	}
	hr.Route = []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: victims[c.n(2)]}}}
	if c.n(2) == 1 {
		hr.Headers = c.headerOps()
	}
	if c.n(2) == 1 {
		hr.Route[0].Headers = c.headerOps()
	}
	if c.n(3) == 1 {
		hr.CorsPolicy = &networking.CorsPolicy{AllowOrigins: []*networking.StringMatch{c.anyMatch()}}
	}
	return hr
}

// blastConfigs turns input into VirtualServices and DestinationRules of
// ns-1, public, for the victims only.
func blastConfigs(data []byte) []model.Event {
	c := &choices{b: data}
	var evs []model.Event
	for i, h := range victims {
		if c.n(2) == 1 {
			vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-1", Name: fmt.Sprintf("vs%d", i), ResourceVersion: "1"}}
			vs.Spec.Hosts = []string{h}
			for j := 1 + c.n(3); j > 0; j-- {
				vs.Spec.Http = append(vs.Spec.Http, c.anyRoute())
			}
			evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: "ns-1", Name: vs.Name}, Object: vs})
		}
		if c.n(2) == 1 {
			dr := &networkingv1.DestinationRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-1", Name: fmt.Sprintf("dr%d", i), ResourceVersion: "1"}}
			dr.Spec.Host = h
			ch := &networking.LoadBalancerSettings_ConsistentHashLB{}
			switch c.n(3) {
			case 0:
				ch.HashKey = &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: c.str()}
			case 1:
				ch.HashKey = &networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie{HttpCookie: &networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie{Name: c.str(), Path: c.str()}}
			case 2:
				ch.HashKey = &networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName{HttpQueryParameterName: c.str()}
			}
			dr.Spec.TrafficPolicy = &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: ch}}}
			evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindDestinationRule, Namespace: "ns-1", Name: dr.Name}, Object: dr})
		}
	}
	return evs
}

// FuzzBlastRadius feeds configs with arbitrary strings (header names and
// values, matches, regexes, rewrites) for ns-1's services to the
// generator and checks that (1) every proxy still gets a configuration,
// (2) every resource not built for ns-1's services is what it is without
// those configs, and (3) generation refuses nothing that EnvoyRefusals
// (the rules /validate applies) accepts: validation and containment agree.
func FuzzBlastRadius(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 1, 1, 1, 0, 2, 1, 1, 1, 0, 2})
	f.Add([]byte("\x01\x01\x01\x01\x00\x03\x01\x01\x02\x01\x00\x01\x01\x01\x01\x00\x02"))
	base := model.NewStore(model.StoreOptions{})
	if _, err := base.Apply(worldtest.Mesh(4, 2, 1)...); err != nil {
		f.Fatal(err)
	}
	proxies := []*model.Proxy{sidecar(f, "ns-0"), sidecar(f, "ns-1"), grpcProxy(f, "ns-0")}
	want := map[string]*ClassConfig{}
	for _, p := range proxies {
		cc, err := newForTest(quietLog()).Class(base.World(), p, nil)
		if err != nil {
			f.Fatal(err)
		}
		want[p.Class()] = cc
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs := blastConfigs(data)
		store := model.NewStore(model.StoreOptions{})
		if _, err := store.Apply(append(worldtest.Mesh(4, 2, 1), evs...)...); err != nil {
			t.Skip(err) // not a config the sources would store
		}
		var predicted []string
		for _, ev := range evs {
			c := store.World().Config(ev.Key.Kind, ev.Key.Namespace, ev.Key.Name)
			predicted = append(predicted, EnvoyRefusals(c.Key.Kind, specOf(c))...)
		}
		for _, p := range proxies {
			g := newForTest(slog.New(slog.NewTextHandler(io.Discard, nil)))
			got, err := g.Class(store.World(), p, nil)
			if err != nil || got == nil {
				t.Fatalf("%s: no configuration published: %v", p.Class(), err)
			}
			for _, typeURL := range TypeURLs {
				w := want[p.Class()].Sets[typeURL]
				for _, n := range w.Names {
					if mentionsAny(n, victims) {
						continue
					}
					if r := got.Sets[typeURL].Get(n); r == nil || r.Hash != w.Get(n).Hash {
						t.Fatalf("%s: %s %s is not what it is without ns-1's configs", p.Class(), ShortType(typeURL), n)
					}
				}
			}
			if n := g.refusals.total(); n > 0 && len(predicted) == 0 {
				t.Fatalf("%s: generation refused %v resources of configs EnvoyRefusals accepts: %s", p.Class(), n, g.refusals.first())
			}
		}
	})
}

func mentionsAny(name string, hosts []string) bool {
	for _, h := range hosts {
		if strings.Contains(name, h) {
			return true
		}
	}
	return false
}

func specOf(c *model.Config) proto.Message {
	switch o := c.Object.(type) {
	case *networkingv1.VirtualService:
		return &o.Spec
	case *networkingv1.DestinationRule:
		return &o.Spec
	}
	return nil
}

// total is the number of refusals counted.
func (r *refusals) total() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n float64
	for _, v := range r.n {
		n += v
	}
	return n
}

// first is one logged refusal, for a failure message.
func (r *refusals) first() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.logged {
		return fmt.Sprintf("%q", k)
	}
	return ""
}
