package gen

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/model"
)

// ClassConfig is the configuration shared by every proxy of one class for
// one World: outbound clusters, endpoints, listeners and routes.
type ClassConfig struct {
	Class        string
	WorldVersion uint64
	// ID identifies this configuration; Base is the ID of the one it was
	// derived from (0 for none) and Changed lists, per type URL, the names
	// added, changed or removed since Base.
	ID      uint64
	Base    uint64
	Changed map[string][]string
	// Sets holds one Set per type URL.
	Sets map[string]*Set
	// EndpointsOf lists the EDS resource names of each visible service;
	// endpoints holds it, shared by equal classes (class_units.go).
	EndpointsOf map[model.NamespacedName][]string
	endpoints   *endpointsIndex
	scope       *Scope
	// reads are what the configuration was built from (reads.go), own
	// what its resources of no unit were; prov finds the reads of a
	// resource (provenance.go).
	reads, own *Reads
	// at is the World from which the changes are judged when the next
	// generation asks which units and port listeners stand (Reads.stands):
	// the World of the last full generation, or a later one when nothing
	// reused read what changed since (UpdateEndpoints). It reads
	// nothing: changesSince alone looks into it.
	at   *view
	prov *provIndex
	// units are those of the visible services, in their order (by
	// namespace and name: unitOf).
	units []*unit
	ports map[int32]*portUnit
	// raw holds, for the types WasmPlugins or EnvoyFilters patched, the
	// sets as built (wasm_apply.go, envoyfilter.go); nil when none did.
	raw map[string]*Set
	// logs are, per type URL, what its builder put in and took out to
	// build the set as built (baseSet): the next generation replays them
	// (builder.go). Retire lets go of them (class_history.go).
	logs *classLogs
	// wasm holds the listeners with the WasmPlugin filters, before
	// EnvoyFilters, and the plugins' key (wasm_apply.go): the next
	// generation reuses a listener whose built form did not change.
	wasm    *Set
	wasmKey string
	// split holds the port listeners split by address, by name
	// (Options.ListenersPerAddress, listener_address.go).
	split map[string]*addressSplit
	// presplit is set when the port listeners are built split by
	// address: listeners per address, and no WasmPlugin or EnvoyFilter
	// applies to the class, so nothing patches the port listeners whole.
	presplit bool
	// edsRefs and routeRefs are the EDS and RDS names the clusters and
	// listeners reference, as checked by consistentSince: the next
	// generation need not check again when neither they nor the names
	// of its sets changed.
	edsRefs, routeRefs []string
	// ancestors are what the configurations this one descends from
	// changed, oldest first (class_history.go).
	ancestors []ancestor
	// variant is set when the configuration is a variant of another
	// class's (class_variant.go). A variant is never the previous
	// configuration of a generation: its base is.
	variant *variant
	// shared is set when the configuration was generated with
	// placeholders for the service tags (class_shared.go).
	shared bool
	// outTelKey identifies the outbound telemetry of a class that has
	// siblings (class_sibling.go).
	outTelKey string
}

// Reads returns what the configuration was built from.
func (c *ClassConfig) Reads() *Reads { return c.reads }

// Scope returns what the class sees of its World (nil for a nil c).
func (c *ClassConfig) Scope() *Scope {
	if c == nil {
		return nil
	}
	return c.scope
}

// ErrInconsistent is wrapped by errors about resources that reference
// resources the configuration does not contain, or the reverse.
var ErrInconsistent = errors.New("inconsistent configuration")

// Class generates the configuration for the class of p in w (ClassKey).
// prev, the class's
// previous configuration or nil, lets unchanged services reuse their
// resources. Resources that fail validation are logged and left out; if the
// result is not consistent, Class returns prev (the last good
// configuration) and the error.
func (g *Generator) Class(mw *model.World, p *model.Proxy, prev *ClassConfig) (*ClassConfig, error) {
	g.slots <- struct{}{}
	defer func() { <-g.slots }()
	key := ClassKey(mw, p)
	// A class generated with its representative's values stays so while
	// it has a previous configuration (it was, or its placeholders did
	// not hold); one that stops being sharable is generated afresh: no
	// unit or chain of the previous configuration is of its kind.
	shared := g.sharedTags && sharable(key) && (prev == nil || prev.shared)
	if prev != nil && prev.shared && !shared {
		prev = nil
	}
	out, err := g.generate(mw, p, prev, key, shared)
	if err != nil || out == nil || !out.shared {
		return out, err
	}
	var names []string // every listener
	if prev != nil && out.Base == prev.ID {
		if names = out.Changed[ListenerType]; names == nil {
			names = []string{}
		}
	}
	if !sharedHolds(out.Sets[ListenerType], names) {
		g.log.Debug("class generated with its representative's service tags: its listeners carry them where a variant does not rewrite them", "class", key)
		return g.generate(mw, p, nil, key, false)
	}
	return out, nil
}

