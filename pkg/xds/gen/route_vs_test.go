package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func TestExportBucket(t *testing.T) {
	tests := map[string]struct {
		exportTo []string
		own, ns  string
		want     int
	}{
		"no exportTo is public, even in its own namespace": {own: "a", ns: "a", want: 2},
		"* is public":                               {exportTo: []string{".", "*"}, own: "a", ns: "a", want: 2},
		". is private to its namespace":             {exportTo: []string{"."}, own: "a", ns: "a", want: 0},
		"its own namespace by name is private":      {exportTo: []string{"a"}, own: "a", ns: "a", want: 0},
		"another namespace by name is exported":     {exportTo: []string{".", "b"}, own: "a", ns: "b", want: 1},
		"private wins over exported for its own ns": {exportTo: []string{"b", "."}, own: "a", ns: "a", want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := exportBucket(tc.exportTo, tc.own, tc.ns); got != tc.want {
				t.Errorf("exportBucket = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSortVirtualServices(t *testing.T) {
	at := func(ns, name string, day int, exportTo ...string) *model.Config {
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Date(2025, 1, day, 0, 0, 0, 0, time.UTC)),
		}}
		vs.Spec.ExportTo = exportTo
		return &model.Config{Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: name}, Object: vs}
	}
	vss := []*model.Config{
		at("b", "x", 1), at("a", "x", 1), at("a", "w", 1), at("a", "old", 0),
		at("c", "exported", 9, "a"), at("a", "private", 9, "."),
	}
	sortVirtualServices(vss, "a", nil)
	var got []string
	for _, c := range vss {
		got = append(got, c.Key.Namespace+"/"+c.Key.Name)
	}
	// private, exported by name, then public: oldest, then name, then namespace.
	want := "a/private c/exported a/old a/w a/x b/x"
	if strings.Join(got, " ") != want {
		t.Errorf("order %q, want %q", strings.Join(got, " "), want)
	}
}

func TestHTTPMatchHolds(t *testing.T) {
	p := sidecar(t, "default")
	p.Metadata.Labels = map[string]string{"app": "web", "version": "v1"}
	tests := map[string]struct {
		m       *networking.HTTPMatchRequest
		gateway string
		want    bool
	}{
		"no match holds":                             {want: true},
		"labels among the proxy's hold":              {m: &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "web"}}, want: true},
		"a label value the proxy lacks fails":        {m: &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "db"}}},
		"the proxy's namespace holds":                {m: &networking.HTTPMatchRequest{SourceNamespace: "default"}, want: true},
		"another namespace fails":                    {m: &networking.HTTPMatchRequest{SourceNamespace: "other"}},
		"another port fails":                         {m: &networking.HTTPMatchRequest{Port: 81}},
		"listed gateways decide alone":               {m: &networking.HTTPMatchRequest{Gateways: []string{"mesh"}, SourceNamespace: "other"}, want: true},
		"a gateway not listed fails":                 {m: &networking.HTTPMatchRequest{Gateways: []string{"edge"}}},
		"a short gateway name is in the VS's ns":     {m: &networking.HTTPMatchRequest{Gateways: []string{"edge"}}, gateway: "default/edge", want: true},
		"sourceLabels apply at gateways too":         {m: &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "db"}}, gateway: "default/edge"},
		"both labels and namespace must hold":        {m: &networking.HTTPMatchRequest{SourceLabels: map[string]string{"app": "web"}, SourceNamespace: "x"}},
		"an empty sourceLabels map selects anything": {m: &networking.HTTPMatchRequest{SourceLabels: map[string]string{}}, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gw := tc.gateway
			if gw == "" {
				gw = "mesh"
			}
			if got := httpMatchHolds(tc.m, "default", 80, gw, p); got != tc.want {
				t.Errorf("httpMatchHolds = %v, want %v", got, tc.want)
			}
		})
	}
}

// prefixRoute is a VirtualService http route matching a path prefix ("" for
// no match) to one subset of host.
func prefixRoute(host, path, subset string) *networking.HTTPRoute {
	hr := &networking.HTTPRoute{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host, Subset: subset}}}}
	if path != "" {
		hr.Match = []*networking.HTTPMatchRequest{{Uri: smPrefix(path)}}
	}
	return hr
}

