package gen

import (
	"sort"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Telemetry, as istiod decides it (pilot/pkg/model/telemetry.go): which
// Telemetry resources apply to a proxy, how their metrics and access
// logging merge with the MeshConfig's default providers, and what the
// result is per traffic class (a sidecar's outbound and inbound, a
// gateway's). This file decides; telemetry_filters.go builds the Envoy
// configuration.
//
// Selection (Istio's applicableTelemetries, for sidecars and gateways):
// the root namespace's Telemetry without selector or targetRefs, then the
// proxy namespace's, then every Telemetry of the proxy's namespace whose
// selector matches its labels or whose targetRefs name its Gateway, in
// creation order; later ones override earlier ones.
//
// Tracing is decided in telemetry_tracing.go with the same selection.
//
// Not done: the stackdriver provider; service-attached (targetRefs to a
// Service) Telemetry, which Istio applies to waypoints only.

// trafficClass is the class of a listener as Istio's telemetry sees it.
type trafficClass uint8

const (
	classOutbound trafficClass = iota // a sidecar's outbound listeners (client)
	classInbound                      // a sidecar's inbound listener (server)
	classGateway                      // a gateway's listeners (client)
)

func (c trafficClass) mode() tpb.WorkloadMode {
	if c == classInbound {
		return tpb.WorkloadMode_SERVER
	}
	return tpb.WorkloadMode_CLIENT
}

// telemetryFields are the Telemetry fields generation acts on.
var telemetryFields = newFieldSet(append([]string{
	"selector", "targetRef", "targetRefs",
	"metrics.providers", "metrics.overrides", "metrics.reportingInterval",
	"accessLogging.providers", "accessLogging.disabled", "accessLogging.filter", "accessLogging.match",
},
	tracingFields...)...)

// applicableTelemetries lists the Telemetry resources that apply to p, in
// Istio's order (root, namespace, then selecting ones).
func applicableTelemetries(w *view, p *model.Proxy) []*model.Config {
	root := rootNamespace(w)
	byNS := map[string][]*model.Config{}
	for _, c := range w.ConfigsIn(model.KindTelemetry, root, p.Namespace) {
		byNS[c.Key.Namespace] = append(byNS[c.Key.Namespace], c)
	}
	for _, cs := range byNS {
		sortByCreation(cs)
	}
	var out []*model.Config
	add := func(c *model.Config) { out = append(out, c) }
	wide := func(ns string) {
		for _, c := range byNS[ns] {
			if spec := &c.Object.(*telemetryv1.Telemetry).Spec; namespaceWide(spec) {
				add(c)
				return
			}
		}
	}
	wide(root)
	if p.Namespace != root {
		wide(p.Namespace)
	}
	for _, c := range byNS[p.Namespace] {
		spec := &c.Object.(*telemetryv1.Telemetry).Spec
		if !namespaceWide(spec) && telemetrySelects(spec, p) {
			add(c)
		}
	}
	return out
}

func namespaceWide(t *tpb.Telemetry) bool {
	return len(t.GetSelector().GetMatchLabels()) == 0 && t.GetTargetRef() == nil && len(t.GetTargetRefs()) == 0
}

// telemetrySelects is Istio's PolicyMatcher for a sidecar or gateway:
// selector labels, or targetRefs naming the proxy's Gateway (the Gateway
// API gateway whose pods carry gatewayNameLabel).
func telemetrySelects(t *tpb.Telemetry, p *model.Proxy) bool {
	refs := t.GetTargetRefs()
	if t.GetTargetRef() != nil {
		refs = append(refs, t.GetTargetRef())
	}
	if len(refs) == 0 {
		return labelsMatch(t.GetSelector().GetMatchLabels(), p.Labels())
	}
	gw, ok := p.Labels()[gatewayNameLabel]
	if !ok {
		return false
	}
	for _, r := range refs {
		if r.GetKind() == "Gateway" && r.GetGroup() == "gateway.networking.k8s.io" && r.GetName() == gw {
			return true
		}
	}
	return false
}

// sortByCreation orders configs as Istio's sortConfigByCreationTime: the
// oldest first, then by name and namespace.
func sortByCreation(cs []*model.Config) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i].Object.(*telemetryv1.Telemetry), cs[j].Object.(*telemetryv1.Telemetry)
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if cs[i].Key.Name != cs[j].Key.Name {
			return cs[i].Key.Name < cs[j].Key.Name
		}
		return cs[i].Key.Namespace < cs[j].Key.Namespace
	})
}

// providerNames are the names of refs.
func providerNames(refs []*tpb.ProviderRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.GetName())
	}
	return out
}

