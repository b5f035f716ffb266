package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func smExact(s string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: s}}
}

func smPrefix(s string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: s}}
}

func smRegex(s string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: s}}
}

func TestStringMatchConflict(t *testing.T) {
	tests := map[string]struct {
		root, leaf *networking.StringMatch
		conflict   bool
	}{
		"nothing set on either side fits":           {},
		"a leaf under an unset root fits":           {leaf: smPrefix("/a")},
		"an unset leaf takes the root's":            {root: smPrefix("/a")},
		"a longer prefix under a prefix fits":       {root: smPrefix("/api"), leaf: smPrefix("/api/v1")},
		"a shorter prefix under a prefix conflicts": {root: smPrefix("/api/v1"), leaf: smPrefix("/api"), conflict: true},
		"an exact value under a prefix fits":        {root: smPrefix("/api"), leaf: smExact("/api/x")},
		"an exact value outside a prefix conflicts": {root: smPrefix("/api"), leaf: smExact("/web"), conflict: true},
		"the same exact value fits":                 {root: smExact("/a"), leaf: smExact("/a")},
		"another exact value conflicts":             {root: smExact("/a"), leaf: smExact("/b"), conflict: true},
		"a prefix under an exact root conflicts":    {root: smExact("/a"), leaf: smPrefix("/a"), conflict: true},
		"a regex leaf conflicts with a prefix root": {root: smPrefix("/a"), leaf: smRegex("/a.*"), conflict: true},
		"any leaf conflicts with a regex root":      {root: smRegex(".*"), leaf: smPrefix("/a"), conflict: true},
		"two regexes conflict":                      {root: smRegex(".*"), leaf: smRegex("a"), conflict: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := stringMatchConflict(tc.root, tc.leaf); got != tc.conflict {
				t.Errorf("stringMatchConflict = %v, want %v", got, tc.conflict)
			}
		})
	}
}

func TestMatchConflict(t *testing.T) {
	tests := map[string]struct {
		root, leaf *networking.HTTPMatchRequest
		conflict   bool
	}{
		"a header the root does not check fits": {
			root: &networking.HTTPMatchRequest{Uri: smPrefix("/")},
			leaf: &networking.HTTPMatchRequest{Headers: map[string]*networking.StringMatch{"x": smExact("1")}},
		},
		"a header value the root excludes conflicts": {
			root:     &networking.HTTPMatchRequest{Headers: map[string]*networking.StringMatch{"x": smExact("1")}},
			leaf:     &networking.HTTPMatchRequest{Headers: map[string]*networking.StringMatch{"x": smExact("2")}},
			conflict: true,
		},
		"a query parameter outside the root's prefix conflicts": {
			root:     &networking.HTTPMatchRequest{QueryParams: map[string]*networking.StringMatch{"q": smPrefix("a")}},
			leaf:     &networking.HTTPMatchRequest{QueryParams: map[string]*networking.StringMatch{"q": smExact("b")}},
			conflict: true,
		},
		"another port conflicts": {
			root: &networking.HTTPMatchRequest{Port: 80}, leaf: &networking.HTTPMatchRequest{Port: 81}, conflict: true,
		},
		"a port under a root without one fits": {
			root: &networking.HTTPMatchRequest{}, leaf: &networking.HTTPMatchRequest{Port: 81},
		},
		"ignoreUriCase must agree": {
			root: &networking.HTTPMatchRequest{IgnoreUriCase: true}, leaf: &networking.HTTPMatchRequest{}, conflict: true,
		},
		"another sourceNamespace conflicts": {
			root: &networking.HTTPMatchRequest{SourceNamespace: "a"}, leaf: &networking.HTTPMatchRequest{SourceNamespace: "b"}, conflict: true,
		},
		"a sourceLabel value the root excludes conflicts": {
			root:     &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "a"}},
			leaf:     &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "b", "v": "1"}},
			conflict: true,
		},
		"more sourceLabels fit": {
			root: &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "a"}},
			leaf: &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "a", "v": "1"}},
		},
		"gateways the root does not list conflict": {
			root: &networking.HTTPMatchRequest{Gateways: []string{"ns/a"}}, leaf: &networking.HTTPMatchRequest{Gateways: []string{"ns/b"}}, conflict: true,
		},
		"fewer gateways fit": {
			root: &networking.HTTPMatchRequest{Gateways: []string{"ns/a", "mesh"}}, leaf: &networking.HTTPMatchRequest{Gateways: []string{"mesh"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := matchConflict(tc.root, tc.leaf); got != tc.conflict {
				t.Errorf("matchConflict = %v, want %v", got, tc.conflict)
			}
		})
	}
}

