package validate

import (
	"github.com/google/cel-go/cel"
	"google.golang.org/protobuf/proto"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// celEnv parses access log filter expressions, as istiod's webhook does
// (a parse, not a type check: Envoy's attributes are not declared).
var celEnv, _ = cel.NewEnv()

// checkTelemetry is Istio's ValidateTelemetry: one of selector or
// targetRefs, providers named, tag overrides well formed, sampling
// percentages in range, access log filters that parse as CEL.
func checkTelemetry(m proto.Message, _ *meta, p *problems) {
	t := m.(*telemetry.Telemetry)
	checkPolicyTarget(p, t.GetSelector(), t.GetTargetRef(), t.GetTargetRefs())
	for i, mt := range t.GetMetrics() {
		path := at("spec.metrics", i)
		checkProviders(p, path, mt.GetProviders())
		for j, o := range mt.GetOverrides() {
			opath := at(path+".overrides", j)
			if o == nil {
				p.add(opath, "tagOverrides may not be null")
				continue
			}
			for name, to := range o.GetTagOverrides() {
				tpath := opath + ".tagOverrides[" + name + "]"
				if name == "" {
					p.warn(tpath, "tagOverrides.name may not be empty")
				}
				switch {
				case to == nil:
					p.add(tpath, "tagOverrides may not be null")
				case to.GetOperation() == telemetry.MetricsOverrides_TagOverride_UPSERT && to.GetValue() == "":
					p.add(tpath, "tagOverrides.value must be set when operation is UPSERT")
				case to.GetOperation() == telemetry.MetricsOverrides_TagOverride_REMOVE && to.GetValue() != "":
					p.add(tpath, "tagOverrides.value may only be set when operation is UPSERT")
				}
			}
			if cm, ok := o.GetMatch().GetMetricMatch().(*telemetry.MetricSelector_CustomMetric); ok && cm.CustomMetric == "" {
				p.add(opath+".match", "customMetric may not be empty")
			}
		}
	}
	if len(t.GetTracing()) > 1 {
		p.warn("spec.tracing", "multiple tracing is not currently supported")
	}
	for i, tr := range t.GetTracing() {
		path := at("spec.tracing", i)
		if len(tr.GetProviders()) > 1 {
			p.warn(path, "multiple providers is not currently supported")
		}
		checkProviders(p, path, tr.GetProviders())
		if v := tr.GetRandomSamplingPercentage().GetValue(); v < 0 || v > 100 {
			p.add(path+".randomSamplingPercentage", "randomSamplingPercentage must be in range [0.0, 100.0]")
		}
		for name, tag := range tr.GetCustomTags() {
			tpath := path + ".customTags[" + name + "]"
			if name == "" {
				p.add(tpath, "tag name may not be empty")
			}
			switch v := tag.GetType().(type) {
			case nil:
				if tag == nil {
					p.add(tpath, "tag '%s' may not have a nil value", name)
				}
			case *telemetry.Tracing_CustomTag_Literal:
				if v.Literal.GetValue() == "" {
					p.add(tpath, "literal tag value may not be empty")
				}
			case *telemetry.Tracing_CustomTag_Header:
				if v.Header.GetName() == "" {
					p.add(tpath, "header tag name may not be empty")
				}
			case *telemetry.Tracing_CustomTag_Environment:
				if v.Environment.GetName() == "" {
					p.add(tpath, "environment tag name may not be empty")
				}
			}
		}
	}
	for i, l := range t.GetAccessLogging() {
		path := at("spec.accessLogging", i)
		if f := l.GetFilter(); f != nil {
			if _, iss := celEnv.Parse(f.GetExpression()); iss.Err() != nil {
				p.add(path+".filter.expression", "must be a valid CEL expression, %v", iss.Err())
			}
		}
		checkProviders(p, path, l.GetProviders())
	}
}

func checkProviders(p *problems, path string, providers []*telemetry.ProviderRef) {
	for _, pr := range providers {
		if pr.GetName() == "" {
			p.add(path+".providers", "providers.name may not be empty")
			return
		}
	}
}
