package gen

import (
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// ClassKey names the class configuration p gets from w: proxies with equal
// keys get identical class configuration, so it is generated once per key.
// It is p.Class() (type, generator, namespace, version; labels for
// gateways) followed, only when they exist, by the choices that depend on
// the workload's labels:
//
//	|sidecar=NAME  the Sidecar of p's namespace whose workloadSelector
//	               selects p (a namespace-wide or root Sidecar is implied
//	               by the namespace)
//	|src=DIGEST    which sourceLabels matches of the VirtualServices visible
//	               to p's namespace select p (a digest of their
//	               VirtualService, route and match indexes); absent when
//	               none does
//	|dr=A,B        the DestinationRules of p's namespace whose
//	               workloadSelector selects p, oldest first (cluster_drselect.go)
//	|tel=A,B       the Telemetry resources of p's namespace whose selector
//	               or targetRefs select p, by name (telemetry_class.go)
//	|trace=...     when tracing may apply (telemetry_tracing.go): what the
//	               connection managers' tracing reads of p (its node
//	               cluster and PROXY_CONFIG tracing, and for gateways and
//	               proxyless gRPC what |tags= holds for sidecars), when p
//	               has some
//	|ef=A@V,B@W#D  the EnvoyFilters that apply to p (its namespace's and
//	               the root namespace's that select it), in the order
//	               they apply, with their resource versions, and after
//	               # which of their patches that match on the proxy's
//	               version or metadata match p (envoyfilter.go);
//	               gateways too
//	|wasm=A@V,B@W  the WasmPlugins that apply to p (its namespace's, then
//	               the root namespace's, that select it), with their
//	               resource versions (wasm.go); gateways too
//	|lb=...        when a locality load balancing setting that may apply
//	               to p's namespace reads something of p (endpoint_locality.go):
//	               its locality (failover), the from it matches of each
//	               distribute list, its failoverPriority label values;
//	               gateways too
//	|tags=N,R,M,C  last, when tracing may apply to a sidecar: the
//	               canonical service and revision, mesh and cluster its
//	               connection managers' service tags name. The key
//	               without it is the base class (VariantOf), of which this
//	               class is a variant (class_variant.go)
//
// Without such configuration the key is p.Class(). Gateways' classes
// already carry their labels (DestinationRule selectors, which do apply to
// gateways, need nothing more), and Sidecars never apply to them. ClassKey
// is cheap: what it needs of w is indexed once per World (and namespace).
func ClassKey(w *model.World, p *model.Proxy) (key string) {
	key = p.Class()
	ix := indexFor(w)
	var tags string
	if ix.tracing {
		var rest string
		tags, rest = traceIdentity(p, ix.traceNodeCluster)
		if tags != "" && (!variantsApply(p) || strings.Contains(tags, "|")) {
			// Not a variant (a value with the separator would not
			// split back): the tags are the class's.
			rest = tags + ";" + rest
			tags = ""
		}
		if rest != "" {
			key += "|trace=" + rest
		}
	}
	if tags != "" {
		// Last, so that the key without it is the base's (VariantOf).
		defer func() { key += variantSep + tags }()
	}
	if d := ix.lb.forNamespace(p.Namespace); !d.empty() {
		t := topologyOf(newView(w, nil), p) // ClassKey is recomputed for every change: unrecorded
		key += "|lb=" + d.view(&t)
	}
	if ef := ix.envoyFilterKey(p); ef != "" {
		key += "|ef=" + ef
	}
	if wk := ix.wasmKey(p); wk != "" {
		key += "|wasm=" + wk
	}
	if p.Type == model.ProxyRouter {
		return key
	}
	if c, _ := ix.choose(p); c != nil && hasWorkloadSelector(c) {
		key += "|sidecar=" + c.Key.Name
	}
	if d := ix.sourceDigest(p); d != "" {
		key += "|src=" + d
	}
	if r := ix.rules.selected(p); r != "" {
		key += "|dr=" + r
	}
	if t := ix.telemetrySelecting(p); t != "" {
		key += "|tel=" + t
	}
	return key
}

// worldIndex is what the workload-dependent choices need of one World,
// built once per World: the Sidecars per namespace, the sourceLabels
// matches of the VirtualServices that apply to sidecars and the
// DestinationRules.
type worldIndex struct {
	version uint64
	// root is the mesh's root namespace, vsExportTo its default exportTo
	// of VirtualServices.
	root       string
	vsExportTo []string
	rules      *ruleIndex
	// lb is what locality load balancing reads of proxies (endpoint_locality.go).
	lb *lbIndex
	// pa is what clients read of PeerAuthentication (endpoint_mtls.go).
	pa *paIndex
	// efs are the World's EnvoyFilters, compiled (envoyfilter.go).
	efs *efIndex
	// wasm are the World's WasmPlugins, compiled (wasm.go).
	wasm *wasmIndex
	// telemetry holds, per namespace, the Telemetry resources that
	// select workloads, by name (telemetry_class.go).
	telemetry map[string][]*model.Config
	// tracing is set when some proxy may trace (tracingMayApply);
	// traceNodeCluster when some provider reads the node cluster
	// (tracingReadsNodeCluster).
	tracing, traceNodeCluster bool
	// selected holds, per namespace, the Sidecars with a workloadSelector,
	// defaults those without; both oldest first, as Istio orders them.
	selected, defaults map[string][]*model.Config
	// open are the selectors of the VirtualServices exported everywhere;
	// restricted are the VirtualServices exported to some namespaces only.
	open       *nsSources
	restricted []vsSources
	// byNS caches, per proxy namespace that some restricted VirtualService
	// is exported to, its selectors (*nsSources).
	byNS sync.Map
	// parsed are the matches of every VirtualService, for the next World's
	// index.
	parsed map[*model.Config]vsSources
	// extAuthz is the World's resolved ext_authz providers
	// (resolvedExtAuthz), built on first use.
	extAuthz extAuthzCache
}

// vsSources are the sourceLabels matches of one VirtualService.
type vsSources struct {
	cfg  *model.Config
	uses []sourceUse
}

// sourceUse is one match with sourceLabels: its selector (and canonical
// form) and a hash of where it is (VirtualService key, route and match
// index), which keeps keys stable when unrelated configuration changes.
type sourceUse struct {
	labels   map[string]string
	selector string
	where    uint64
}

// nsSources are the distinct selectors one namespace's proxies are tested
// against, each filed under one of its labels (its anchor) so that a proxy
// is tested only against selectors that share a label with it.
type nsSources struct {
	groups []sourceGroup
	// byAnchor maps a label (key, value) to the groups anchored on it.
	byAnchor map[[2]string][]int
}

// sourceGroup is one distinct selector; id combines the where of every
// match that uses it.
type sourceGroup struct {
	labels map[string]string
	id     uint64
}

// maxIndexes bounds the Worlds whose index is kept: a push works on the
// latest World, a few older ones may still be in flight.
const maxIndexes = 4

// indexes caches the index of recent Worlds. Worlds are immutable, so an
// index never goes stale; the weak key lets a World be collected.
var indexes struct {
	sync.Mutex
	m map[weak.Pointer[model.World]]*worldIndex
}

// lastIndex is the index used last: with many proxies pushed for one
// World, nearly every lookup ends here without taking the lock.
var lastIndex atomic.Pointer[keyedIndex]

type keyedIndex struct {
	key weak.Pointer[model.World]
	ix  *worldIndex
}

// indexFor returns w's index, building it on first use.
func indexFor(w *model.World) *worldIndex {
	k := weak.Make(w)
	if last := lastIndex.Load(); last != nil && last.key == k {
		return last.ix
	}
	indexes.Lock()
	ix := indexes.m[k]
	indexes.Unlock()
	if ix == nil {
		var prev *worldIndex
		if last := lastIndex.Load(); last != nil {
			prev = last.ix
		}
		ix = storeIndex(k, newWorldIndex(w, prev))
	}
	lastIndex.Store(&keyedIndex{key: k, ix: ix})
	return ix
}

// storeIndex caches ix for k, or returns the index another caller stored
// meanwhile.
func storeIndex(k weak.Pointer[model.World], ix *worldIndex) *worldIndex {
	indexes.Lock()
	defer indexes.Unlock()
	if prev := indexes.m[k]; prev != nil {
		return prev
	}
	if indexes.m == nil {
		indexes.m = map[weak.Pointer[model.World]]*worldIndex{}
	}
	evictIndexes()
	indexes.m[k] = ix
	return ix
}

// evictIndexes drops the indexes of collected Worlds and, beyond
// maxIndexes-1, of the oldest ones. The caller holds the lock.
func evictIndexes() {
	for k := range indexes.m {
		if k.Value() == nil {
			delete(indexes.m, k)
		}
	}
	for len(indexes.m) >= maxIndexes {
		var oldest weak.Pointer[model.World]
		first := true
		for k, ix := range indexes.m {
			if first || ix.version < indexes.m[oldest].version {
				oldest, first = k, false
			}
		}
		delete(indexes.m, oldest)
	}
}

// newWorldIndex indexes w; the matches of VirtualServices that prev (an
// earlier World's index, or nil) saw already are reused: the World
// replaces a config object when it changes.
func newWorldIndex(mw *model.World, prev *worldIndex) *worldIndex {
	// The index is a memo of the whole World, read unrecorded: what a
	// lookup in it reads is recorded by the view method making the lookup.
	w := newView(mw, nil)
	ix := &worldIndex{
		version: w.Version, root: rootNamespace(w), vsExportTo: w.Mesh().VirtualServiceExportTo(), selected: map[string][]*model.Config{}, defaults: map[string][]*model.Config{},
		rules: newRuleIndex(w), lb: newLBIndex(w), pa: newPAIndex(w), telemetry: selectingTelemetries(w), tracing: tracingMayApply(w),
		traceNodeCluster: tracingReadsNodeCluster(w),
	}
	var prevEFs *efIndex
	if prev != nil {
		prevEFs = prev.efs
	}
	ix.efs = newEFIndex(w, prevEFs)
	var prevWasm *wasmIndex
	if prev != nil {
		prevWasm = prev.wasm
	}
	ix.wasm = newWasmIndex(w, prevWasm)
	for _, c := range w.Configs(model.KindSidecar) {
		if _, ok := c.Object.(*networkingv1.Sidecar); !ok {
			continue
		}
		if hasWorkloadSelector(c) {
			ix.selected[c.Key.Namespace] = append(ix.selected[c.Key.Namespace], c)
		} else {
			ix.defaults[c.Key.Namespace] = append(ix.defaults[c.Key.Namespace], c)
		}
	}
	for _, m := range []map[string][]*model.Config{ix.selected, ix.defaults} {
		for _, cs := range m {
			oldestSidecars(cs)
		}
	}
	var open []vsSources
	vss := w.Configs(model.KindVirtualService)
	ix.parsed = make(map[*model.Config]vsSources, len(vss))
	for _, c := range vss {
		s, ok := vsSources{}, false
		if prev != nil {
			s, ok = prev.parsed[c]
		}
		if !ok {
			s = vsSourceUses(c)
		}
		ix.parsed[c] = s
		switch {
		case len(s.uses) == 0:
		case exportedEverywhere(vsExportTo(w, &c.Object.(*networkingv1.VirtualService).Spec)),
			len(c.Object.(*networkingv1.VirtualService).Spec.GetHosts()) == 0:
			// A delegate's matches apply wherever a root naming it is seen,
			// which its own exportTo does not tell: count it everywhere (a
			// key that distinguishes more than needed is still right).
			open = append(open, s)
		default:
			ix.restricted = append(ix.restricted, s)
		}
	}
	ix.open = groupSources(open)
	return ix
}

func exportedEverywhere(exportTo []string) bool {
	return len(exportTo) == 0 || containsString(exportTo, "*")
}

func hasWorkloadSelector(c *model.Config) bool {
	sc, ok := c.Object.(*networkingv1.Sidecar)
	return ok && sc.Spec.GetWorkloadSelector() != nil
}

// oldestSidecars orders Sidecars as Istio resolves conflicts: the oldest
// first, then by name.
func oldestSidecars(cs []*model.Config) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i].Object.(*networkingv1.Sidecar), cs[j].Object.(*networkingv1.Sidecar)
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return cs[i].Key.Name < cs[j].Key.Name
	})
}

