package gen

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// classKeyWorld has VirtualServices with sourceLabels matches that do and
// do not apply to proxies of "default", and a workload Sidecar there.
const classKeyWorld = `apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.11
  ports: [{name: http, port: 9080}, {name: tcp-db, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: other}
spec:
  clusterIP: 10.96.1.11
  ports: [{name: http, port: 9080}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{sourceLabels: {app: productpage}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - route: [{destination: {host: reviews, subset: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-db, namespace: default}
spec:
  hosts: [reviews]
  tcp:
  - match: [{port: 5432, sourceLabels: {tier: batch}}]
    route: [{destination: {host: reviews, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: private, namespace: other}
spec:
  hosts: [ratings]
  exportTo: ["."]
  http:
  - match: [{sourceLabels: {app: details}}]
    route: [{destination: {host: ratings}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge, namespace: default}
spec:
  hosts: [reviews]
  gateways: [ingress]
  http:
  - match: [{sourceLabels: {app: ingressgateway}}]
    route: [{destination: {host: reviews}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: mesh-only-match, namespace: default}
spec:
  hosts: [ratings.other.svc.cluster.local]
  gateways: [mesh, ingress]
  http:
  - match: [{sourceLabels: {app: mongo}, gateways: [ingress]}]
    route: [{destination: {host: ratings.other.svc.cluster.local}}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: batch, namespace: default}
spec:
  workloadSelector: {labels: {tier: batch}}
  egress: [{hosts: ["./*"]}]
`