// generate is Class, with placeholders for the service tags when shared.
func (g *Generator) generate(mw *model.World, p *model.Proxy, prev *ClassConfig, key string, shared bool) (out *ClassConfig, err error) {
	// reads are everything the class read: what its scope read, what its
	// own resources (those of no unit) read, and its units'.
	reads, scopeReads, own, telReads := newReads(), newReads(), newReads(), newReads()
	reads.add(scopeReads)
	reads.add(own)
	scopeReads.add(telReads)
	w := newView(mw, scopeReads)
	defer g.recovered(key, w.Version, prev, &out, &err)
	sc := newScope(w, p, prev.Scope())
	reuse, cs := reuseOf(prev, mw)
	if t := reuse.telemetryFor(p, shared, sc, cs); t != nil {
		sc.tel = t
		scopeReads.add(t.reads)
	} else {
		sc.tel = g.classTelemetry(w.into(telReads), p, shared)
	}
	sc.w = sc.w.into(own)
	// Once generated, the class's scope is read by provenance lookups
	// and the planner: it records nothing more.
	defer func() {
		sc.w = sc.w.into(nil)
		for _, r := range []*Reads{telReads, scopeReads, own, reads} {
			r.seal()
		}
	}()
	cc := &ClassConfig{
		Class: key, WorldVersion: w.Version, at: w.unrecorded(), scope: sc, reads: reads, own: own, prov: &provIndex{}, presplit: g.presplit(w, p),
		shared: shared,
	}
	family := familyOf(key, p, shared)
	if family != "" {
		cc.outTelKey = telemetryKey(sc.tel.of(classOutbound))
	}
	sib, done := g.siblings.take(family, p.Namespace, shared, mw)
	defer done()
	bs, edsRefs, routeRefs := prev.builders(sib)
	g.addUnits(sc, cc, prev, reuse, cs, sib, bs, edsRefs, routeRefs)
	switch {
	case p.IsGRPC():
		// Proxyless gRPC: the per-service API listeners are all it needs.
	case p.Type == model.ProxyRouter:
		routeRefs.add(g.gateway(sc, bs)...)
		g.fixed(sc.w, bs)
	default:
		g.sidecarOutbound(sc, bs, cc, reuse, cs, sib, routeRefs)
		g.fixed(sc.w, bs)
	}
	g.wasmExtensions(sc, bs[ExtensionConfigType])
	out, err = g.publish(cc, bs, prev, edsRefs.list(), routeRefs.list())
	if err == nil {
		// WasmPlugin filters first: EnvoyFilters patch the listeners
		// they are part of, as in istiod.
		g.wasmClass(w, p, out, prev)
		g.patchClass(w, p, out, prev)
		if g.perAddress && p.Type == model.ProxySidecar && !p.IsGRPC() {
			g.splitByAddress(out, prev) // listener_address.go
		}
		g.siblings.generated(family, out)
	}
	return out, err
}

// reuseOf returns what a generation in mw may reuse of prev, the
// class's previous configuration, and the changes since prev's World:
// what changed decides which of its units stand. A MeshConfig change is
// read by nearly every unit and is rare (meshconfig.go): nothing is
// reused then, without asking each. prev is still the last good
// configuration.
func reuseOf(prev *ClassConfig, mw *model.World) (*ClassConfig, *changes) {
	if prev == nil {
		return nil, nil
	}
	cs := changesSince(prev.at, mw)
	if cs.unknown || cs.mesh {
		return nil, cs
	}
	return prev, cs
}