// choose picks the Sidecar that applies to p as Istio does: one of p's
// namespace whose workloadSelector matches p's labels, else the namespace's
// Sidecar without selector, else the root namespace's; the oldest when
// several qualify at one level (the others are returned to be reported).
// Gateways get none.
func (ix *worldIndex) choose(p *model.Proxy) (*model.Config, []*model.Config) {
	if p.Type == model.ProxyRouter {
		return nil, nil
	}
	var match []*model.Config
	for _, c := range ix.selected[p.Namespace] {
		sel := c.Object.(*networkingv1.Sidecar).Spec.GetWorkloadSelector().GetLabels()
		if labelsMatch(sel, p.Labels()) {
			match = append(match, c)
		}
	}
	for _, level := range [][]*model.Config{match, ix.defaults[p.Namespace], ix.defaults[ix.root]} {
		if len(level) > 0 {
			return level[0], level[1:]
		}
	}
	return nil, nil
}

// vsSourceUses lists the sourceLabels matches of a VirtualService that
// apply to sidecars (no gateways, or "mesh" among them, at the
// VirtualService and at the match).
func vsSourceUses(c *model.Config) vsSources {
	vs, ok := c.Object.(*networkingv1.VirtualService)
	if !ok || !appliesTo(c, "mesh") {
		return vsSources{cfg: c}
	}
	out := vsSources{cfg: c}
	name := c.Key.Namespace + "/" + c.Key.Name
	add := func(kind string, i, j int, labels map[string]string, gateways []string) {
		if len(labels) == 0 || (len(gateways) > 0 && !containsString(gateways, "mesh")) {
			return
		}
		h := fnv.New64a()
		h.Write([]byte(name + "#" + kind + "[" + strconv.Itoa(i) + "].match[" + strconv.Itoa(j) + "]"))
		out.uses = append(out.uses, sourceUse{labels: labels, selector: selectorString(labels), where: h.Sum64()})
	}
	for i, r := range vs.Spec.GetHttp() {
		for j, m := range r.GetMatch() {
			add("http", i, j, m.GetSourceLabels(), m.GetGateways())
		}
	}
	for i, r := range vs.Spec.GetTcp() {
		for j, m := range r.GetMatch() {
			add("tcp", i, j, m.GetSourceLabels(), m.GetGateways())
		}
	}
	for i, r := range vs.Spec.GetTls() {
		for j, m := range r.GetMatch() {
			add("tls", i, j, m.GetSourceLabels(), m.GetGateways())
		}
	}
	return out
}

