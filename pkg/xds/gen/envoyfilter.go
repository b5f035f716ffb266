package gen

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/envoyfilter"
)

// EnvoyFilters (xds/envoyfilter has the patch model) apply to copies of
// what generation built, at the end: a class's clusters, listeners and
// routes when its configuration is published (Class), a sidecar's own
// inbound resources when they are built (Proxy). Which EnvoyFilters apply
// to a proxy, and which of their patches match its version and metadata,
// is part of its class key (|ef=), so only the proxies they select get
// other resources; a proxy no EnvoyFilter selects gets exactly what it got
// without them (the same *Resource values). The class keeps what it built
// unpatched (ClassConfig.raw) for the next generation to reuse and
// compare with.
//
// Where discovery differs from istiod:
//   - proxyless gRPC proxies get no patches (istiod's gRPC generator does
//     not apply EnvoyFilters either);
//   - a patched resource that breaks Envoy's rules (ValidateAll) is not
//     sent: the last good patched form stays while generation builds the
//     same resource (envoyfilter_lastgood.go), else it is sent unpatched;
//     the filters that changed it are logged, counted
//     (discovery_envoyfilter_patches_refused_total) and reported on their
//     status; istiod sends it and the proxy NACKs the whole response;
//   - a resource a patch adds under a name the proxy already has is not
//     added (istiod sends both, which Envoy refuses);
//   - after patching, the references between types are not checked again
//     (as in istiod): a removed cluster's endpoints are still offered.

// efIndex holds the compiled EnvoyFilters of one World by namespace.
type efIndex struct {
	byNS map[string][]*envoyfilter.Filter
	// cfg is each filter's config; compiled maps configs to filters, for
	// the next World's index to reuse.
	cfg      map[*envoyfilter.Filter]*model.Config
	compiled map[*model.Config]*envoyfilter.Filter
}

func newEFIndex(w *view, prev *efIndex) *efIndex {
	ix := &efIndex{byNS: map[string][]*envoyfilter.Filter{}, cfg: map[*envoyfilter.Filter]*model.Config{}, compiled: map[*model.Config]*envoyfilter.Filter{}}
	for _, c := range w.Configs(model.KindEnvoyFilter) {
		o, ok := c.Object.(*networkingv1alpha3.EnvoyFilter)
		if !ok {
			continue
		}
		var f *envoyfilter.Filter
		if prev != nil {
			f = prev.compiled[c]
		}
		if f == nil {
			f = envoyfilter.Compile(c.Key.Namespace, c.Key.Name, o.ResourceVersion, o.CreationTimestamp.Time, &o.Spec)
			f.Generation = o.Generation
		}
		ix.compiled[c], ix.cfg[f] = f, c
		ix.byNS[c.Key.Namespace] = append(ix.byNS[c.Key.Namespace], f)
	}
	return ix
}

// envoyFiltersFor returns the EnvoyFilters that select p, in the order
// their patches apply (envoyfilter.Order); none for proxyless gRPC.
func (ix *worldIndex) envoyFiltersFor(p *model.Proxy) []*envoyfilter.Filter {
	if ix.efs == nil || len(ix.efs.byNS) == 0 || p.IsGRPC() {
		return nil
	}
	w := efWorkload(p)
	cands := ix.efs.byNS[ix.root]
	if p.Namespace != ix.root {
		cands = append(slices.Clip(cands), ix.efs.byNS[p.Namespace]...)
	}
	var out []*envoyfilter.Filter
	for _, f := range cands {
		if envoyfilter.Selects(f, w) {
			out = append(out, f)
		}
	}
	envoyfilter.Order(out, ix.root)
	return out
}

func efWorkload(p *model.Proxy) envoyfilter.Workload {
	return envoyfilter.Workload{Namespace: p.Namespace, Labels: p.Labels(), Version: p.Metadata.IstioVersion, Metadata: p.Metadata.Raw}
}

// envoyFilterKey names, for ClassKey, the EnvoyFilters that apply to p
// (namespace/name@resourceVersion, in order) and which of their patches
// that read the proxy's version or metadata match it; "" for none.
func (ix *worldIndex) envoyFilterKey(p *model.Proxy) string {
	fs := ix.envoyFiltersFor(p)
	if len(fs) == 0 {
		return ""
	}
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f.Key() + "@" + f.ResourceVersion)
	}
	if d := envoyfilter.ProxyDigest(fs, efWorkload(p)); d != "" {
		b.WriteString("#" + d)
	}
	return b.String()
}