// recovered, deferred by generate, turns a panic of the generation of
// class key in World version v into an error: building protos cannot
// fail for valid input; should it, the last good configuration (prev)
// stays and the server keeps serving.
func (g *Generator) recovered(key string, v uint64, prev *ClassConfig, out **ClassConfig, err *error) {
	r := recover()
	if r == nil {
		return
	}
	g.log.Error("configuration generation failed", "class", key, "world", v, "panic", r)
	*out, *err = prev, fmt.Errorf("class %s: generation failed: %v", key, r)
	if prev != nil {
		// What the failed generation would have read is not known: any
		// change may mend it.
		c := *prev
		c.reads = readsAll
		c.logs = newClassLogs(prev.logs.all()) // prev is retired when c replaces it
		*out = &c
	}
}

// builders makes a builder per type, each following the log of the one
// that built c's set, and lists of EDS and RDS names that follow c's (c
// may be nil: nothing to follow), or sib's when sib, the family's donor,
// is of a later World than c: the namespaces' classes reference the
// same names, and after a service is added each copied its own lists
// from the insertion on (57 MB of what ten services added and removed
// allocated at M1, and 10-13 MB of what the collector found live).
// Following the sibling's, a class keeps its list.
func (c *ClassConfig) builders(sib *sibling) (bs map[string]*builder, edsRefs, routeRefs *followed[string]) {
	bs = make(map[string]*builder, len(TypeURLs))
	edsRefs, routeRefs = &followed[string]{}, &followed[string]{}
	for _, t := range TypeURLs {
		bs[t] = newBuilder(t)
		switch {
		case c != nil:
			bs[t].replaying(c.logs.of(t), c.baseSet(t))
		case sib != nil:
			// A new class has no set to follow; its family's donor's
			// is its likely size.
			bs[t].sizedLike(sib.cc.baseSet(t))
		}
	}
	switch {
	case sib != nil && (c == nil || sib.cc.WorldVersion > c.WorldVersion):
		edsRefs.prev, routeRefs.prev = sib.cc.edsRefs, sib.cc.routeRefs
	case c != nil:
		edsRefs.prev, routeRefs.prev = c.edsRefs, c.routeRefs
	}
	return bs, edsRefs, routeRefs
}

// publish turns the builders into cc's sets and returns cc, or prev (the
// last good configuration) with an error if the result is not consistent.
// Sets, their consistency and the changed names are derived from prev
// where they can be.
func (g *Generator) publish(cc *ClassConfig, bs map[string]*builder, prev *ClassConfig, edsRefs, routeRefs []string) (*ClassConfig, error) {
	var errs []error
	cc.Sets = map[string]*Set{}
	ops := make(map[string]*buildLog, len(bs))
	cc.logs = newClassLogs(ops)
	// changed holds, per type, the names setFrom found changed against
	// the previous set when it could tell (same names, some contents).
	changed := map[string][]string{}
	for t, b := range bs {
		errs = append(errs, b.errs...)
		var prevSet *Set
		if prev != nil {
			prevSet = prev.baseSet(t)
		}
		set, c, known := b.setFrom(prevSet)
		cc.Sets[t] = setsPool.of(set)
		// A copy (pooled): a pointer into the builder would keep it, and
		// through its replay every previous generation's builder, alive.
		ops[t] = b.pooledLog()
		if known {
			changed[t] = c
		}
	}
	for _, err := range errs {
		g.report(cc.scope, cc.Class, err)
	}
	if err := consistentSince(prev, cc.Sets, edsRefs, routeRefs); err != nil {
		g.log.Error("configuration not published", "class", cc.Class, "world", cc.WorldVersion, "error", err)
		return prev, fmt.Errorf("class %s: %w", cc.Class, err)
	}
	cc.edsRefs, cc.routeRefs = edsRefs, routeRefs
	cc.ID = g.ids.Add(1)
	if prev != nil {
		cc.derive(prev)
		cc.Changed = map[string][]string{}
		for t, set := range cc.Sets {
			c, known := changed[t]
			// Against the set prev published, which is the one setFrom
			// compared with unless WasmPlugins or EnvoyFilters patched it.
			if !known || prev.Sets[t] != prev.baseSet(t) {
				c = diffNames(prev.Sets[t], set)
			}
			if len(c) > 0 {
				cc.Changed[t] = c
			}
		}
	}
	return cc, nil
}

// diffNames lists the names added, changed or removed from a to b.
func diffNames(a, b *Set) []string {
	if a.Version == b.Version {
		return nil
	}
	var out []string
	for _, n := range b.Names {
		h, _ := b.Hash(n)
		if old, ok := a.Hash(n); !ok || old != h {
			out = append(out, n)
		}
	}
	for _, n := range a.Names {
		if b.Get(n) == nil {
			out = append(out, n)
		}
	}
	return out
}

