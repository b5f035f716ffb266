package gen

import (
	"cmp"
	"fmt"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"

	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
)

// telemetryFor returns c's telemetry for the next generation of its
// class, when it stands there: it was made for the same proxy (a base's
// representative), with placeholders or without them alike, and
// nothing it read changed (cs, judged in sc, the next generation's
// scope). c is what the next generation may reuse (reuseOf), nil for
// nothing. Made afresh, every base's telemetry was a new one at each
// generation, and each of its variants (1,000 at M1 with injected
// labels, Variant) made its own again for it: 40 MB allocated in 13 s
// of M1's service changes.
func (c *ClassConfig) telemetryFor(p *model.Proxy, shared bool, sc *Scope, cs *changes) *classTelemetry {
	if c == nil || c.scope == nil || c.scope.tel == nil || c.scope.Proxy != p || c.shared != shared ||
		!c.scope.tel.reads.stands(sc, cs) {
		return nil
	}
	return c.scope.tel
}

// classTelemetry decides and builds the telemetry of p's class in w: the
// traffic classes of a sidecar (outbound, inbound) or of a gateway. It
// reports, once per Telemetry version, the providers it cannot configure.
// Proxyless gRPC gets none (nil). w records into a Reads of the
// telemetry's own, which every listener built with it adds (Scope.outTel).
// With shared, the tracing's service tags carry placeholders for p's
// values (class_shared.go).
func (g *Generator) classTelemetry(w *view, p *model.Proxy, shared bool) *classTelemetry {
	if p.IsGRPC() {
		return nil
	}
	cfgs := applicableTelemetries(w, p)
	specs := make([]*tpb.Telemetry, 0, len(cfgs))
	for _, c := range cfgs {
		t := c.Object.(*telemetryv1.Telemetry)
		specs = append(specs, &t.Spec)
		g.warn(c, t.ResourceVersion, &t.Spec, telemetryFields)
	}
	mc := w.Mesh().Proto()
	d := decideTelemetry(mc, specs)
	g.reportProviders(cfgs, mc)
	look := meshLookup{w: w, mesh: mc}
	tin := tracingInput{look: look, d: decideTracing(mc, look.provider, specs), proxy: p, shared: shared, pc: proxyTracing(mc, p), sampling: g.defaultSampling()}
	ct := &classTelemetry{reads: w.r}
	classes := []trafficClass{classOutbound, classInbound}
	if p.Type == model.ProxyRouter {
		classes = []trafficClass{classGateway}
	}
	var first *listenerTelemetry
	for _, c := range classes {
		lt := buildListenerTelemetry(look, d, c)
		var err error
		if tin.d == nil && first != nil {
			// From the MeshConfig alone the tracing is the same for
			// every traffic class: the classes share it, as a class's
			// listeners do. Each of M1's 1,000 variants built it twice
			// (its service tags), 1.3 MB of the heap.
			lt.tracing, lt.requestID = first.tracing, first.requestID
		} else {
			lt.tracing, lt.requestID, err = buildTracing(tin, c)
		}
		first = cmp.Or(first, lt)
		if err != nil {
			// The provider's service was looked up (ct.reads): its
			// appearing rebuilds the listeners.
			g.reportTracing(cfgs, w, err)
		}
		ct.byClass[c] = lt
	}
	return ct
}

// reportTracing warns, once per Telemetry version (or MeshConfig when no
// Telemetry configures tracing), that a tracing provider could not be
// configured, and proxies do not trace, as istiod warns.
func (g *Generator) reportTracing(cfgs []*model.Config, w *view, err error) {
	const msg = "tracing is not configured: the provider cannot be, as istiod cannot"
	for i := len(cfgs) - 1; i >= 0; i-- {
		if t := cfgs[i].Object.(*telemetryv1.Telemetry); len(t.Spec.GetTracing()) > 0 {
			g.warnOnce(cfgs[i], t.ResourceVersion, "tracing:"+err.Error(), msg, "reason", err.Error())
			return
		}
	}
	if _, done := g.warns.once.LoadOrStore("MeshConfig@"+w.Mesh().Hash()+"#"+err.Error(), true); !done {
		g.log.Warn(msg, "from", "MeshConfig defaultProviders.tracing", "reason", err.Error())
	}
}