// envoyFilterPatches are the patches that apply to p in w, nil for none;
// the filters' problems (patches not applied) are warned of once per
// version.
func (g *Generator) envoyFilterPatches(w *view, p *model.Proxy) envoyfilter.Patches {
	ix := w.index()
	fs := w.envoyFiltersFor(p)
	if len(fs) == 0 {
		return nil
	}
	for _, f := range fs {
		if len(f.Problems) > 0 {
			g.warnOnce(ix.efs.cfg[f], f.ResourceVersion, "envoyfilter", "EnvoyFilter patches not applied", "problems", f.Problems)
		}
	}
	ps := envoyfilter.For(fs, efWorkload(p))
	if len(ps) == 0 {
		return nil
	}
	return ps
}

var (
	listenerPatchKinds = []networking.EnvoyFilter_ApplyTo{
		networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_LISTENER_FILTER, networking.EnvoyFilter_FILTER_CHAIN,
		networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER,
	}
	routePatchKinds = []networking.EnvoyFilter_ApplyTo{
		networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE,
	}
)

// patchClass applies the EnvoyFilters of p's class to cc's sets (copies:
// cc.raw keeps what was built) and names what changed since prev.
func (g *Generator) patchClass(w *view, p *model.Proxy, cc, prev *ClassConfig) {
	ps := g.envoyFilterPatches(w, p)
	if ps == nil {
		return
	}
	defer func() {
		// A patch cannot panic for the types applyTo decodes; should it,
		// the class is served as built.
		if r := recover(); r != nil {
			g.log.Error("EnvoyFilter patches failed; the class is served unpatched", "class", cc.Class, "panic", r)
		}
	}()
	ctx := networking.EnvoyFilter_SIDECAR_OUTBOUND
	if p.Type == model.ProxyRouter {
		ctx = networking.EnvoyFilter_GATEWAY
	}
	run := &efRun{g: g, where: cc.Class, ps: ps}
	sets := maps.Clone(cc.Sets)
	if ps.Has(listenerPatchKinds...) {
		sets[ListenerType] = run.listeners(sets[ListenerType], func(string) networking.EnvoyFilter_PatchContext { return ctx }, nil)
	}
	if ps.Has(networking.EnvoyFilter_CLUSTER) {
		sets[ClusterType] = run.clusters(sets[ClusterType], func(name string) networking.EnvoyFilter_PatchContext {
			if ctx == networking.EnvoyFilter_SIDECAR_OUTBOUND && (strings.HasPrefix(name, "inbound|") || name == InboundPassthroughCluster) {
				return networking.EnvoyFilter_SIDECAR_INBOUND
			}
			return ctx
		}, nil, ctx, nil)
	}
	if ps.Has(routePatchKinds...) {
		sets[RouteType] = run.routes(sets[RouteType], ctx)
	}
	raw := map[string]*Set{}
	for t, s := range sets {
		if s != cc.Sets[t] {
			raw[t] = cc.baseSet(t) // as built, before WasmPlugin filters too
		}
	}
	if len(raw) == 0 {
		return
	}
	for t, s := range cc.raw {
		if raw[t] == nil {
			raw[t] = s
		}
	}
	cc.raw, cc.Sets = raw, sets
	if prev != nil {
		cc.Changed = map[string][]string{}
		for t, set := range cc.Sets {
			if c := diffNames(prev.Sets[t], set); len(c) > 0 {
				cc.Changed[t] = c
			}
		}
	}
}

// baseSet is the set of typeURL as generation built it, before
// EnvoyFilters: what the next generation reuses and compares with.
func (c *ClassConfig) baseSet(typeURL string) *Set {
	if s, ok := c.raw[typeURL]; ok {
		return s
	}
	return c.Sets[typeURL]
}

// patchOwn applies the SIDECAR_INBOUND patches of p's EnvoyFilters to
// its own resources (virtualInbound, with its inline route
// configurations, and the inbound clusters) and adds the listeners and
// clusters they add for SIDECAR_INBOUND.
func (g *Generator) patchOwn(w *view, p *model.Proxy, pc *ProxyConfig) {
	ps := g.envoyFilterPatches(w, p)
	if ps == nil {
		return
	}
	const ctx = networking.EnvoyFilter_SIDECAR_INBOUND
	own := maps.Clone(pc.Own)
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("EnvoyFilter patches failed; the proxy's own resources are served unpatched", "proxy", p.ID, "panic", r)
			pc.Own = own
		}
	}()
	run := &efRun{g: g, where: p.ID, ps: ps}
	taken := func(t string) func(string) bool {
		return func(name string) bool { return pc.Class.Sets[t].Get(name) != nil }
	}
	pc.Own[ListenerType] = run.listeners(pc.Own[ListenerType], func(string) networking.EnvoyFilter_PatchContext { return ctx }, taken(ListenerType))
	hosts := map[string][]string{}
	for port, svcs := range inboundServices(w, p) {
		for _, svc := range svcs {
			hosts[InboundClusterName(port)] = append(hosts[InboundClusterName(port)], svc.Hostname)
		}
	}
	pc.Own[ClusterType] = run.clusters(pc.Own[ClusterType], func(string) networking.EnvoyFilter_PatchContext { return ctx }, hosts, ctx, taken(ClusterType))
}