func TestGatewayJoinsVirtualServices(t *testing.T) {
	const host = "svc-0.ns-0.svc.cluster.local"
	a := rootVS("ns-0", "a", host, prefixRoute(host, "/a", "a"), prefixRoute(host, "", "a-rest"))
	b := rootVS("ns-0", "b", host, prefixRoute(host, "/b", "b"))
	for _, ev := range []model.Event{a, b} {
		ev.Object.(*networkingv1.VirtualService).Spec.Gateways = []string{"edge"}
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(append(worldtest.Mesh(1, 1, 1), a, b)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	sc := scopeOf(store.World(), sidecar(t, "ns-0"))
	var got []string
	for _, r := range g.vsRoutes(sc, sc.VirtualServices(host, "ns-0/edge"), host, 80, "ns-0/edge", false) {
		got = append(got, r.GetMatch().GetPrefix())
	}
	// a's catch-all goes after b's route, as Istio's CombineVHostRoutes.
	if want := "/a /b /"; strings.Join(got, " ") != want {
		t.Errorf("gateway routes %q, want %q", strings.Join(got, " "), want)
	}
	if vss := sc.gatewayVirtualServices("ns-0/edge"); len(vss) != 2 || vss[0].Key.Name != "a" {
		t.Errorf("gatewayVirtualServices = %v, want a and b", vss)
	}

	t.Run("a caller passing one of them is told the others are ignored", func(t *testing.T) {
		var logs bytes.Buffer
		g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
		for range 2 {
			g.vsRoutes(sc, sc.VirtualServices(host, "ns-0/edge")[1:], host, 80, "ns-0/edge", false)
		}
		if n := strings.Count(logs.String(), "joining them is not supported yet"); n != 1 || !strings.Contains(logs.String(), "ignored=[ns-0/a]") {
			t.Errorf("%d reports, want one naming ns-0/a:\n%s", n, logs.String())
		}
	})
}

func TestShadowedVirtualServicesReportedOnce(t *testing.T) {
	const host = "svc-0.ns-0.svc.cluster.local"
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(append(worldtest.Mesh(1, 1, 1),
		rootVS("ns-0", "first", host, prefixRoute(host, "", "first")),
		rootVS("ns-0", "second", host, prefixRoute(host, "", "second")))...); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	reg := prometheus.NewRegistry()
	if err := g.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cc, err := g.Class(store.World(), sidecar(t, "ns-0"), nil)
		if err != nil {
			t.Fatal(err)
		}
		rc := cc.Sets[RouteType].Get(RouteName(host, 80))
		if rc == nil || !strings.Contains(string(rc.Any.GetValue()), "|first|") || strings.Contains(string(rc.Any.GetValue()), "|second|") {
			t.Fatalf("route %s does not use the first VirtualService only", RouteName(host, 80))
		}
	}
	if n := strings.Count(logs.String(), "several VirtualServices for one host"); n != 1 {
		t.Errorf("%d reports, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "ignored=[ns-0/second]") {
		t.Errorf("the report does not name the ignored VirtualService:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(g.warns.dupDomains.counter); got != 1 {
		t.Errorf("discovery_xds_vservice_dup_domain_total = %v, want 1", got)
	}
}

// TestRedirectPorts holds istiod's ApplyRedirect: derivePort
// FROM_REQUEST_PORT is the route's port (Envoy would drop the request's
// port once host_redirect is set), FROM_PROTOCOL_DEFAULT no port, a :80 or
// :443 matching the scheme (https by default on a TLS server) is left
// out, and a prefix rewrite (Gateway API ReplacePrefixMatch) is kept.
func TestRedirectPorts(t *testing.T) {
	fromRequest := &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_REQUEST_PORT}
	fromScheme := &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_PROTOCOL_DEFAULT}
	for _, tc := range []struct {
		name string
		rd   *networking.HTTPRedirect
		port int32
		tls  bool
		want uint32
	}{
		{"request port", &networking.HTTPRedirect{Authority: "example.org", RedirectPort: fromRequest}, 8080, false, 8080},
		{"request port 80 over http", &networking.HTTPRedirect{Authority: "example.org", RedirectPort: fromRequest}, 80, false, 0},
		{"request port 80 on a TLS server", &networking.HTTPRedirect{Authority: "example.org", RedirectPort: fromRequest}, 80, true, 80},
		{"request port 443 on a TLS server", &networking.HTTPRedirect{RedirectPort: fromRequest}, 443, true, 0},
		{"scheme default", &networking.HTTPRedirect{Scheme: "https", RedirectPort: fromScheme}, 8080, false, 0},
		{"explicit 443 to https", &networking.HTTPRedirect{Scheme: "https", RedirectPort: &networking.HTTPRedirect_Port{Port: 443}}, 80, false, 0},
		{"explicit 8443", &networking.HTTPRedirect{Scheme: "https", RedirectPort: &networking.HTTPRedirect_Port{Port: 8443}}, 80, false, 8443},
		{"no port setting", &networking.HTTPRedirect{Authority: "example.org"}, 8080, false, 0},
	} {
		if got := redirect(tc.rd, tc.port, tc.tls).GetPortRedirect(); got != tc.want {
			t.Errorf("%s: port_redirect %d, want %d", tc.name, got, tc.want)
		}
	}
	ra := redirect(&networking.HTTPRedirect{Uri: "/ignored", PrefixRewrite: "/new"}, 80, false)
	if ra.GetPrefixRewrite() != "/new" || ra.GetPathRedirect() != "" {
		t.Errorf("prefix rewrite: %v", ra)
	}
}
