package gen

import (
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Tracing, as istiod decides it (pilot/pkg/model/telemetry.go Tracing,
// pilot/pkg/networking/core/tracing.go): this file decides, and
// telemetry_tracing_build.go builds the connection managers' tracing.
//
// Without Telemetry tracing and without defaultProviders.tracing, the
// MeshConfig's enableTracing (true by default) decides: every connection
// manager then traces with no provider (the tracer is the agent's
// bootstrap's, from defaultConfig.tracing), sampling
// defaultConfig.tracing.sampling (else PILOT_TRACE_SAMPLING, 1%), with
// Istio's tags. Otherwise the Telemetry resources merge over the first
// default provider: the later Tracing entry wins per mode (providers: the
// first named; disableSpanReporting, customTags, randomSamplingPercentage,
// useRequestIdForTraceSampling, enableIstioTags, disableContextPropagation
// each replace), and a mode left without a provider traces nothing.
//
// A proxy's tracing depends on the proxy: the tags name its canonical
// service and revision, mesh and cluster; sampling and tags may come from
// the ProxyConfig it sends (PROXY_CONFIG); datadog and opentelemetry name
// spans after its node cluster. ClassKey separates classes by these
// (traceIdentity) whenever tracing may apply.

// DefaultTraceSampling is Istio's PILOT_TRACE_SAMPLING default: the
// percentage of requests traced when neither a Telemetry nor the proxy's
// defaultConfig.tracing.sampling says.
const DefaultTraceSampling = 1.0

func (g *Generator) defaultSampling() float64 { return g.traceSampling }

// tracingSpec is the merged tracing of one mode (Istio's TracingSpec).
type tracingSpec struct {
	provider     *meshv1alpha1.MeshConfig_ExtensionProvider
	providerName string // as named, for reports
	disabled     bool
	sampling     *float64
	customTags   map[string]*tpb.Tracing_CustomTag
	useRequestID bool
	istioTags    bool
	noContext    bool
}

// tracingDecision is the tracing of a proxy's client and server sides;
// nil when no Telemetry and no default provider configure tracing (the
// MeshConfig's enableTracing then decides).
type tracingDecision struct {
	client, server tracingSpec
}

func (d *tracingDecision) forClass(c trafficClass) tracingSpec {
	if c == classInbound {
		return d.server
	}
	return d.client
}

// decideTracing is Istio's Telemetries.Tracing over the applicable
// Telemetry resources ts, in order.
func decideTracing(mc *meshv1alpha1.MeshConfig, lookup func(string) *meshv1alpha1.MeshConfig_ExtensionProvider, ts []*tpb.Telemetry) *tracingDecision {
	var entries []*tpb.Tracing
	for _, t := range ts {
		entries = append(entries, t.GetTracing()...)
	}
	defaults := mc.GetDefaultProviders().GetTracing()
	if len(entries) == 0 && len(defaults) == 0 {
		return nil
	}
	d := &tracingDecision{
		client: tracingSpec{useRequestID: true, istioTags: true},
		server: tracingSpec{useRequestID: true, istioTags: true},
	}
	if len(defaults) > 0 {
		// Istio uses the first default provider only.
		d.client.provider, d.client.providerName = lookup(defaults[0]), defaults[0]
		d.server.provider, d.server.providerName = d.client.provider, defaults[0]
	}
	for _, m := range entries {
		specs := []*tracingSpec{&d.client, &d.server}
		switch m.GetMatch().GetMode() {
		case tpb.WorkloadMode_CLIENT:
			specs = specs[:1]
		case tpb.WorkloadMode_SERVER:
			specs = specs[1:]
		}
		for _, s := range specs {
			if names := providerNames(m.GetProviders()); len(names) > 0 {
				s.provider, s.providerName = lookup(names[0]), names[0]
			}
			if v := m.GetDisableSpanReporting(); v != nil {
				s.disabled = v.GetValue()
			}
			if m.GetCustomTags() != nil {
				s.customTags = m.GetCustomTags()
			}
			if v := m.GetRandomSamplingPercentage(); v != nil {
				f := v.GetValue()
				s.sampling = &f
			}
			if v := m.GetUseRequestIdForTraceSampling(); v != nil {
				s.useRequestID = v.GetValue()
			}
			if v := m.GetEnableIstioTags(); v != nil {
				s.istioTags = v.GetValue()
			}
			if v := m.GetDisableContextPropagation(); v != nil {
				s.noContext = v.GetValue()
			}
		}
	}
	for _, s := range []*tracingSpec{&d.client, &d.server} {
		if s.provider == nil {
			s.disabled = true
		}
	}
	return d
}

// tracingMayApply reports whether any proxy of w may trace: the
// MeshConfig enables legacy tracing or names a default tracing provider,
// or some Telemetry has a tracing block.
func tracingMayApply(w *view) bool {
	mc := w.Mesh().Proto()
	if mc.GetEnableTracing() || len(mc.GetDefaultProviders().GetTracing()) > 0 {
		return true
	}
	for _, c := range w.Configs(model.KindTelemetry) {
		if t, ok := c.Object.(*telemetryv1.Telemetry); ok && len(t.Spec.GetTracing()) > 0 {
			return true
		}
	}
	return false
}

// traceIdentity is what a proxy's tracing reads of the proxy beyond its
// class (p.Class: type, namespace, version), in two parts. tags is what
// only the connection managers' service tags read (serviceTags: the
// canonical service and revision, mesh and cluster): proxies that differ
// in nothing else get the same configuration but for those tags' values,
// which a variant rewrites (class_variant.go). rest is the ProxyConfig
// the proxy sends and, when nodeCluster (some provider names spans after
// it), the node cluster. Each is "" when the proxy has none of it. The
// node cluster is pilot-agent's "<service>.<namespace>": keying on it
// always would give every service its own class.
func traceIdentity(p *model.Proxy, nodeCluster bool) (tags, rest string) {
	l := p.Labels()
	name, rev, md := l[canonicalNameLabel], l[canonicalRevisionLabel], &p.Metadata
	if name != "" || rev != "" || md.MeshID != "" || md.ClusterID != "" {
		tags = strings.Join([]string{name, rev, md.MeshID, md.ClusterID}, ",")
	}
	sc := ""
	if nodeCluster {
		sc = p.ServiceCluster
	}
	if sc != "" || md.ProxyConfig {
		pc := "-"
		if md.ProxyConfig {
			pc = md.Tracing
		}
		rest = sc + "," + pc
	}
	return tags, rest
}

// tracingReadsNodeCluster reports whether some extension provider of the
// MeshConfig names spans after the proxy's node cluster (datadog,
// opentelemetry: providerTracing): only then does the node cluster
// separate classes.
func tracingReadsNodeCluster(w *view) bool {
	for _, p := range w.Mesh().Proto().GetExtensionProviders() {
		switch p.GetProvider().(type) {
		case *meshv1alpha1.MeshConfig_ExtensionProvider_Datadog, *meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry:
			return true
		}
	}
	return false
}

const (
	canonicalNameLabel     = "service.istio.io/canonical-name"
	canonicalRevisionLabel = "service.istio.io/canonical-revision"
)

// proxyTracing is the tracing part of the proxy's configuration: the
// ProxyConfig the proxy sends, else the MeshConfig's defaultConfig (Istio's
// ProxyConfigOrDefault). A PROXY_CONFIG tracing that does not decode is
// left out.
func proxyTracing(mc *meshv1alpha1.MeshConfig, p *model.Proxy) *meshv1alpha1.Tracing {
	if !p.Metadata.ProxyConfig {
		return mc.GetDefaultConfig().GetTracing()
	}
	if p.Metadata.Tracing == "" {
		return nil
	}
	t := &meshv1alpha1.Tracing{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(p.Metadata.Tracing), t); err != nil {
		return nil
	}
	return t
}

// samplingOf is Istio's proxyConfigSamplingValue: the ProxyConfig's
// tracing.sampling when set (over 100 counts as 1), else dflt.
func samplingOf(t *meshv1alpha1.Tracing, dflt float64) float64 {
	if s := t.GetSampling(); s != 0 {
		if s > 100 {
			return 1
		}
		return s
	}
	return dflt
}

var istioVersionRe = regexp.MustCompile(`^\d+\.\d+(\.\d+)?`)

// versionAtLeast is Istio's VersionGreaterOrEqual on the proxy's
// ISTIO_VERSION: a version that does not parse (or none) counts as the
// latest, as in Istio.
func versionAtLeast(v string, major, minor int) bool {
	v = istioVersionRe.FindString(strings.TrimPrefix(v, "release-"))
	if v == "" {
		return true
	}
	parts := strings.SplitN(v, ".", 3)
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(parts[1])
	return ma > major || (ma == major && mi >= minor)
}

// tracingFields are the Telemetry tracing fields generation acts on.
var tracingFields = []string{
	"tracing.providers", "tracing.match", "tracing.randomSamplingPercentage",
	"tracing.customTags", "tracing.disableSpanReporting", "tracing.useRequestIdForTraceSampling",
	"tracing.enableIstioTags", "tracing.disableContextPropagation",
}