func (g *Generator) fixed(w *view, bs map[string]*builder) {
	for _, c := range fixedClusters(connectTimeout(w)) {
		bs[ClusterType].add(c.Name, c)
	}
}

// addTo builds a resource of sc's class into dst (contain.go: a resource
// that breaks Envoy's rules is replaced by its stand-in or left out).
func (g *Generator) addTo(sc *Scope, dst *[]*Resource, name, typeURL string, m proto.Message) {
	r, err := buildResource(name, typeURL, m)
	if err != nil {
		g.report(sc, ClassKey(sc.w.w, sc.Proxy), err)
	}
	if r != nil {
		*dst = append(*dst, r)
	}
}

// report logs a resource generation could not build as it was: a
// refusal (contain.go) with the configs it came from, anything else as
// left out.
func (g *Generator) report(sc *Scope, where string, err error) {
	var re *RefusedError
	if errors.As(err, &re) {
		var from []ConfigRef
		if sc != nil {
			from = sc.sources(re.TypeURL, re.Name)
		}
		g.refusals.note(g, where, from, re)
		return
	}
	g.log.Error("generated resource left out", "class", where, "error", err)
}

// consistentSince is consistent for a configuration derived from prev: a
// check whose sets are all prev's own holds as it held for prev (the
// references come from those same resources). A VirtualService edit
// changes routes only, so only routes are checked.
func consistentSince(prev *ClassConfig, sets map[string]*Set, edsRefs, routeRefs []string) error {
	if prev == nil {
		return consistent(sets, edsRefs, routeRefs)
	}
	same := func(ts ...string) bool {
		for _, t := range ts {
			if sets[t] != prev.baseSet(t) {
				return false
			}
		}
		return true
	}
	var errs []error
	if !same(ClusterType, EndpointType) && !(sameNames(sets[EndpointType], prev.baseSet(EndpointType)) && slices.Equal(edsRefs, prev.edsRefs)) {
		errs = append(errs, check(sets, EndpointType, edsRefs))
	}
	if !same(ListenerType, RouteType) && !(sameNames(sets[RouteType], prev.baseSet(RouteType)) && slices.Equal(routeRefs, prev.routeRefs)) {
		errs = append(errs, check(sets, RouteType, routeRefs))
	}
	return errors.Join(errs...)
}

// sameNames reports whether a and b hold the same names because they
// share their sorted list (setFrom when only contents changed): a
// consistency that depends on names alone still holds.
func sameNames(a, b *Set) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Names) != len(b.Names) {
		return false
	}
	return len(a.Names) == 0 || &a.Names[0] == &b.Names[0]
}

// consistent checks that the EDS and RDS resources are exactly those the
// clusters and listeners reference (go-control-plane's Snapshot.Consistent
// rule, extended to API listeners).
func consistent(sets map[string]*Set, edsRefs, routeRefs []string) error {
	return errors.Join(check(sets, EndpointType, edsRefs), check(sets, RouteType, routeRefs))
}

// check is consistent for one type: its resources are exactly refs. The
// set's names are sorted, so a bit per name marks those referenced: a map
// of the references, per type and class, was 100 MB of what M1's 40
// changes allocated, and, allocated while the collector marks, counted
// as live.
func check(sets map[string]*Set, typeURL string, refs []string) error {
	set := sets[typeURL]
	seen := make([]uint64, (set.Len()+63)/64)
	named, unknown := 0, false
	for _, r := range refs {
		i, ok := set.find(r)
		if !ok {
			unknown = true
			continue
		}
		if bit := uint64(1) << (i % 64); seen[i/64]&bit == 0 {
			seen[i/64] |= bit
			named++
		}
	}
	if !unknown && named == set.Len() {
		return nil
	}
	var missing, unused []string
	for _, r := range refs {
		if _, ok := set.find(r); !ok {
			missing = append(missing, r)
		}
	}
	for i, n := range set.Names {
		if seen[i/64]&(uint64(1)<<(i%64)) == 0 {
			unused = append(unused, n)
		}
	}
	sort.Strings(missing)
	missing = slices.Compact(missing)
	return fmt.Errorf("%w: %s referenced but missing [%s], present but unreferenced [%s]",
		ErrInconsistent, ShortType(typeURL), strings.Join(missing, " "), strings.Join(unused, " "))
}
