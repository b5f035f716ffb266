package gen

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/meshplane/discovery/pkg/model"
)

// Classes that differ in their service tags alone.
//
// With tracing on (the default MeshConfig) every connection manager's
// tracing names the proxy's canonical service and revision, mesh and
// cluster in literal tags (serviceTags, as istiod's buildServiceTags),
// and Istio's injector gives every pod the canonical labels. Keyed on
// them, every workload would be a class of its own: at M1 with the labels
// an injected pod's pilot-agent sends, 1,000 classes, 192 CPU s to
// connect and 12 GB of RSS (BENCHMARKS.md), where the configurations
// differ in nothing but those tags' values. istiod builds listeners per
// proxy and keeps none; here a class keeps its configuration for the
// next generation to reuse.
//
// So the tags are the last part of a sidecar's class key (|tags=), and a
// class with them is a variant of the class without them, its base: the
// base is generated once, for the first proxy that asks (its
// representative), and a variant is the base's configuration with the
// literal values of the four tags in its listeners rewritten from the
// representative's to its own, on the wire (retagPlan), and its scope's
// telemetry built for it (its own inbound listeners are built from that).
// Everything else, clusters, endpoints, routes, what generation read, is
// the base's. A variant's listeners are not kept: each is made when sent
// (lazyResource), from its base listener and the variant's values. The
// rewrite is byte for byte what generating the variant's class gives
// (TestVariantsAreTheirClasses); where a connection manager's
// tags are not exactly Istio's service tags with the representative's
// values (a custom tag of the same name), the rewrite refuses and the
// variant is generated as a class of its own.

// variantSep starts the variant's part of a class key.
const variantSep = "|tags="

// variantsApply reports whether p's service tags make a variant rather
// than a class: sidecars served by Envoy. Gateways are classes by their
// labels already, proxyless gRPC clients have no connection managers.
func variantsApply(p *model.Proxy) bool {
	return p.Type == model.ProxySidecar && !p.IsGRPC()
}

// VariantOf splits a class key into its base and the variant's tags (""
// when the key is no variant's).
func VariantOf(key string) (base, tags string) {
	i := strings.LastIndex(key, variantSep)
	if i < 0 {
		return key, ""
	}
	return key[:i], key[i+len(variantSep):]
}

// variant is what a variant's configuration holds of its making.
type variant struct {
	// base is the configuration it was made from.
	base *ClassConfig
	// tab is what its listeners are rewritten with.
	tab *retagTable
}

// retagTable is what a variant's listeners are rewritten with: the
// values, and the tracings of base's listeners (retagPlan) rewritten
// with them, by their plan (the listeners of a class share a few, and
// their plans: tracingPlanOf). A table does not change once a listener
// refers to it: a later generation of the variant that rewrites a new
// tracing makes a new table.
type retagTable struct {
	rt    *retag
	blobs map[*retagPlan][]byte
}

// blob returns b rewritten with t's values, adding it to t (which no
// listener may refer to yet) if it is new.
func (t *retagTable) blob(b blob) []byte {
	nb, ok := t.blobs[b.plan]
	if !ok {
		nb = b.plan.apply(b.b, *t.rt, nil)
		t.blobs[b.plan] = nb
	}
	return nb
}

// of returns the rewritten blobs of plan's tracings, in its order.
func (t *retagTable) of(plan *retagPlan) [][]byte {
	out := make([][]byte, len(plan.blobs))
	for i, b := range plan.blobs {
		out[i] = t.blobs[b.plan]
	}
	return out
}

// tagValues is the value of each of the service tags a variant rewrites.
func tagValues(p *model.Proxy) map[string]string {
	out := map[string]string{}
	for _, t := range serviceTags(p) {
		if t.Tag != "istio.namespace" {
			out[t.Tag] = t.GetLiteral().GetValue()
		}
	}
	return out
}

// errNotVariant is a listener whose tracing tags retag cannot rewrite.
var errNotVariant = errors.New("the tracing tags are not the representative's service tags")

