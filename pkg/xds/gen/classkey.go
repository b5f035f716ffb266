package gen

import (
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
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
//
// Without such configuration the key is p.Class(). Gateways' classes
// already carry their labels, and Sidecars never apply to them. ClassKey
// is cheap: what it needs of w is indexed once per World (and namespace).
func ClassKey(w *model.World, p *model.Proxy) string {
	key := p.Class()
	if p.Type == model.ProxyRouter {
		return key
	}
	ix := indexFor(w)
	if c, _ := ix.choose(p); c != nil && hasWorkloadSelector(c) {
		key += "|sidecar=" + c.Key.Name
	}
	if d := ix.sourceDigest(p); d != "" {
		key += "|src=" + d
	}
	return key
}

// worldIndex is what the workload-dependent choices need of one World,
// built once per World: the Sidecars per namespace and the sourceLabels
// matches of the VirtualServices that apply to sidecars.
type worldIndex struct {
	version uint64
	// selected holds, per namespace, the Sidecars with a workloadSelector,
	// defaults those without; both oldest first, as Istio orders them.
	selected, defaults map[string][]*model.Config
	// sources are the VirtualServices with a sourceLabels match that
	// applies to sidecars.
	sources []vsSources
	// byNS caches, per proxy namespace, the distinct selectors of the
	// VirtualServices exported to it (*nsSources).
	byNS sync.Map
}

// vsSources are the sourceLabels matches of one VirtualService.
type vsSources struct {
	cfg      *model.Config
	exportTo []string
	uses     []sourceUse
}

// sourceUse is one match with sourceLabels; where names it in the
// VirtualService ("http[0].match[1]").
type sourceUse struct {
	where  string
	labels map[string]string
}

// nsSources are the distinct selectors one namespace's proxies are tested
// against, in a stable order.
type nsSources struct {
	groups []sourceGroup
}

// sourceGroup is one distinct selector and a digest of every match that
// uses it (VirtualService key and where), so the key stays the same when
// unrelated configuration changes.
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

// indexFor returns w's index, building it on first use.
func indexFor(w *model.World) *worldIndex {
	k := weak.Make(w)
	indexes.Lock()
	ix := indexes.m[k]
	indexes.Unlock()
	if ix != nil {
		return ix
	}
	ix = newWorldIndex(w)
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

func newWorldIndex(w *model.World) *worldIndex {
	ix := &worldIndex{version: w.Version, selected: map[string][]*model.Config{}, defaults: map[string][]*model.Config{}}
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
	for _, c := range w.Configs(model.KindVirtualService) {
		if s, ok := vsSourceUses(c); ok {
			ix.sources = append(ix.sources, s)
		}
	}
	return ix
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
	for _, level := range [][]*model.Config{match, ix.defaults[p.Namespace], ix.defaults[RootNamespace]} {
		if len(level) > 0 {
			return level[0], level[1:]
		}
	}
	return nil, nil
}

// vsSourceUses lists the sourceLabels matches of a VirtualService that
// apply to sidecars (no gateways, or "mesh" among them, at the
// VirtualService and at the match).
func vsSourceUses(c *model.Config) (vsSources, bool) {
	vs, ok := c.Object.(*networkingv1.VirtualService)
	if !ok || !appliesTo(c, "mesh") {
		return vsSources{}, false
	}
	out := vsSources{cfg: c, exportTo: vs.Spec.GetExportTo()}
	add := func(kind string, i, j int, labels map[string]string, gateways []string) {
		if len(labels) == 0 || (len(gateways) > 0 && !containsString(gateways, "mesh")) {
			return
		}
		out.uses = append(out.uses, sourceUse{where: kind + "[" + strconv.Itoa(i) + "].match[" + strconv.Itoa(j) + "]", labels: labels})
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
	return out, len(out.uses) > 0
}

func containsString(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// forNamespace returns the distinct selectors of the VirtualServices
// exported to ns, computing them once per World.
func (ix *worldIndex) forNamespace(ns string) *nsSources {
	if v, ok := ix.byNS.Load(ns); ok {
		return v.(*nsSources)
	}
	uses := map[string][]string{} // selector -> "ns/name#where" of its matches
	selectors := map[string]map[string]string{}
	for _, s := range ix.sources {
		if !exportedTo(s.exportTo, s.cfg.Key.Namespace, ns) {
			continue
		}
		for _, u := range s.uses {
			k := selectorString(u.labels)
			selectors[k] = u.labels
			uses[k] = append(uses[k], s.cfg.Key.Namespace+"/"+s.cfg.Key.Name+"#"+u.where)
		}
	}
	out := &nsSources{groups: make([]sourceGroup, 0, len(selectors))}
	for k, labels := range selectors {
		sort.Strings(uses[k])
		h := fnv.New64a()
		for _, u := range uses[k] {
			h.Write([]byte(u))
			h.Write([]byte{0})
		}
		out.groups = append(out.groups, sourceGroup{labels: labels, id: h.Sum64()})
	}
	sort.Slice(out.groups, func(i, j int) bool { return out.groups[i].id < out.groups[j].id })
	v, _ := ix.byNS.LoadOrStore(ns, out)
	return v.(*nsSources)
}

// sourceDigest names the set of selectors visible to p's namespace that
// match p's labels; "" when none does.
func (ix *worldIndex) sourceDigest(p *model.Proxy) string {
	labels := p.Labels()
	if len(labels) == 0 || len(ix.sources) == 0 {
		return ""
	}
	// FNV-1a over the ids of the matching groups, inlined: this runs for
	// every proxy on every push.
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	matched := false
	for _, g := range ix.forNamespace(p.Namespace).groups {
		if !labelsMatch(g.labels, labels) {
			continue
		}
		matched = true
		for i := 0; i < 64; i += 8 {
			h = (h ^ (g.id >> i & 0xff)) * prime
		}
	}
	if !matched {
		return ""
	}
	return strconv.FormatUint(h, 36)
}

// selectorString is a canonical form of a label selector.
func selectorString(l map[string]string) string {
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
