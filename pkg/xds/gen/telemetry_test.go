package gen

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	tpb "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func prov(names ...string) []*tpb.ProviderRef {
	var out []*tpb.ProviderRef
	for _, n := range names {
		out = append(out, &tpb.ProviderRef{Name: n})
	}
	return out
}

// The merge rules, case by case as Istio's tests state them
// (pilot/pkg/model/telemetry_test.go, telemetry_logging_test.go).
func TestMergeMetrics(t *testing.T) {
	disable := &tpb.MetricsOverrides{Disabled: wrapperspb.Bool(true)}
	tests := map[string]struct {
		metrics  []*tpb.Metrics
		defaults []string
		want     string
	}{
		"configures the default providers when no Telemetry says anything": {
			defaults: []string{"prometheus"}, want: "prometheus:client=,server=",
		},
		"configures nothing without default providers or Telemetry": {want: ""},
		"lets a later level name other providers, dropping the earlier": {
			metrics: []*tpb.Metrics{{Providers: prov("prometheus")}, {Providers: prov("custom")}},
			want:    "custom:client=,server=",
		},
		"disables every metric of a mode by ALL_METRICS, dropping the filter": {
			metrics: []*tpb.Metrics{{Providers: prov("prometheus"), Overrides: []*tpb.MetricsOverrides{{
				Match: &tpb.MetricSelector{MetricMatch: &tpb.MetricSelector_Metric{Metric: tpb.MetricSelector_ALL_METRICS}, Mode: tpb.WorkloadMode_CLIENT}, Disabled: wrapperspb.Bool(true),
			}}}},
			want: "prometheus:client=off,server=",
		},
		"re-enables at a lower level what the root disabled": {
			metrics: []*tpb.Metrics{
				{Providers: prov("prometheus"), Overrides: []*tpb.MetricsOverrides{disable}},
				{Overrides: []*tpb.MetricsOverrides{{Match: &tpb.MetricSelector{MetricMatch: &tpb.MetricSelector_Metric{Metric: tpb.MetricSelector_REQUEST_COUNT}}, Disabled: wrapperspb.Bool(false)}}},
			},
			want: "prometheus:client=REQUEST_COUNT,server=REQUEST_COUNT",
		},
		"inherits the default providers for overrides": {
			defaults: []string{"prometheus"},
			metrics: []*tpb.Metrics{{Overrides: []*tpb.MetricsOverrides{{
				Match: &tpb.MetricSelector{MetricMatch: &tpb.MetricSelector_CustomMetric{CustomMetric: "my_metric"}},
			}}}},
			want: "prometheus:client=my_metric,server=my_metric",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := mergeMetrics(tt.metrics, tt.defaults)
			var parts []string
			for _, p := range slices.Sorted(mapsKeys(got)) {
				m := got[p]
				parts = append(parts, fmt.Sprintf("%s:client=%s,server=%s", p, describe(m.client), describe(m.server)))
			}
			if s := strings.Join(parts, ";"); s != tt.want {
				t.Errorf("got %q, want %q", s, tt.want)
			}
		})
	}
}