func loadWorld(t testing.TB, y string) *model.Store {
	t.Helper()
	evs, err := worldtest.Decode([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	s := model.NewStore(model.StoreOptions{})
	if _, err := s.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	return s
}

func labelled(t testing.TB, typ, ns string, labels map[string]string) *model.Proxy {
	t.Helper()
	meta := map[string]any{model.MetaIstioVersion: "1.32.0"}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		meta[model.MetaLabels] = l
	}
	p, err := model.ParseProxy(typ+"~10.9.0.1~pod."+ns+"~"+ns+".svc.cluster.local", meta)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClassKey(t *testing.T) {
	w := loadWorld(t, classKeyWorld).World()
	type lbl = map[string]string
	tests := map[string]struct {
		a, b lbl
		same bool
	}{
		"labels no selector names give the same key":                              {a: lbl{"app": "details"}, b: lbl{"app": "details", "version": "v2"}, same: true},
		"no labels and unrelated labels give the same key":                        {a: nil, b: lbl{"team": "x"}, same: true},
		"labels beside a matching selector do not matter":                         {a: lbl{"app": "productpage", "version": "v1"}, b: lbl{"app": "productpage", "version": "v2"}, same: true},
		"a matching http sourceLabels selector changes the key":                   {a: lbl{"app": "productpage"}, b: lbl{"app": "details"}},
		"a matching tcp sourceLabels selector (with its Sidecar) changes the key": {a: lbl{"app": "x", "tier": "batch"}, b: lbl{"app": "x"}},
		"two selectors matching differ from one":                                  {a: lbl{"app": "productpage", "tier": "batch"}, b: lbl{"app": "productpage"}},
		"a VirtualService not exported to the namespace does not matter":          {a: lbl{"app": "details"}, b: nil, same: true},
		"a VirtualService bound to gateways only does not matter":                 {a: lbl{"app": "ingressgateway"}, b: nil, same: true},
		"a match for gateways only does not matter":                               {a: lbl{"app": "mongo"}, b: nil, same: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, b := ClassKey(w, labelled(t, "sidecar", "default", tc.a)), ClassKey(w, labelled(t, "sidecar", "default", tc.b))
			if (a == b) != tc.same {
				t.Errorf("keys %q and %q: same=%v, want %v", a, b, a == b, tc.same)
			}
		})
	}
}

func TestClassKeyParts(t *testing.T) {
	w := loadWorld(t, classKeyWorld).World()
	plain := labelled(t, "sidecar", "default", map[string]string{"app": "details"})
	if got := ClassKey(w, plain); got != plain.Class() {
		t.Errorf("without workload-dependent configuration the key is %q, want the class %q", got, plain.Class())
	}
	batch := labelled(t, "sidecar", "default", map[string]string{"tier": "batch"})
	if got := ClassKey(w, batch); !strings.Contains(got, "|sidecar=batch") || !strings.Contains(got, "|src=") {
		t.Errorf("key %q names neither the workload Sidecar nor the sourceLabels digest", got)
	}
	other := labelled(t, "sidecar", "other", map[string]string{"tier": "batch", "app": "details"})
	if got := ClassKey(w, other); !strings.Contains(got, "|src=") || strings.Contains(got, "|sidecar=") {
		t.Errorf("in other, only the private VirtualService's selector applies, and no Sidecar of default: %q", got)
	}
	gw := labelled(t, "router", "default", map[string]string{"app": "ingressgateway"})
	if got := ClassKey(w, gw); got != gw.Class() {
		t.Errorf("a gateway's key is %q, want its class %q (its labels are in it already)", got, gw.Class())
	}
}

func TestClassKeyStableAcrossWorlds(t *testing.T) {
	s := loadWorld(t, classKeyWorld)
	p := labelled(t, "sidecar", "default", map[string]string{"app": "productpage"})
	before := ClassKey(s.World(), p)
	if _, err := s.Apply(worldtest.Service("default", "unrelated", "10.96.0.99")); err != nil {
		t.Fatal(err)
	}
	if after := ClassKey(s.World(), p); after != before {
		t.Errorf("an unrelated Service changed the key: %q -> %q", before, after)
	}
	evs, err := worldtest.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: more, namespace: default}
spec:
  hosts: [ratings.other.svc.cluster.local]
  http:
  - match: [{sourceLabels: {app: productpage}}]
    route: [{destination: {host: ratings.other.svc.cluster.local}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(evs...); err != nil {
		t.Fatal(err)
	}
	if after := ClassKey(s.World(), p); after == before {
		t.Errorf("a new VirtualService whose selector matches left the key at %q", after)
	}
}

// TestEqualClassKeysGetEqualConfiguration generates the class of proxies
// with many label sets: equal keys must mean identical configuration, and
// a workload Sidecar must give a different one.
func TestEqualClassKeysGetEqualConfiguration(t *testing.T) {
	w := loadWorld(t, classKeyWorld).World()
	g := newForTest(quietLog())
	byKey := map[string]string{}
	versions := func(cc *ClassConfig) string {
		var b strings.Builder
		for _, typ := range TypeURLs {
			fmt.Fprintf(&b, "%s=%s;", ShortType(typ), cc.Sets[typ].Version)
		}
		return b.String()
	}
	for _, app := range []string{"", "productpage", "details", "mongo", "ingressgateway"} {
		for _, tier := range []string{"", "batch", "web"} {
			labels := map[string]string{"version": "v1"}
			if app != "" {
				labels["app"] = app
			}
			if tier != "" {
				labels["tier"] = tier
			}
			p := labelled(t, "sidecar", "default", labels)
			cc, err := g.Class(w, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			k, v := ClassKey(w, p), versions(cc)
			if prev, ok := byKey[k]; ok && prev != v {
				t.Errorf("labels %v: key %q seen with configuration %s, now %s", labels, k, prev, v)
			}
			byKey[k] = v
		}
	}
	batch := ClassKey(w, labelled(t, "sidecar", "default", map[string]string{"tier": "batch", "app": "details"}))
	web := ClassKey(w, labelled(t, "sidecar", "default", map[string]string{"tier": "web", "app": "details"}))
	if byKey[batch] == byKey[web] {
		t.Errorf("the batch Sidecar (./* only) should change the configuration: %s", byKey[batch])
	}
}

func TestShadowedSidecarIsReported(t *testing.T) {
	s := loadWorld(t, classKeyWorld+`---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: batch-late, namespace: default, creationTimestamp: "2030-01-01T00:00:00Z"}
spec:
  workloadSelector: {labels: {tier: batch}}
  egress: [{hosts: ["*/*"]}]
`)
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	p := labelled(t, "sidecar", "default", map[string]string{"tier": "batch"})
	cc, err := g.Class(s.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ClassKey(s.World(), p), "|sidecar=batch|") {
		t.Errorf("the older Sidecar should win: %s", ClassKey(s.World(), p))
	}
	if cc.Scope().Visible(model.NamespacedName{Namespace: "other", Name: "ratings"}) {
		t.Error("the newer Sidecar's */* was applied")
	}
	if !strings.Contains(logs.String(), "several Sidecars apply") || !strings.Contains(logs.String(), "default/batch-late") {
		t.Errorf("the shadowed Sidecar is not reported:\n%s", logs.String())
	}
}

// BenchmarkClassKey computes the key of proxies with varied labels in a
// World of 1,000 VirtualServices, each with a sourceLabels match (the
// worst case) or none.
func BenchmarkClassKey(b *testing.B) {
	for _, withSelectors := range []bool{true, false} {
		name := "1000 VirtualServices with sourceLabels"
		if !withSelectors {
			name = "1000 VirtualServices without sourceLabels"
		}
		b.Run(name, func(b *testing.B) {
			var y strings.Builder
			for i := 0; i < 1000; i++ {
				ns := fmt.Sprintf("ns-%d", i%50)
				fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs-%d, namespace: %s}\nspec:\n  hosts: [svc-%d]\n  http:\n  - ", i, ns, i)
				if withSelectors {
					fmt.Fprintf(&y, "match: [{sourceLabels: {app: app-%d}}]\n    ", i%100)
				}
				fmt.Fprintf(&y, "route: [{destination: {host: svc-%d}}]\n", i)
			}
			s := loadWorld(b, y.String())
			w := s.World()
			proxies := make([]*model.Proxy, 100)
			for i := range proxies {
				proxies[i] = labelled(b, "sidecar", fmt.Sprintf("ns-%d", i%50), map[string]string{"app": fmt.Sprintf("app-%d", i), "version": "v1"})
			}
			ClassKey(w, proxies[0]) // the World's index, built once per World
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ClassKey(w, proxies[i%len(proxies)])
			}
		})
	}
	b.Run("index of a World of 1000 VirtualServices with sourceLabels (once per World)", func(b *testing.B) {
		var y strings.Builder
		for i := 0; i < 1000; i++ {
			fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs-%d, namespace: ns-%d}\nspec:\n  hosts: [svc-%d]\n  http:\n  - match: [{sourceLabels: {app: app-%d}}]\n    route: [{destination: {host: svc-%d}}]\n", i, i%50, i, i%100, i)
		}
		s := loadWorld(b, y.String())
		w := s.World()
		b.Run("from nothing", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				newWorldIndex(w, nil).forNamespace("ns-0")
			}
		})
		b.Run("after a Service changed", func(b *testing.B) {
			prev := newWorldIndex(w, nil)
			if _, err := s.Apply(worldtest.Service("ns-0", "new", "10.96.0.99")); err != nil {
				b.Fatal(err)
			}
			next := s.World()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				newWorldIndex(next, prev).forNamespace("ns-0")
			}
		})
	})
	b.Run("p.Class() alone, for reference", func(b *testing.B) {
		p := labelled(b, "sidecar", "ns-0", map[string]string{"app": "app-0", "version": "v1"})
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = p.Class()
		}
	})
}

// TestClassKeyConcurrent computes keys from several goroutines over
// alternating Worlds, as pushes of consecutive Worlds do (run with -race).
func TestClassKeyConcurrent(t *testing.T) {
	s := loadWorld(t, classKeyWorld)
	w1 := s.World()
	if _, err := s.Apply(worldtest.Service("default", "more", "10.96.0.77")); err != nil {
		t.Fatal(err)
	}
	w2 := s.World()
	p := labelled(t, "sidecar", "default", map[string]string{"app": "productpage", "tier": "batch"})
	want := ClassKey(w1, p)
	done := make(chan string)
	for i := 0; i < 4; i++ {
		go func() {
			var bad string
			for j := 0; j < 200; j++ {
				w := w1
				if j%2 == 1 {
					w = w2
				}
				if k := ClassKey(w, p); k != want {
					bad = k
				}
			}
			done <- bad
		}()
	}
	for i := 0; i < 4; i++ {
		if bad := <-done; bad != "" {
			t.Errorf("key %q, want %q in both Worlds", bad, want)
		}
	}
}
