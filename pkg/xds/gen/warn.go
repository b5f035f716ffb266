package gen

import (
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshplane/discovery/pkg/model"
)

// fieldSet is the set of supported field paths of one kind, written with
// JSON names and without list indexes ("http.match.uri"). A field whose
// path is in the set is supported with everything under it unless the set
// also names some of its children; then only those children are.
type fieldSet map[string]bool

func newFieldSet(paths ...string) fieldSet {
	fs := fieldSet{}
	for _, p := range paths {
		fs[p] = true
	}
	return fs
}

// partial reports whether the set names some field under path.
func (fs fieldSet) partial(path string) bool {
	for p := range fs {
		if strings.HasPrefix(p, path+".") {
			return true
		}
	}
	return false
}

// unsupportedFields lists the populated fields of m that fs does not
// support, with list indexes ("http[0].mirror").
func unsupportedFields(m proto.Message, fs fieldSet) []string {
	var out []string
	var walk func(shown, path string, m protoreflect.Message)
	walk = func(shown, path string, m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			p, s := fd.JSONName(), fd.JSONName()
			if path != "" {
				p, s = path+"."+p, shown+"."+s
			}
			if !fs[p] && !fs.partial(p) {
				out = append(out, s)
				return true
			}
			if !fs.partial(p) || fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
				return true
			}
			if fd.IsList() {
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(s+"["+itoa(int32(i))+"]", p, l.Get(i).Message())
				}
				return true
			}
			walk(s, p, v.Message())
			return true
		})
	}
	walk("", "", m.ProtoReflect())
	sort.Strings(out)
	return out
}

// warnings logs, once per resource version, the fields of a resource that
// generation ignores, and counts them.
type warnings struct {
	once  sync.Map // kind/ns/name@resourceVersion -> true
	mu    sync.Mutex
	count map[[2]string]float64 // kind, field (without indexes) -> resources
	vec   *prometheus.CounterVec
	// dupDomains counts shadowed VirtualServices (route_vs_metrics.go).
	dupDomains dupDomainCounter
}

// warn reports the fields of c's spec (kind's fieldSet) that have no
// effect; resourceVersion makes the report once per version.
func (g *Generator) warn(c *model.Config, resourceVersion string, spec proto.Message, fs fieldSet) {
	key := c.Key.String() + "@" + resourceVersion
	if _, done := g.warns.once.LoadOrStore(key, true); done {
		return
	}
	fields := append(unsupportedFields(spec, fs), unsupportedValues(c.Key.Kind, spec)...)
	if len(fields) == 0 {
		return
	}
	msg := "fields not supported yet are ignored"
	if c.Key.Kind == model.KindAuthorizationPolicy {
		// Ignoring a security field would widen what the policy allows.
		msg = "fields not supported yet; a rule that needs one fails closed (ALLOW: left out; DENY, CUSTOM: enforced without it)"
	}
	g.log.Warn(msg, "kind", string(c.Key.Kind), "resource", c.Key.Namespace+"/"+c.Key.Name, "fields", fields)
	g.warns.mu.Lock()
	defer g.warns.mu.Unlock()
	if g.warns.count == nil {
		g.warns.count = map[[2]string]float64{}
	}
	seen := map[string]bool{}
	for _, f := range fields {
		f = stripIndexes(f)
		if seen[f] {
			continue
		}
		seen[f] = true
		g.warns.count[[2]string{string(c.Key.Kind), f}]++
		if g.warns.vec != nil {
			g.warns.vec.WithLabelValues(string(c.Key.Kind), f).Inc()
		}
	}
}

func stripIndexes(s string) string {
	var b strings.Builder
	skip := false
	for _, r := range s {
		switch {
		case r == '[':
			skip = true
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// RegisterMetrics registers discovery_xds_unsupported_fields_total{kind,
// field}: resource versions seen with a field generation ignores.
func (g *Generator) RegisterMetrics(reg prometheus.Registerer) error {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "discovery_xds_unsupported_fields_total",
		Help: "Resource versions that set a field the xDS generator does not support yet (the field has no effect).",
	}, []string{"kind", "field"})
	if err := reg.Register(vec); err != nil {
		return err
	}
	if err := g.warns.dupDomains.register(reg); err != nil {
		return err
	}
	if err := g.refusals.register(reg); err != nil {
		return err
	}
	if err := g.efRefusals.register(reg); err != nil {
		return err
	}
	g.warns.mu.Lock()
	defer g.warns.mu.Unlock()
	for k, n := range g.warns.count {
		vec.WithLabelValues(k[0], k[1]).Add(n)
	}
	g.warns.vec = vec
	return nil
}

// UnsupportedCounts returns, per "kind field", how many resource versions
// set a field that has no effect.
func (g *Generator) UnsupportedCounts() map[string]float64 {
	g.warns.mu.Lock()
	defer g.warns.mu.Unlock()
	out := make(map[string]float64, len(g.warns.count))
	for k, n := range g.warns.count {
		out[k[0]+" "+k[1]] = n
	}
	return out
}

// supportedFields are, per kind, the spec fields generation acts on (Go
// initialises it after the field sets, which it depends on).
var supportedFields = map[model.Kind]fieldSet{
	model.KindVirtualService:        vsFields,
	model.KindDestinationRule:       drFields,
	model.KindAuthorizationPolicy:   authzFields,
	model.KindPeerAuthentication:    peerAuthnFields,
	model.KindGateway:               gatewayFields,
	model.KindServiceEntry:          entryFields,
	model.KindWorkloadEntry:         workloadEntryFields,
	model.KindSidecar:               sidecarFields,
	model.KindTelemetry:             telemetryFields,
	model.KindRequestAuthentication: requestAuthnFields,
	model.KindEnvoyFilter:           envoyFilterFields,
	model.KindProxyConfig:           proxyConfigFields,
	model.KindWorkloadGroup:         workloadGroupFields,
	model.KindWasmPlugin:            wasmFields,
}

// valueChecks are, per kind, the supported fields whose value may still
// be unsupported (Sidecar ingress captureMode NONE, Gateway tls.mode
// OPTIONAL_MUTUAL); they are reported like unsupported fields.
var valueChecks = map[model.Kind]func(proto.Message) []string{
	model.KindSidecar:     sidecarUnsupportedValues,
	model.KindGateway:     gatewayUnsupportedValues,
	model.KindEnvoyFilter: envoyFilterUnsupportedValues,
	model.KindWasmPlugin:  wasmUnsupportedValues,
}

func unsupportedValues(kind model.Kind, spec proto.Message) []string {
	if check := valueChecks[kind]; check != nil {
		return check(spec)
	}
	return nil
}

// UnsupportedFields lists the fields of an Istio spec that generation
// ignores, list indexes written as "[]" ("http[].mirror"); nil for kinds
// the generator does not read field by field. The validating webhook
// returns them as warnings. Gateway servers of every Istio mode are
// served (TCP, TLS terminated or passed through, AUTO_PASSTHROUGH) except
// OPTIONAL_MUTUAL and unknown protocols, reported as values
// (gateway_server.go).
func UnsupportedFields(kind model.Kind, spec proto.Message) []string {
	fs, ok := supportedFields[kind]
	if !ok {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, f := range append(unsupportedFields(spec, fs), unsupportedValues(kind, spec)...) {
		f = emptyIndexes(f)
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

func emptyIndexes(s string) string {
	var b strings.Builder
	skip := false
	for _, r := range s {
		switch {
		case r == '[':
			skip = true
			b.WriteString("[]")
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}