func TestMergeMatches(t *testing.T) {
	root := []*networking.HTTPMatchRequest{
		{Name: "api", Uri: smPrefix("/api"), Headers: map[string]*networking.StringMatch{"x-team": smExact("a")}},
		{Name: "web", Uri: smPrefix("/web"), Method: smExact("GET")},
	}
	t.Run("each delegate match pairs with every root match it fits", func(t *testing.T) {
		sub := []*networking.HTTPMatchRequest{
			{Name: "v1", Uri: smPrefix("/api/v1"), Headers: map[string]*networking.StringMatch{"x-user": smExact("j")}},
			{Headers: map[string]*networking.StringMatch{"x-team": smExact("a")}},
		}
		got, ok := mergeMatches(root, sub)
		if !ok {
			t.Fatal("merge refused")
		}
		want := []*networking.HTTPMatchRequest{
			// /api/v1 fits under /api only; the root's header is added.
			{Name: "api-v1", Uri: smPrefix("/api/v1"), Headers: map[string]*networking.StringMatch{"x-team": smExact("a"), "x-user": smExact("j")}},
			// A header-only match fits under both and takes their uri.
			{Name: "api", Uri: smPrefix("/api"), Headers: map[string]*networking.StringMatch{"x-team": smExact("a")}},
			{Name: "web", Uri: smPrefix("/web"), Method: smExact("GET"), Headers: map[string]*networking.StringMatch{"x-team": smExact("a")}},
		}
		assertMatches(t, got, want)
	})
	t.Run("a delegate match that fits no root match refuses the route", func(t *testing.T) {
		if got, ok := mergeMatches(root, []*networking.HTTPMatchRequest{{Uri: smPrefix("/api/v1")}, {Uri: smPrefix("/other")}}); ok {
			t.Errorf("merged %v, want a conflict", got)
		}
	})
	t.Run("no matches on either side keep the other side's", func(t *testing.T) {
		if got, ok := mergeMatches(nil, root); !ok || len(got) != 2 || got[0] != root[0] {
			t.Errorf("no root matches: %v %v", got, ok)
		}
		if got, ok := mergeMatches(root, nil); !ok || len(got) != 2 || got[1] != root[1] {
			t.Errorf("no delegate matches: %v %v", got, ok)
		}
	})
}

func assertMatches(t *testing.T, got, want []*networking.HTTPMatchRequest) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d matches, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			g, _ := protojson.Marshal(got[i])
			w, _ := protojson.Marshal(want[i])
			t.Errorf("match %d = %s, want %s", i, g, w)
		}
	}
}

func TestMergeHTTPRoute(t *testing.T) {
	root := &networking.HTTPRoute{
		Name:    "root",
		Match:   []*networking.HTTPMatchRequest{{Uri: smPrefix("/r")}},
		Timeout: durationpb.New(5e9),
		Retries: &networking.HTTPRetry{Attempts: 3},
		Headers: &networking.Headers{Request: &networking.Headers_HeaderOperations{Set: map[string]string{"a": "1"}}},
		Mirror:  &networking.Destination{Host: "m.ns.svc.cluster.local"},
	}
	sub := &networking.HTTPRoute{
		Name:    "sub",
		Match:   []*networking.HTTPMatchRequest{{Uri: smPrefix("/r/x")}},
		Timeout: durationpb.New(1e9),
		Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "d.ns.svc.cluster.local"}}},
	}
	before := proto.Clone(sub)
	got := mergeHTTPRoute(root, sub)
	switch {
	case got.GetName() != "root-sub":
		t.Errorf("name %q, want root-sub", got.GetName())
	case got.GetTimeout().AsDuration() != 1e9:
		t.Errorf("timeout %v: the delegate's own must win", got.GetTimeout().AsDuration())
	case got.GetRetries().GetAttempts() != 3 || got.GetHeaders().GetRequest().GetSet()["a"] != "1" || got.GetMirror().GetHost() != "m.ns.svc.cluster.local":
		t.Errorf("retries, headers and mirror must come from the root: %v", got)
	case got.GetMatch()[0].GetUri().GetPrefix() != "/r/x":
		t.Errorf("match %v", got.GetMatch())
	}
	if !proto.Equal(sub, before) {
		t.Error("the delegate route was changed")
	}
	if mergeHTTPRoute(root, &networking.HTTPRoute{Match: []*networking.HTTPMatchRequest{{Uri: smPrefix("/s")}}}) != nil {
		t.Error("a delegate route outside the root's prefix was merged")
	}
}