// Variant returns the configuration of the class key for p, a variant of
// base's class (VariantOf): base's, with the service tags of its
// listeners naming p's values. prev is the variant's previous
// configuration, or nil: when base descends from prev's base, only the
// listeners base changed since are rewritten (none after an endpoint
// change, which then costs nothing here). It returns false when base's
// listeners do not carry the tags as generation puts them
// (errNotVariant): then the class key's configuration must be generated
// for p (Class).
func (g *Generator) Variant(base *ClassConfig, key string, p *model.Proxy, prev *ClassConfig) (*ClassConfig, bool) {
	if base.scope == nil || base.scope.Proxy == nil {
		return nil, false
	}
	// What the previous configuration of this variant already worked
	// out stands as long as its base's representative and telemetry do:
	// the values (a class key names them) and the telemetry built for p.
	// After an endpoint change (UpdateEndpoints keeps the scope's
	// telemetry) a variant then costs a few map copies.
	var last *variant
	if prev != nil && prev.variant != nil && prev.Class == key && prev.variant.base.scope.Proxy == base.scope.Proxy {
		last = prev.variant
	}
	v := &variant{base: base}
	if last != nil {
		v.tab = last.tab
	} else {
		rt := newRetag(tagValues(base.scope.Proxy), tagValues(p))
		v.tab = &retagTable{rt: &rt, blobs: map[*retagPlan][]byte{}}
	}
	rt := v.tab.rt
	ls := base.Sets[ListenerType]
	// Which listeners to rewrite: those base changed since prev's base,
	// if it tells; else all.
	names := ls.Names
	var from *Set
	if prev != nil && prev.variant != nil {
		if cs, ok := base.ChangesSince(prev.variant.base); ok {
			names, from = cs[ListenerType], prev.Sets[ListenerType]
		}
	}
	if len(names) > 0 && last != nil {
		// prev's listeners refer to its table: a copy takes the new
		// tracings.
		v.tab = &retagTable{rt: rt, blobs: maps.Clone(last.tab.blobs)}
	}
	set := from
	if from == nil || len(names) > 0 {
		var err error
		if set, err = v.listeners(ls, from, names); err != nil {
			g.log.Debug("class generated for a variant", "class", key, "reason", err)
			return nil, false
		}
	}
	c := *base
	c.Class = key
	c.Sets = maps.Clone(base.Sets)
	c.Sets[ListenerType] = set
	c.variant = v
	c.ops = nil // never a generation's previous configuration
	sc := *base.scope
	sc.Proxy = p
	if last != nil && last.base.scope.tel == base.scope.tel {
		sc.tel = prev.scope.tel
	} else {
		sc.tel = g.classTelemetry(sc.w.unrecorded(), p)
	}
	c.scope = &sc
	return &c, true
}

// listeners returns the variant's listener set: from (its previous set,
// or nil) with the listeners names of ls, its base's set, rewritten.
func (v *variant) listeners(ls, from *Set, names []string) (*Set, error) {
	out := make(map[string]*Resource, ls.Len())
	var sum uint64
	if from != nil {
		maps.Copy(out, from.Resources)
		sum = from.sum
	}
	for _, name := range names {
		if old := out[name]; old != nil {
			sum -= entryHash(name, old)
			delete(out, name)
		}
		r := ls.Resources[name]
		if r == nil {
			continue // removed
		}
		nr, err := v.tab.rewrite(r)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		out[name] = nr
		sum += entryHash(name, nr)
	}
	set := newSetSorted(ListenerType, out, ls.Names, sum)
	set.derived, set.suffix = ls, v.tab.rt.suffix
	return set, nil
}

// rewrite returns base's listener r with t's values: r itself when it
// has no service tags or they would not change, else a resource made
// when sent (lazyResource).
func (t *retagTable) rewrite(r *Resource) (*Resource, error) {
	plan, err := retagPlanOf(r, t.rt.from)
	switch {
	case err != nil:
		return nil, err
	case len(plan.spans) == 0 || maps.Equal(t.rt.from, t.rt.to):
		return r, nil
	}
	blobs := make([][]byte, len(plan.blobs))
	for i, b := range plan.blobs {
		blobs[i] = t.blob(b)
	}
	return lazyResource(r.Name, t.rt.version(r), &lazyWire{
		size: plan.size(r.Wire().GetValue(), *t.rt, blobs), base: r, plan: plan, tab: t,
	}), nil
}