// efRun applies one proxy's (or class's) patches to sets.
type efRun struct {
	g     *Generator
	where string
	ps    envoyfilter.Patches
}

// patchSet returns s with the resources want selects decoded into
// newMsg, patched by patch (false: removed) and built again, plus added.
// A resource no patch changed stays as it was; one whose patched form
// breaks Envoy's rules too (refused). An added resource whose name taken
// reports is not added. s itself is returned when nothing changed.
func (r *efRun) patchSet(typeURL string, s *Set, want func(string) bool, newMsg func() proto.Message,
	patch func(name string, m proto.Message, applied envoyfilter.Applied) bool,
	added []proto.Message, addedBy envoyfilter.Applied, taken func(string) bool,
) *Set {
	var out map[string]*Resource
	edit := func() {
		if out == nil {
			out = make(map[string]*Resource, s.Len()+len(added))
			if s != nil {
				for i, n := range s.Names {
					out[n] = s.rs[i]
				}
			}
		}
	}
	for _, name := range namesOf(s) {
		if !want(name) {
			continue
		}
		m := newMsg()
		if err := proto.Unmarshal(s.at(name).Wire().GetValue(), m); err != nil {
			continue
		}
		applied := envoyfilter.Applied{}
		keep := patch(name, m, applied)
		switch {
		case len(applied) == 0:
		case !keep:
			edit()
			delete(out, name)
		default:
			base := s.at(name).Hash
			key := lastGoodKey(typeURL, r.where, name, applied)
			res, err := NewResource(name, typeURL, m)
			if err != nil {
				r.g.efRefused(r.where, typeURL, name, applied, err)
				if good := r.g.efLastGood.get(key, base); good != nil {
					edit()
					out[name] = good
				}
				continue
			}
			r.g.efLastGood.put(key, base, res)
			if res.Hash != base {
				edit()
				out[name] = res
			}
		}
	}
	for _, m := range added {
		name := resourceName(m)
		exists := s.Get(name) != nil
		if out != nil {
			_, exists = out[name]
		}
		if exists || (taken != nil && taken(name)) {
			r.g.efRefused(r.where, typeURL, name, addedBy, fmt.Errorf("a %s named %q exists already; not added", ShortType(typeURL), name))
			continue
		}
		res, err := NewResource(name, typeURL, m)
		if err != nil {
			r.g.efRefused(r.where, typeURL, name, addedBy, err)
			continue
		}
		edit()
		out[name] = res
	}
	if out == nil {
		return s
	}
	return NewSet(typeURL, out)
}

func namesOf(s *Set) []string {
	if s == nil {
		return nil
	}
	return s.Names
}

// resourceName is the name field of a listener, cluster or route
// configuration.
func resourceName(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok {
		return n.GetName()
	}
	return ""
}

// efRefused logs and counts a patched or added resource left as it was
// built (or out), naming the EnvoyFilters whose patches made it.
func (g *Generator) efRefused(where, typeURL, name string, by envoyfilter.Applied, err error) {
	filters := make([]*envoyfilter.Filter, 0, len(by))
	for f := range by {
		filters = append(filters, f)
	}
	sort.Slice(filters, func(i, j int) bool {
		return filters[i].Key()+"@"+filters[i].ResourceVersion < filters[j].Key()+"@"+filters[j].ResourceVersion
	})
	g.efRefusals.note(g, where, ShortType(typeURL), name, filters, err)
}

// envoyFilterFields: generation acts on every field of an EnvoyFilter;
// the patches it does not apply are values (envoyFilterUnsupportedValues).
var envoyFilterFields = newFieldSet("workloadSelector", "targetRefs", "configPatches", "priority")