// metricsConfig is the merged metrics configuration of one provider.
type metricsConfig struct {
	client, server    metricConfig
	reportingInterval *durationpb.Duration
}

func (m metricsConfig) forClass(c trafficClass) metricConfig {
	if c == classInbound {
		return m.server
	}
	return m.client
}

type metricConfig struct {
	disabled  bool
	overrides []metricOverride
}

type metricOverride struct {
	name     string
	disabled bool
	tags     []tagOverride
}

type tagOverride struct {
	name, value string
	remove      bool
}

// allMetrics are Istio's standard metrics, sorted (ALL_METRICS expands to
// them).
var allMetrics = func() []string {
	var out []string
	for name := range tpb.MetricSelector_IstioMetric_value {
		if name != tpb.MetricSelector_ALL_METRICS.String() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}()

// mergeMetrics is Istio's mergeMetrics: the providers of the last
// Metrics block that names some (else the mesh's default providers) are
// in scope; each block's overrides apply, in order, to the providers it
// names or inherits; disabling ALL_METRICS drops the filter for a mode.
func mergeMetrics(metrics []*tpb.Metrics, defaults []string) map[string]metricsConfig {
	type override struct {
		disabled *wrapperspb.BoolValue
		tags     map[string]*tpb.MetricsOverrides_TagOverride
	}
	providers := map[string]map[tpb.WorkloadMode]map[string]override{}
	if len(metrics) == 0 {
		for _, p := range defaults {
			providers[p] = map[tpb.WorkloadMode]map[string]override{}
		}
	}
	inScope := defaults
	for _, m := range metrics {
		if names := providerNames(m.GetProviders()); len(names) > 0 {
			inScope = names
		}
	}
	scoped := map[string]bool{}
	for _, n := range inScope {
		scoped[n] = true
	}
	parent := defaults
	allOff := map[string]bool{} // provider/mode
	intervals := map[string]*durationpb.Duration{}
	for _, m := range metrics {
		names := providerNames(m.GetProviders())
		if len(names) == 0 {
			names = parent
		}
		parent = names
		for _, prov := range names {
			if !scoped[prov] {
				continue
			}
			if m.GetReportingInterval() != nil {
				intervals[prov] = m.GetReportingInterval()
			}
			if providers[prov] == nil {
				providers[prov] = map[tpb.WorkloadMode]map[string]override{tpb.WorkloadMode_CLIENT: {}, tpb.WorkloadMode_SERVER: {}}
			}
			mp := providers[prov]
			for _, o := range m.GetOverrides() {
				if isAllMetrics(o.GetMatch()) && o.GetDisabled().GetValue() {
					for _, mode := range modes(o.GetMatch().GetMode()) {
						allOff[prov+"/"+mode.String()] = true
					}
					continue
				}
				for _, mode := range modes(o.GetMatch().GetMode()) {
					delete(allOff, prov+"/"+mode.String())
					if mp[mode] == nil {
						mp[mode] = map[string]override{}
					}
					for _, name := range metricNames(o.GetMatch()) {
						ov := mp[mode][name]
						if o.GetDisabled() != nil {
							ov.disabled = o.GetDisabled()
						}
						for k, v := range o.GetTagOverrides() {
							if ov.tags == nil {
								ov.tags = map[string]*tpb.MetricsOverrides_TagOverride{}
							}
							ov.tags[k] = v
						}
						mp[mode][name] = ov
					}
				}
			}
		}
	}
	out := map[string]metricsConfig{}
	for prov, byMode := range providers {
		mc := metricsConfig{reportingInterval: intervals[prov]}
		for mode, byMetric := range byMode {
			dst := &mc.client
			if mode == tpb.WorkloadMode_SERVER {
				dst = &mc.server
			}
			if allOff[prov+"/"+mode.String()] {
				dst.disabled = true
				continue
			}
			for name, ov := range byMetric {
				mo := metricOverride{name: name, disabled: ov.disabled.GetValue()}
				for tag, to := range ov.tags {
					t := tagOverride{name: tag}
					switch to.GetOperation() {
					case tpb.MetricsOverrides_TagOverride_REMOVE:
						t.remove = true
					case tpb.MetricsOverrides_TagOverride_UPSERT:
						t.value = to.GetValue()
					}
					mo.tags = append(mo.tags, t)
				}
				sort.Slice(mo.tags, func(i, j int) bool { return mo.tags[i].name < mo.tags[j].name })
				dst.overrides = append(dst.overrides, mo)
			}
		}
		for _, d := range []*metricConfig{&mc.client, &mc.server} {
			sort.Slice(d.overrides, func(i, j int) bool { return d.overrides[i].name < d.overrides[j].name })
		}
		out[prov] = mc
	}
	return out
}

func modes(m tpb.WorkloadMode) []tpb.WorkloadMode {
	if m == tpb.WorkloadMode_CLIENT || m == tpb.WorkloadMode_SERVER {
		return []tpb.WorkloadMode{m}
	}
	return []tpb.WorkloadMode{tpb.WorkloadMode_CLIENT, tpb.WorkloadMode_SERVER}
}

func isAllMetrics(s *tpb.MetricSelector) bool {
	switch m := s.GetMetricMatch().(type) {
	case *tpb.MetricSelector_CustomMetric:
		return false
	case *tpb.MetricSelector_Metric:
		return m.Metric == tpb.MetricSelector_ALL_METRICS
	}
	return true
}

func metricNames(s *tpb.MetricSelector) []string {
	switch m := s.GetMetricMatch().(type) {
	case *tpb.MetricSelector_CustomMetric:
		return []string{m.CustomMetric}
	case *tpb.MetricSelector_Metric:
		if m.Metric != tpb.MetricSelector_ALL_METRICS {
			return []string{m.Metric.String()}
		}
	}
	return allMetrics
}

// loggingSpec is the merged access logging of one provider.
type loggingSpec struct {
	disabled bool
	filter   *tpb.AccessLogging_Filter
}

// mergeLogs is Istio's mergeLogs: levels are the accessLogging lists of
// the applicable Telemetry resources (those that have one), in order. The
// providers of the last level that names some for mode (else the mesh's
// default providers) are in scope; each entry sets the filter of, or
// disables, the providers it names or inherits.
func mergeLogs(levels [][]*tpb.AccessLogging, defaults []string, mode tpb.WorkloadMode) map[string]loggingSpec {
	out := map[string]loggingSpec{}
	if len(levels) == 0 {
		for _, p := range defaults {
			out[p] = loggingSpec{}
		}
		return out
	}
	names := defaults
	filters := map[string]loggingSpec{}
	for _, level := range levels {
		var these []string
		for _, l := range level {
			if !matchesMode(l.GetMatch(), mode) {
				continue
			}
			for _, p := range providerNames(l.GetProviders()) {
				these = append(these, p)
				filters[p] = loggingSpec{filter: l.GetFilter()}
			}
		}
		if len(these) > 0 {
			names = these
		}
	}
	scoped := map[string]bool{}
	for _, n := range names {
		scoped[n] = true
	}
	parent := defaults
	for _, level := range levels {
		for _, l := range level {
			provs := providerNames(l.GetProviders())
			if len(provs) == 0 {
				provs = parent
			}
			parent = provs
			for _, p := range provs {
				if !scoped[p] || !matchesMode(l.GetMatch(), mode) {
					continue
				}
				if l.GetDisabled().GetValue() {
					out[p] = loggingSpec{disabled: true}
					continue
				}
				out[p] = filters[p]
			}
		}
	}
	return out
}

func matchesMode(s *tpb.AccessLogging_LogSelector, mode tpb.WorkloadMode) bool {
	return s == nil || s.GetMode() == tpb.WorkloadMode_CLIENT_AND_SERVER || s.GetMode() == mode
}

// telemetryDecision is what the Telemetry resources and the MeshConfig
// decide for one proxy, before any Envoy configuration is built.
type telemetryDecision struct {
	metrics map[string]metricsConfig
	// logs are per mode; legacy is set when neither Telemetry nor the
	// default providers configure access logging, so that the
	// MeshConfig's accessLogFile applies.
	logs   map[tpb.WorkloadMode]map[string]loggingSpec
	legacy bool
}

func decideTelemetry(mc *meshv1alpha1.MeshConfig, ts []*tpb.Telemetry) telemetryDecision {
	var metrics []*tpb.Metrics
	var levels [][]*tpb.AccessLogging
	d := telemetryDecision{}
	for _, t := range ts {
		metrics = append(metrics, t.GetMetrics()...)
		if len(t.GetAccessLogging()) > 0 {
			levels = append(levels, t.GetAccessLogging())
		}
	}
	d.metrics = mergeMetrics(metrics, mc.GetDefaultProviders().GetMetrics())
	defaults := mc.GetDefaultProviders().GetAccessLogging()
	d.legacy = len(levels) == 0 && len(defaults) == 0
	d.logs = map[tpb.WorkloadMode]map[string]loggingSpec{
		tpb.WorkloadMode_CLIENT: mergeLogs(levels, defaults, tpb.WorkloadMode_CLIENT),
		tpb.WorkloadMode_SERVER: mergeLogs(levels, defaults, tpb.WorkloadMode_SERVER),
	}
	return d
}
