package gen

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

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

// of returns the rewritten blobs of plan's tracings, in its order.
func (t *retagTable) of(plan *retagPlan) [][]byte {
	return t.into(make([][]byte, 0, len(plan.blobs)), plan)
}

// into is of, appended to out.
func (t *retagTable) into(out [][]byte, plan *retagPlan) [][]byte {
	for _, b := range plan.blobs {
		out = append(out, t.blobs[b.plan])
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
// listeners naming p's values. Its listener set is a view of base's
// (retagView): it holds nothing per listener, and a listener is made
// with p's values when asked for. prev is the variant's previous
// configuration, or nil: what it worked out stands while base's
// representative does. It returns false when base's listeners do not
// carry the tags as generation puts them (errNotVariant): then the
// class key's configuration must be generated for p (Class).
func (g *Generator) Variant(base *ClassConfig, key string, p *model.Proxy, prev *ClassConfig) (*ClassConfig, bool) {
	if base.scope == nil || base.scope.Proxy == nil {
		return nil, false
	}
	// What the previous configuration of this variant already worked
	// out stands as long as its base's representative, placeholders
	// (class_shared.go) and telemetry do:
	// the values (a class key names them) and the telemetry built for p.
	// After an endpoint change (UpdateEndpoints keeps the scope's
	// telemetry) a variant then costs a few map copies.
	var last *variant
	if prev != nil && prev.variant != nil && prev.Class == key && prev.variant.base.scope.Proxy == base.scope.Proxy && prev.variant.base.shared == base.shared {
		last = prev.variant
	}
	v := &variant{base: base}
	if last != nil {
		v.tab = last.tab
	} else {
		from, to := tagValues(base.scope.Proxy), tagValues(p)
		if base.shared {
			from, to = placeholderValues, allTagValues(p)
		}
		rt := newRetag(from, to)
		v.tab = &retagTable{rt: &rt, blobs: map[*retagPlan][]byte{}}
	}
	ls := base.Sets[ListenerType]
	set := ls
	if ls != nil && !maps.Equal(v.tab.rt.from, v.tab.rt.to) {
		info := ls.retagInfoOf(v.tab.rt.from)
		if info.err != nil {
			g.log.Debug("class generated for a variant", "class", key, "reason", info.err)
			return nil, false
		}
		v.tab = v.tab.covering(info)
		set = &Set{TypeURL: ListenerType, Version: ls.Version + v.tab.rt.suffix, Names: ls.Names,
			view: &retagView{base: ls, info: info, tab: v.tab}}
	}
	c := *base
	c.Class = key
	c.Sets = maps.Clone(base.Sets)
	c.Sets[ListenerType] = set
	c.variant = v
	c.logs = nil // never a generation's previous configuration
	sc := *base.scope
	sc.Proxy = p
	if last != nil && last.base.scope.tel == base.scope.tel {
		sc.tel = prev.scope.tel
	} else {
		sc.tel = g.classTelemetry(sc.w.unrecorded(), p, false)
	}
	c.scope = &sc
	return &c, true
}

// retagInfo is what the views of a base's listener set read of it for
// one representative's values: each listener's plan, the tracings the
// plans rewrite, and the listeners no rewrite changes. Built once per set
// (retagInfoOf) and read by any number of views at once: nothing changes
// it after.
type retagInfo struct {
	from map[string]string
	// plans are those of the listeners with service tags.
	plans map[string]*retagPlan
	// ordered is every listener with its plan (nil: none), in name
	// order: a view written whole walks it (Set.WriteAll).
	ordered []planned
	// blobs are the distinct tracings, each once.
	blobs []blob
	// plain are the listeners without service tags, which a view serves
	// as they are, by name: their versions.
	plain map[string]string
	// err is why a listener cannot be rewritten (errNotVariant): no view
	// of the set can be made.
	err error
	// shapes are the views' shapes (viewShape) by shapeKey: a
	// listener's size and parts depend on the lengths of the values
	// written into it, not on the values, so the variants whose values
	// are as long as another's share its shape. Counting it walked every
	// listener of every view once more: about 0.5 of the 12-13 CPU s
	// sampled in the first 20 s of 1,000 proxies of 1,000 variants
	// connecting at M1 (BENCHMARKS.md).
	shapes sync.Map
}

// retagInfoOf returns s's retagInfo for the representative's values
// from, built on first use and kept with s. s is a builder's set, never
// a view.
//
// Equal sets (the namespaces' classes' listeners, generated with
// placeholders: class_shared.go) share one retagInfo through their
// Versions (Memo): each held its own, 10 MB of the heap at M1.
func (s *Set) retagInfoOf(from map[string]string) *retagInfo {
	if in := s.retag.Load(); in != nil && maps.Equal(in.from, from) {
		return in
	}
	in := Memo(s.Versions(), func() *retagInfo { return s.newRetagInfo(from) })
	if !maps.Equal(in.from, from) {
		in = s.newRetagInfo(from)
	}
	s.retag.Store(in)
	return in
}

// newRetagInfo builds s's retagInfo for the representative's values
// from.
func (s *Set) newRetagInfo(from map[string]string) *retagInfo {
	in := &retagInfo{from: from, plans: make(map[string]*retagPlan, len(s.rs)), plain: map[string]string{}, ordered: make([]planned, 0, len(s.rs))}
	seen := map[*retagPlan]bool{}
	for i, n := range s.Names {
		r := s.rs[i]
		plan, err := retagPlanOf(r, from)
		if err != nil {
			in.err = fmt.Errorf("listener %s: %w", n, err)
			break
		}
		if len(plan.spans) == 0 {
			in.plain[n] = r.Hash
			in.ordered = append(in.ordered, planned{r: r})
			continue
		}
		in.plans[n] = plan
		in.ordered = append(in.ordered, planned{r: r, plan: plan})
		for _, b := range plan.blobs {
			if !seen[b.plan] {
				seen[b.plan] = true
				in.blobs = append(in.blobs, b)
			}
		}
	}
	return in
}

// covering returns a table of t's values holding exactly the tracings
// of in: t itself when it does, else a new one that takes what it can
// of t. Views read their table unlocked: a table never changes once
// made, and one made for a newer base holds no tracing the base no
// longer has.
func (t *retagTable) covering(in *retagInfo) *retagTable {
	if len(t.blobs) == len(in.blobs) {
		all := true
		for _, b := range in.blobs {
			if _, ok := t.blobs[b.plan]; !ok {
				all = false
				break
			}
		}
		if all {
			return t
		}
	}
	nt := &retagTable{rt: t.rt, blobs: make(map[*retagPlan][]byte, len(in.blobs))}
	for _, b := range in.blobs {
		nb, ok := t.blobs[b.plan]
		if !ok {
			nb = b.plan.apply(b.b, *t.rt, nil)
		}
		nt.blobs[b.plan] = nb
	}
	return nt
}

// retagView is a variant's listener set: base's listeners, each made
// with tab's values when asked for.
//
// The variant's set held a resource per listener before (made when the
// variant was, versioned, its bytes made when sent): at M1 with injected
// labels, listeners per address, 950 variants of 2,000 listeners were
// 435 of the 994 MB of heap after the changes, and each service change
// copied every variant's 2,000-entry map.
type retagView struct {
	base *Set
	info *retagInfo
	tab  *retagTable
	// made holds the large listeners made for the view (bigListener),
	// so that the proxies served the view share one, its bytes held
	// weakly (lazyWire), as they shared the base's before.
	mu   sync.Mutex
	made map[string]*Resource
	// shape is the listeners' size and parts, counted on first use
	// (Set.Size, Set.WholeShape).
	shape atomic.Pointer[viewShape]
}

// viewShape is what a view's listeners are on the wire, written whole:
// their bytes, and what Set.WriteAll writes of them in parts shorter
// than small (copied) and as long or longer (shared); and the bytes of
// the names and versions it gives SetWriter.Resource (heads).
type viewShape struct {
	size, small, copied, shared, heads int
}

// bigListener is the size from which a view's listener is one resource
// for all the proxies served the view (retagView.made), made when first
// written and then shared (lazyWire.write): a port listener at M1 is 2
// MB of a thousand chains, whose rewrite in parts for each proxy cost
// more than the copy it saves. With SharedTags (class_shared.go) the
// proxies of a namespace whose tags are all the same, each served its
// class's listeners before, are served a view. A view of one proxy (a
// workload of its own canonical service, with port listeners) makes it
// for that proxy alone; making it on its second write instead measured
// worse with plain labels (BENCHMARKS.md). Smaller listeners, 2,000 per
// variant with listeners per address, are made per send and held by
// nothing.
const bigListener = 32 << 10

// get returns the listener named name with the view's values: base's
// own when it has no service tags, else a resource whose bytes are made
// when sent (lazyResource), made for the call.
func (v *retagView) get(name string) *Resource {
	r := v.base.at(name)
	if r == nil {
		return nil
	}
	plan := v.info.plans[name]
	if plan == nil {
		return r
	}
	if r.Size() < bigListener {
		return v.make(r, plan)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if m := v.made[name]; m != nil {
		return m
	}
	if v.made == nil {
		v.made = map[string]*Resource{}
	}
	m := v.make(r, plan)
	v.made[name] = m
	return m
}

// make is base listener r, of plan, with the view's values.
func (v *retagView) make(r *Resource, plan *retagPlan) *Resource {
	rt := *v.tab.rt
	return lazyResource(r.Name, rt.version(r), &lazyWire{
		size: plan.size(r.Wire().GetValue(), rt, v.tab.of(plan)), base: r, plan: plan, tab: v.tab,
	})
}

// hash is the version of get(name), found without making it.
func (v *retagView) hash(name string) (string, bool) {
	r := v.base.at(name)
	switch {
	case r == nil:
		return "", false
	case v.info.plans[name] == nil:
		return r.Hash, true
	}
	return v.tab.rt.version(r), true
}

// versions are the Versions of s, the view's set: its base's with the
// view's suffix, but for the plain listeners, whose versions are their
// own.
func (v *retagView) versions(s *Set) *Versions {
	return &Versions{names: s.Names, plain: v.info.plain, from: v.base.Versions(), suffix: v.tab.rt.suffix}
}