// envoyFilterUnsupportedValues names the patches discovery does not
// apply: applyTo EXTENSION_CONFIG and BOOTSTRAP, context WAYPOINT.
func envoyFilterUnsupportedValues(spec proto.Message) []string {
	ef, ok := spec.(*networking.EnvoyFilter)
	if !ok {
		return nil
	}
	var out []string
	for i, cp := range ef.GetConfigPatches() {
		switch cp.GetApplyTo() {
		case networking.EnvoyFilter_EXTENSION_CONFIG, networking.EnvoyFilter_BOOTSTRAP:
			out = append(out, "configPatches["+itoa(int32(i))+"].applyTo")
		}
		if cp.GetMatch().GetContext() == networking.EnvoyFilter_WAYPOINT {
			out = append(out, "configPatches["+itoa(int32(i))+"].match.context")
		}
	}
	return out
}

// envoyFilterRefusals are the patches whose value, a whole Envoy object
// (ADD, REPLACE, INSERT_*), breaks Envoy's rules on its own: every
// resource it would go into would be refused (EnvoyRefusals).
func envoyFilterRefusals(ef *networking.EnvoyFilter) []string {
	var out []string
	for i, cp := range ef.GetConfigPatches() {
		switch cp.GetPatch().GetOperation() {
		case networking.EnvoyFilter_Patch_ADD, networking.EnvoyFilter_Patch_REPLACE, networking.EnvoyFilter_Patch_INSERT_BEFORE,
			networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_INSERT_FIRST:
		default:
			continue
		}
		if unsupportedApplyTo(cp.GetApplyTo()) || cp.GetPatch().GetValue() == nil {
			continue
		}
		m, err := envoyfilter.DecodePatch(cp.GetApplyTo(), cp.GetPatch().GetValue(), false)
		if err != nil {
			continue // the webhook's decoding refuses it
		}
		if v, ok := m.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				out = append(out, fmt.Sprintf("spec.configPatches[%d].patch.value: %v", i, err))
			}
		}
	}
	return out
}

func unsupportedApplyTo(a networking.EnvoyFilter_ApplyTo) bool {
	return a == networking.EnvoyFilter_EXTENSION_CONFIG || a == networking.EnvoyFilter_BOOTSTRAP || a == networking.EnvoyFilter_INVALID
}

// envoyFilterSelects reports whether the EnvoyFilter c of w applies to p
// (envoyFiltersFor's rule, for one filter).
func envoyFilterSelects(w *view, c *model.Config, p *model.Proxy) bool {
	if p.IsGRPC() {
		return false
	}
	ix := w.index()
	f := ix.efs.compiled[c]
	if f == nil || (c.Key.Namespace != p.Namespace && c.Key.Namespace != ix.root) {
		return false
	}
	return envoyfilter.Selects(f, efWorkload(p))
}

// envoyFilterSources are the EnvoyFilters applying to sc's proxy whose
// patches may have changed the resource typeURL/name (for provenance: a
// NACK of a patched resource is reported on them too). Like the rest of
// provenance it follows from the name: a listener patch that names no
// listener, or this one, counts.
func (sc *Scope) envoyFilterSources(typeURL, name string) []*model.Config {
	ix := sc.w.index()
	fs := ix.envoyFiltersFor(sc.Proxy)
	if len(fs) == 0 {
		return nil
	}
	ctx := networking.EnvoyFilter_SIDECAR_OUTBOUND
	switch {
	case sc.Proxy.Type == model.ProxyRouter:
		ctx = networking.EnvoyFilter_GATEWAY
	case strings.HasPrefix(name, "inbound|") || name == InboundPassthroughCluster || name == VirtualInbound:
		ctx = networking.EnvoyFilter_SIDECAR_INBOUND
	}
	var out []*model.Config
	for _, f := range fs {
		ps := envoyfilter.For([]*envoyfilter.Filter{f}, efWorkload(sc.Proxy))
		if efMayChange(ps, ctx, typeURL, name) {
			out = append(out, ix.efs.cfg[f])
		}
	}
	return out
}

func efMayChange(ps envoyfilter.Patches, ctx networking.EnvoyFilter_PatchContext, typeURL, name string) bool {
	switch typeURL {
	case ClusterType:
		return envoyfilter.ClusterMatches(ctx, ps, name, nil)
	case RouteType:
		return envoyfilter.RouteMatches(ctx, ps, name)
	case ListenerType:
		for _, k := range listenerPatchKinds {
			for _, p := range ps[k] {
				if c := p.Match.GetContext(); c != ctx && c != networking.EnvoyFilter_ANY {
					continue
				}
				if n := p.Match.GetListener().GetName(); n == "" || n == name {
					return true
				}
			}
		}
	}
	return false
}
