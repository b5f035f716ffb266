package gen

import (
	"fmt"
	"strings"
	"testing"

	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// The tracing merge rules, as Istio's Telemetries.Tracing applies them.
func TestDecideTracing(t *testing.T) {
	providers := map[string]*meshv1alpha1.MeshConfig_ExtensionProvider{
		"zipkin": {Name: "zipkin"}, "otel": {Name: "otel"}, "sky": {Name: "sky"},
	}
	lookup := func(n string) *meshv1alpha1.MeshConfig_ExtensionProvider { return providers[n] }
	describe := func(s tracingSpec) string {
		if s.disabled {
			return "off"
		}
		out := s.providerName
		if s.sampling != nil {
			out += fmt.Sprintf(" %v%%", *s.sampling)
		}
		if !s.useRequestID {
			out += " noreqid"
		}
		if !s.istioTags {
			out += " notags"
		}
		if len(s.customTags) > 0 {
			out += fmt.Sprintf(" tags=%d", len(s.customTags))
		}
		return out
	}
	pct := func(v float64) *wrapperspb.DoubleValue { return wrapperspb.Double(v) }
	tests := map[string]struct {
		defaults []string
		tracing  [][]*tpb.Tracing // per Telemetry
		want     string           // client | server; "legacy" for nil
	}{
		"falls back to the MeshConfig without Telemetry tracing or default provider": {want: "legacy"},
		"uses the first default provider only":                                       {defaults: []string{"zipkin", "otel"}, want: "zipkin | zipkin"},
		"lets a later Telemetry name another provider, the first it names": {
			defaults: []string{"zipkin"},
			tracing:  [][]*tpb.Tracing{{{Providers: prov("otel", "sky")}}},
			want:     "otel | otel",
		},
		"applies overrides per mode and keeps earlier ones": {
			defaults: []string{"zipkin"},
			tracing: [][]*tpb.Tracing{
				{{RandomSamplingPercentage: pct(10), UseRequestIdForTraceSampling: wrapperspb.Bool(false)}},
				{{Match: &tpb.Tracing_TracingSelector{Mode: tpb.WorkloadMode_SERVER}, DisableSpanReporting: wrapperspb.Bool(true)}},
				{{
					Match: &tpb.Tracing_TracingSelector{Mode: tpb.WorkloadMode_CLIENT}, EnableIstioTags: wrapperspb.Bool(false),
					CustomTags: map[string]*tpb.Tracing_CustomTag{"a": {}},
				}},
			},
			want: "zipkin 10% noreqid notags tags=1 | off",
		},
		"disables a mode left without a provider": {
			tracing: [][]*tpb.Tracing{{{Match: &tpb.Tracing_TracingSelector{Mode: tpb.WorkloadMode_SERVER}, Providers: prov("sky")}}},
			want:    "off | sky",
		},
		"disables a mode whose provider the MeshConfig lacks": {
			defaults: []string{"nope"}, want: "off | off",
		},
		"re-enables span reporting at a lower level": {
			defaults: []string{"zipkin"},
			tracing: [][]*tpb.Tracing{
				{{DisableSpanReporting: wrapperspb.Bool(true)}},
				{{DisableSpanReporting: wrapperspb.Bool(false)}},
			},
			want: "zipkin | zipkin",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mc := &meshv1alpha1.MeshConfig{DefaultProviders: &meshv1alpha1.MeshConfig_DefaultProviders{Tracing: tc.defaults}}
			var ts []*tpb.Telemetry
			for _, tr := range tc.tracing {
				ts = append(ts, &tpb.Telemetry{Tracing: tr})
			}
			d := decideTracing(mc, lookup, ts)
			got := "legacy"
			if d != nil {
				got = describe(d.client) + " | " + describe(d.server)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"": true, "1.29.0": true, "1.28.3": false, "release-1.30": true, "2.0": true, "1.9": false, "master": true} {
		if got := versionAtLeast(v, 1, 29); got != want {
			t.Errorf("versionAtLeast(%q, 1.29) = %v, want %v", v, got, want)
		}
	}
}

func TestSamplingOf(t *testing.T) {
	for _, tc := range []struct{ sampling, want float64 }{{0, 1}, {25, 25}, {100, 100}, {150, 1}} {
		if got := samplingOf(&meshv1alpha1.Tracing{Sampling: tc.sampling}, DefaultTraceSampling); got != tc.want {
			t.Errorf("sampling %v: got %v, want %v", tc.sampling, got, tc.want)
		}
	}
}

// Zipkin for proxies older than Istio 1.29: the legacy collector fields,
// and no trace context option before 1.28, as istiod sends them.
func TestZipkinForOlderProxies(t *testing.T) {
	w := loadWorld(t, `apiVersion: v1
kind: Service
metadata: {name: zipkin, namespace: istio-system}
spec:
  clusterIP: 10.96.9.1
  ports: [{name: http, port: 9411}]
`).World()
	z := &meshv1alpha1.MeshConfig_ExtensionProvider_ZipkinTracingProvider{
		Service: "zipkin.istio-system.svc.cluster.local", Port: 9411, Enable_64BitTraceId: true,
		TraceContextOption: meshv1alpha1.MeshConfig_ExtensionProvider_ZipkinTracingProvider_USE_B3_WITH_W3C_PROPAGATION,
	}
	for version, want := range map[string]string{
		"1.27.1": "cluster=outbound|9411||zipkin.istio-system.svc.cluster.local endpoint=/api/v2/spans host=zipkin.istio-system.svc.cluster.local service=false ctx=USE_B3 128=false",
		"1.28.0": "cluster=outbound|9411||zipkin.istio-system.svc.cluster.local endpoint=/api/v2/spans host=zipkin.istio-system.svc.cluster.local service=false ctx=USE_B3_WITH_W3C_PROPAGATION 128=false",
		"1.29.0": "cluster= endpoint= host= service=true ctx=USE_B3_WITH_W3C_PROPAGATION 128=false",
	} {
		p := &model.Proxy{Metadata: model.ProxyMetadata{IstioVersion: version}}
		a, err := zipkinConfig(tracingInput{look: meshLookup{w: newView(w, nil), mesh: w.Mesh().Proto()}, proxy: p}, z)
		if err != nil {
			t.Fatal(err)
		}
		zc := &tracev3.ZipkinConfig{}
		if err := a.UnmarshalTo(zc); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("cluster=%s endpoint=%s host=%s service=%v ctx=%s 128=%v", zc.GetCollectorCluster(), zc.GetCollectorEndpoint(),
			zc.GetCollectorHostname(), zc.GetCollectorService() != nil, zc.GetTraceContextOption(), zc.GetTraceId_128Bit())
		if got != want {
			t.Errorf("%s: got  %s\nwant %s", version, got, want)
		}
	}
}

// Tracing tags name the proxy's canonical service: with tracing on,
// proxies of one namespace that differ in it are different classes; with
// tracing off they share one.
func TestClassKeySeparatesWhatTracingReads(t *testing.T) {
	on := loadWorld(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n").World()
	store := loadWorld(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n")
	ev, err := worldtest.MeshConfig("enableTracing: false\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(ev); err != nil {
		t.Fatal(err)
	}
	off := store.World()
	a := labelled(t, "sidecar", "default", map[string]string{canonicalNameLabel: "reviews"})
	b := labelled(t, "sidecar", "default", map[string]string{canonicalNameLabel: "ratings"})
	if ClassKey(on, a) == ClassKey(on, b) {
		t.Errorf("tracing on: both proxies have key %q", ClassKey(on, a))
	}
	if ClassKey(off, a) != ClassKey(off, b) || strings.Contains(ClassKey(off, a), "trace=") {
		t.Errorf("tracing off: keys %q and %q, want one without trace=", ClassKey(off, a), ClassKey(off, b))
	}
	g := newForTest(quietLog())
	for _, p := range []*model.Proxy{a, b} {
		cc, err := g.Class(on, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		tags := cc.Scope().outTel().tracing.GetCustomTags()
		found := false
		for _, tag := range tags {
			if tag.GetTag() == "istio.canonical_service" {
				found = tag.GetLiteral().GetValue() == p.Labels()[canonicalNameLabel]
			}
		}
		if !found {
			t.Errorf("%s: tags %v do not name its canonical service", p.Labels()[canonicalNameLabel], tags)
		}
	}
}

// PILOT_TRACE_SAMPLING's counterpart: where nothing else says, the
// Generator's sampling applies.
func TestTraceSamplingOption(t *testing.T) {
	w := loadWorld(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n").World()
	o := DefaultOptions(quietLog())
	for _, bad := range []float64{-1, 101} {
		o.TraceSampling = bad
		if _, err := New(o); err == nil {
			t.Errorf("%v%% accepted", bad)
		}
	}
	o.TraceSampling = 42
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := g.Class(w, labelled(t, "sidecar", "default", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cc.Scope().outTel().tracing.GetRandomSampling().GetValue(); got != 42 {
		t.Errorf("random sampling %v, want 42", got)
	}
}

// The node cluster (pilot-agent's "<service>.<namespace>") names spans
// only for datadog and opentelemetry providers: without one in the
// MeshConfig, proxies that differ only in it share a class; with one, a
// datadog span's service name is the proxy's own.
func TestClassKeyReadsTheNodeClusterOnlyForProvidersThatNameSpans(t *testing.T) {
	ns := "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n"
	plain := loadWorld(t, ns).World()
	store := loadWorld(t, ns)
	ev, err := worldtest.MeshConfig("extensionProviders:\n- name: dd\n  datadog: {service: datadog-agent.default.svc.cluster.local, port: 8126}\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(ev); err != nil {
		t.Fatal(err)
	}
	datadog := store.World()
	a := labelled(t, "sidecar", "default", nil)
	b := labelled(t, "sidecar", "default", nil)
	a.ServiceCluster, b.ServiceCluster = "reviews.default", "ratings.default"
	if ClassKey(plain, a) != ClassKey(plain, b) {
		t.Errorf("no provider reads the node cluster, yet keys %q and %q differ", ClassKey(plain, a), ClassKey(plain, b))
	}
	if ClassKey(datadog, a) == ClassKey(datadog, b) {
		t.Errorf("a datadog provider names spans after the node cluster, yet both proxies have key %q", ClassKey(datadog, a))
	}
}