func describe(m metricConfig) string {
	if m.disabled {
		return "off"
	}
	var names []string
	for _, o := range m.overrides {
		if len(names) < 1 || o.name == "my_metric" {
			names = append(names, o.name)
		}
	}
	return strings.Join(names, "|")
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestMergeLogs(t *testing.T) {
	server := &tpb.AccessLogging_LogSelector{Mode: tpb.WorkloadMode_SERVER}
	tests := map[string]struct {
		levels   [][]*tpb.AccessLogging
		defaults []string
		mode     tpb.WorkloadMode
		want     string
	}{
		"logs with the default providers without Telemetry": {defaults: []string{"envoy"}, want: "envoy"},
		"lets a namespace name another provider": {
			levels: [][]*tpb.AccessLogging{{{Providers: prov("envoy")}}, {{Providers: prov("otel")}}},
			want:   "otel",
		},
		"disables the inherited provider at a lower level": {
			levels: [][]*tpb.AccessLogging{{{Providers: prov("envoy")}}, {{Disabled: wrapperspb.Bool(true)}}},
			want:   "envoy=off",
		},
		"disables only the mode it matches": {
			levels: [][]*tpb.AccessLogging{{{Providers: prov("envoy")}}, {{Match: server, Disabled: wrapperspb.Bool(true)}}},
			mode:   tpb.WorkloadMode_CLIENT,
			want:   "envoy",
		},
		"keeps a provider's filter": {
			levels: [][]*tpb.AccessLogging{{{Providers: prov("envoy"), Filter: &tpb.AccessLogging_Filter{Expression: "response.code >= 400"}}}},
			want:   "envoy[response.code >= 400]",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			mode := tt.mode
			if mode == tpb.WorkloadMode_CLIENT_AND_SERVER {
				mode = tpb.WorkloadMode_SERVER
			}
			got := mergeLogs(tt.levels, tt.defaults, mode)
			var parts []string
			for _, p := range slices.Sorted(mapsKeys(got)) {
				s := p
				if got[p].disabled {
					s += "=off"
				}
				if f := got[p].filter; f != nil {
					s += "[" + f.GetExpression() + "]"
				}
				parts = append(parts, s)
			}
			if s := strings.Join(parts, ";"); s != tt.want {
				t.Errorf("got %q, want %q", s, tt.want)
			}
		})
	}
}

func telemetryEvent(ns, name, rv string, spec *tpb.Telemetry) model.Event {
	t := &telemetryv1.Telemetry{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	proto.Merge(&t.Spec, spec)
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindTelemetry, Namespace: ns, Name: name}, Object: t}
}

// Telemetry is part of every listener, yet an unrelated change must not
// rebuild them: a VirtualService edit re-sends routes only, a Telemetry of
// another namespace nothing, a root Telemetry every listener; a Telemetry
// selecting the workload moves it to its own class.
func TestTelemetryKeepsReuse(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	meshEv, err := worldtest.MeshConfig("defaultProviders: {metrics: [prometheus]}\naccessLogFile: /dev/stdout\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(append(worldtest.Mesh(20, 4, 2), meshEv)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string, ev model.Event, wantListeners bool) {
		t.Helper()
		if _, err := store.Apply(ev); err != nil {
			t.Fatal(err)
		}
		next, err := g.Class(store.World(), p, prev)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(next.Changed[ListenerType]) > 0; got != wantListeners {
			t.Errorf("%s: listeners changed %v (%v), want %v", name, got, next.Changed[ListenerType], wantListeners)
		}
		prev = next
	}
	step("a VirtualService edit", vsEvent("ns-1", "svc-1", "svc-1", "1", 50, 50), false)
	step("a Telemetry of another namespace", telemetryEvent("ns-2", "t", "1", &tpb.Telemetry{AccessLogging: []*tpb.AccessLogging{{Disabled: wrapperspb.Bool(true)}}}), false)
	step("a root Telemetry", telemetryEvent("istio-system", "mesh", "1", &tpb.Telemetry{AccessLogging: []*tpb.AccessLogging{{Disabled: wrapperspb.Bool(true)}}}), true)
	step("the same root Telemetry again", telemetryEvent("istio-system", "mesh", "1", &tpb.Telemetry{AccessLogging: []*tpb.AccessLogging{{Disabled: wrapperspb.Bool(true)}}}), false)
	key := ClassKey(store.World(), p)
	if _, err := store.Apply(telemetryEvent("ns-0", "client", "1", &tpb.Telemetry{
		Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "client"}},
	})); err != nil {
		t.Fatal(err)
	}
	p2, err := model.ParseProxy("sidecar~10.9.0.1~client.ns-0~ns-0.svc.cluster.local", map[string]any{"LABELS": map[string]any{"app": "client"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := ClassKey(store.World(), p2); got == key || !strings.Contains(got, "|tel=client") {
		t.Errorf("class key %q of a selected workload (was %q)", got, key)
	}
}