func containsString(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// forNamespace returns the selectors of the VirtualServices exported to
// ns: the open ones, plus those exported to ns by name (or "."), computed
// once per World and namespace.
func (ix *worldIndex) forNamespace(ns string) *nsSources {
	var extra []vsSources
	for _, s := range ix.restricted {
		if exportedTo(orDefault(s.cfg.Object.(*networkingv1.VirtualService).Spec.GetExportTo(), ix.vsExportTo), s.cfg.Key.Namespace, ns) {
			extra = append(extra, s)
		}
	}
	if len(extra) == 0 {
		return ix.open
	}
	if v, ok := ix.byNS.Load(ns); ok {
		return v.(*nsSources)
	}
	all := make([]vsSources, 0, len(extra)+1)
	for _, g := range ix.open.groups {
		// An open group stands for its matches: its id is already their
		// combination, and combining is a sum.
		all = append(all, vsSources{uses: []sourceUse{{labels: g.labels, selector: selectorString(g.labels), where: g.id}}})
	}
	v, _ := ix.byNS.LoadOrStore(ns, groupSources(append(all, extra...)))
	return v.(*nsSources)
}

// groupSources merges the matches of ss by selector and files each
// selector under its anchor, the label with the smallest key.
func groupSources(ss []vsSources) *nsSources {
	out := &nsSources{byAnchor: map[[2]string][]int{}}
	bySelector := map[string]int{}
	for _, s := range ss {
		for _, u := range s.uses {
			i, ok := bySelector[u.selector]
			if !ok {
				i = len(out.groups)
				bySelector[u.selector] = i
				out.groups = append(out.groups, sourceGroup{labels: u.labels})
			}
			// A sum of mixed hashes does not depend on the order of the
			// matches.
			out.groups[i].id += mix64(u.where)
		}
	}
	for i, g := range out.groups {
		anchor := [2]string{}
		for k, v := range g.labels {
			if anchor[0] == "" || k < anchor[0] {
				anchor = [2]string{k, v}
			}
		}
		out.byAnchor[anchor] = append(out.byAnchor[anchor], i)
	}
	return out
}

// sourceDigest names the set of selectors visible to p's namespace that
// match p's labels; "" when none does.
func (ix *worldIndex) sourceDigest(p *model.Proxy) string {
	labels := p.Labels()
	if len(labels) == 0 || (len(ix.open.groups) == 0 && len(ix.restricted) == 0) {
		return ""
	}
	ns := ix.forNamespace(p.Namespace)
	if len(ns.groups) == 0 {
		return ""
	}
	// The digest is a sum of the mixed ids of the matching groups: it does
	// not depend on the order labels are visited in, and needs no sort.
	var sum uint64
	matched := false
	for k, v := range labels {
		for _, i := range ns.byAnchor[[2]string{k, v}] {
			if g := &ns.groups[i]; labelsMatch(g.labels, labels) {
				sum += mix64(g.id)
				matched = true
			}
		}
	}
	if !matched {
		return ""
	}
	return strconv.FormatUint(sum, 36)
}

// mix64 is SplitMix64's finalizer: it spreads ids so that sums of
// different sets of them do not collide in practice.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// selectorString is a canonical form of a label selector.
func selectorString(l map[string]string) string {
	if len(l) == 1 {
		for k, v := range l {
			return k + "=" + v + "\x00"
		}
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
		b.WriteByte(0)
	}
	return b.String()
}