func TestResolveGatewayName(t *testing.T) {
	for in, want := range map[string]string{
		"mesh": "mesh", "gw": "app/gw", "./gw": "app/gw", "edge/gw": "edge/gw",
		"gw.edge.svc.cluster.local": "edge/gw", "gw.edge": "edge/gw",
	} {
		if got := resolveGatewayName(in, "app"); got != want {
			t.Errorf("resolveGatewayName(%q) = %q, want %q", in, got, want)
		}
	}
}

func delegateVS(ns, name string, exportTo []string, routes ...*networking.HTTPRoute) model.Event {
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"}}
	vs.Spec.ExportTo, vs.Spec.Http = exportTo, routes
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: name}, Object: vs}
}

func rootVS(ns, name, host string, routes ...*networking.HTTPRoute) model.Event {
	ev := delegateVS(ns, name, nil, routes...)
	ev.Object.(*networkingv1.VirtualService).Spec.Hosts = []string{host}
	return ev
}

func TestDelegation(t *testing.T) {
	to := func(host, subset string) []*networking.HTTPRouteDestination {
		return []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host, Subset: subset}}}
	}
	store := model.NewStore(model.StoreOptions{})
	_, err := store.Apply(append(worldtest.Mesh(2, 2, 1),
		rootVS("ns-0", "root", "svc-0",
			&networking.HTTPRoute{Match: []*networking.HTTPMatchRequest{{Uri: smPrefix("/a")}}, Delegate: &networking.Delegate{Name: "d", Namespace: "ns-1"}},
			&networking.HTTPRoute{Match: []*networking.HTTPMatchRequest{{Uri: smPrefix("/gone")}}, Delegate: &networking.Delegate{Name: "gone"}},
			&networking.HTTPRoute{Route: to("svc-0", "rest")}),
		delegateVS("ns-1", "d", []string{"ns-0"},
			&networking.HTTPRoute{Match: []*networking.HTTPMatchRequest{{Uri: smPrefix("/a/b")}}, Route: to("svc-1", "b")},
			&networking.HTTPRoute{Match: []*networking.HTTPMatchRequest{{Uri: smPrefix("/z")}}, Route: to("svc-1", "z")}),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	sc := scopeOf(store.World(), sidecar(t, "ns-1"))
	routes := g.vsRoutes(sc, sc.VirtualServices("svc-0.ns-0.svc.cluster.local", "mesh"), "svc-0.ns-0.svc.cluster.local", 80, "mesh", false)
	var got []string
	for _, r := range routes {
		got = append(got, r.GetMatch().GetPrefix()+" "+r.GetRoute().GetCluster())
	}
	// The delegate's short name resolves in its own namespace; /z does not
	// fall within /a; the missing delegate's route is left out.
	want := "/a/b outbound|80|b|svc-1.ns-1.svc.cluster.local,/ outbound|80|rest|svc-0.ns-0.svc.cluster.local"
	if strings.Join(got, ",") != want {
		t.Errorf("routes %q, want %q", strings.Join(got, ","), want)
	}
	for _, msg := range []string{"delegate VirtualService not found", "do not fall within the root route's"} {
		if strings.Count(logs.String(), msg) != 1 {
			t.Errorf("want one warning %q, logs:\n%s", msg, logs.String())
		}
	}
	// Again: the same versions are not reported twice.
	logs.Reset()
	g.vsRoutes(sc, sc.VirtualServices("svc-0.ns-0.svc.cluster.local", "mesh"), "svc-0.ns-0.svc.cluster.local", 80, "mesh", false)
	if logs.Len() != 0 {
		t.Errorf("reported again:\n%s", logs.String())
	}

	t.Run("a rejected route is traced to the root and its delegate", func(t *testing.T) {
		var keys []string
		for _, c := range generate(t, store.World(), sidecar(t, "ns-1")).Sources(RouteType, RouteName("svc-0.ns-0.svc.cluster.local", 80)) {
			keys = append(keys, c.Key.Namespace+"/"+c.Key.Name)
		}
		if strings.Join(keys, " ") != "ns-0/root ns-1/d" {
			t.Errorf("route sources %v, want the root and its delegate", keys)
		}
	})

	t.Run("a delegate change matters where its root is seen, whatever its exportTo", func(t *testing.T) {
		w := store.World()
		pc := generate(t, w, sidecar(t, "ns-1"))
		if k := (model.Key{Kind: model.KindVirtualService, Namespace: "ns-1", Name: "d"}); !pc.Touches(k, w) {
			t.Error("a change of the delegate does not touch a proxy of ns-1, which sees the root")
		}
		if pc.Touches(model.Key{Kind: model.KindVirtualService, Namespace: "ns-0", Name: "d"}, w) {
			t.Error("a VirtualService of the same name in another namespace counts as the delegate")
		}
	})
}