// reportProviders warns, once per Telemetry version, of the providers a
// Telemetry names that the MeshConfig does not define or that discovery
// cannot configure for what the Telemetry asks.
func (g *Generator) reportProviders(cfgs []*model.Config, mc *meshv1alpha1.MeshConfig) {
	for _, c := range cfgs {
		t := c.Object.(*telemetryv1.Telemetry)
		check := func(what string, refs []*tpb.ProviderRef, needMetrics, needLogs bool) {
			needTracing := what == "tracing"
			for _, name := range providerNames(refs) {
				p := findProvider(mc, name)
				switch {
				case p == nil:
					g.warnOnce(c, t.ResourceVersion, "provider:"+what+":"+name,
						"Telemetry names a provider the MeshConfig's extensionProviders do not define; it is ignored, as istiod ignores it",
						"provider", name, "for", what)
				default:
					m, l := mesh.SupportedProvider(p)
					if (needMetrics && !m) || (needLogs && !l) || (needTracing && !mesh.TracingProvider(p)) {
						g.warnOnce(c, t.ResourceVersion, "provider:"+what+":"+name,
							"Telemetry names a provider discovery does not configure for "+what+"; it is ignored",
							"provider", name, "type", providerType(p))
					}
				}
			}
		}
		for _, m := range t.Spec.GetMetrics() {
			check("metrics", m.GetProviders(), true, false)
		}
		for _, l := range t.Spec.GetAccessLogging() {
			check("accessLogging", l.GetProviders(), false, true)
		}
		for _, tr := range t.Spec.GetTracing() {
			// Istio uses the first provider only.
			if refs := tr.GetProviders(); len(refs) > 0 {
				check("tracing", refs[:1], false, false)
				if len(refs) > 1 {
					g.warnOnce(c, t.ResourceVersion, "tracing:extra", "Telemetry tracing names several providers; only the first is used, as in istiod",
						"ignored", providerNames(refs[1:]))
				}
			}
		}
	}
}

func findProvider(mc *meshv1alpha1.MeshConfig, name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	for _, p := range mc.GetExtensionProviders() {
		if strings.EqualFold(p.GetName(), name) {
			return p
		}
	}
	return nil
}

func providerType(p *meshv1alpha1.MeshConfig_ExtensionProvider) string {
	if p.GetProvider() == nil {
		return "none"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", p.GetProvider()), "*v1alpha1.MeshConfig_ExtensionProvider_")
}

// selectingTelemetries indexes, per namespace, the Telemetry resources
// with a selector or targetRefs (worldIndex), sorted by name.
func selectingTelemetries(w *view) map[string][]*model.Config {
	out := map[string][]*model.Config{}
	for _, c := range w.Configs(model.KindTelemetry) {
		if t, ok := c.Object.(*telemetryv1.Telemetry); ok && !namespaceWide(&t.Spec) {
			out[c.Key.Namespace] = append(out[c.Key.Namespace], c)
		}
	}
	return out
}

// telemetrySelecting names, for ClassKey, the Telemetry resources of p's
// namespace whose selector (or targetRefs) selects p; "" for none. A
// namespace-wide or root Telemetry is implied by the namespace.
func (ix *worldIndex) telemetrySelecting(p *model.Proxy) string {
	out := ""
	for _, c := range ix.telemetry[p.Namespace] {
		if telemetrySelects(&c.Object.(*telemetryv1.Telemetry).Spec, p) {
			if out != "" {
				out += ","
			}
			out += c.Key.Name
		}
	}
	return out
}
