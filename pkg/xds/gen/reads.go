package gen

import (
	"slices"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/envoyfilter"
)

// Reads is what one generated configuration read of its World: the
// objects it looked up by name (found or not, so that creating one is a
// change to it), the service hostnames it looked up, the kinds it read in
// one namespace, and the sets it listed with the rule that chose their
// members. Generation records it as it reads (view); the planner asks
// Touches whether a change can alter the configuration, and pushes
// nobody else (istiod's DependentConfigs, in this project's shape: the
// dependencies are not declared beside the code that reads, they are what
// it read).
//
// Recording appends to short slices (a unit reads a handful of objects,
// often the same one several times); a class's Reads is a tree of its
// units' (shared with the previous generation where a unit is reused),
// which Touches scans.
//
// A Reads is written by one generation and only read after.
type Reads struct {
	mesh  bool
	keys  []model.Key
	hosts []string
	inNS  []kindNS
	kinds []model.Kind
	// used are the Istio configs generation took (looked up, or chosen by
	// a rule): provenance, the configs a rejected resource came from.
	used []*model.Config
	// lists are reads of the members of a kind chosen by a rule: a change
	// of an object of that kind touches the reads when the rule chooses
	// it, before or after the change.
	lists []listRead
	// sealed is set when generation is done: rules the planner calls
	// afterwards read through the generation's views, and record nothing.
	sealed bool
	// all is set for a configuration whose generation failed part way:
	// what it read is not known, so every change touches it.
	all bool
	// parts are the reads of the units this one is made of (a reused
	// unit's are shared, not copied).
	parts []*Reads
}

// readsAll touches every change (Reads.all).
var readsAll = &Reads{all: true, sealed: true}

type kindNS struct {
	kind model.Kind
	ns   string
}

// listRead is a read of the configs (or, for KindService, the services)
// of kind that match chose. A rule is called with an unrecorded view of
// the World that holds the object.
type listRead struct {
	kind    model.Kind
	config  func(*view, *model.Config) bool
	service func(*view, *model.Service) bool
}

func newReads() *Reads { return &Reads{} }

// seal ends r's recording.
func (r *Reads) seal() {
	if r != nil {
		r.sealed = true
	}
}

func (r *Reads) recording() bool { return r != nil && !r.sealed }

// appendNew appends v unless one of the last few elements is v already.
func appendNew[T comparable](l []T, v T) []T {
	for i := len(l) - 1; i >= 0 && i >= len(l)-4; i-- {
		if l[i] == v {
			return l
		}
	}
	return append(l, v)
}

func (r *Reads) key(k model.Key) {
	if !r.recording() {
		return
	}
	if k == model.MeshKey {
		r.mesh = true
		return
	}
	r.keys = appendNew(r.keys, k)
}

func (r *Reads) host(h string) {
	if r.recording() {
		r.hosts = appendNew(r.hosts, h)
	}
}

func (r *Reads) namespace(kind model.Kind, ns string) {
	if r.recording() {
		r.inNS = appendNew(r.inNS, kindNS{kind, ns})
	}
}

func (r *Reads) kind(kind model.Kind) {
	if r.recording() {
		r.kinds = appendNew(r.kinds, kind)
	}
}

func (r *Reads) use(c *model.Config) {
	if r.recording() && c != nil {
		r.used = appendNew(r.used, c)
	}
}

// usedConfigs are the configs r and its parts took, each once, in the
// order taken. It walks the parts every time: provenance is asked for
// rejected resources only, and during generation (a refusal), before r
// is sealed.
func (r *Reads) usedConfigs() []*model.Config {
	var out []*model.Config
	r.walk(func(o *Reads) bool {
		for _, c := range o.used {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
		return false
	})
	return out
}

func (r *Reads) list(l listRead) {
	if r.recording() {
		r.lists = append(r.lists, l)
	}
}

// add records everything o read as read by r too: a unit reused from a
// previous generation brings its reads along. o is shared, not copied: a
// VirtualService edit rebuilds a few units of a thousand, and copying the
// others' reads into the class's cost more than the edit itself.
func (r *Reads) add(o *Reads) {
	if r.recording() && o != nil && o != r {
		r.parts = append(r.parts, o)
	}
}

// alone returns r's only part when r read nothing itself (a unit whose
// clusters are a shared part's): one Reads less per unit and class.
func (r *Reads) alone() *Reads {
	if len(r.parts) == 1 && !r.mesh && !r.all && len(r.keys)+len(r.hosts)+len(r.inNS)+len(r.kinds)+len(r.lists)+len(r.used) == 0 {
		return r.parts[0]
	}
	return r
}

// walk calls f on r and its parts, depth first, until f returns true;
// it reports whether f did.
func (r *Reads) walk(f func(*Reads) bool) bool {
	if r == nil {
		return false
	}
	if f(r) {
		return true
	}
	for _, p := range r.parts {
		if p.walk(f) {
			return true
		}
	}
	return false
}

// Touches reports whether a change of k, which made cur out of old (the
// World the reads were made in, or one where every change since was
// judged not to touch them), can alter what was generated from the reads.
// It scans the recorded reads (a class's are a few thousand, in a tree of
// units); the planner asks once per class and change (push.Changes).
func (r *Reads) Touches(k model.Key, old, cur *model.World) bool {
	if r == nil {
		return false
	}
	var objs [2]*model.Service
	var cfgs [2]*model.Config
	var views [2]*view
	looked := false
	lookup := func() {
		if looked {
			return
		}
		looked = true
		for i, w := range []*model.World{old, cur} {
			if k.Kind == model.KindService {
				objs[i] = w.Service(k.Namespace, k.Name)
			} else {
				cfgs[i] = w.Config(k.Kind, k.Namespace, k.Name)
			}
			if objs[i] != nil || cfgs[i] != nil {
				views[i] = newView(w, nil)
			}
		}
	}
	return r.walk(func(o *Reads) bool {
		if o.all || (o.mesh && k == model.MeshKey) {
			return true
		}
		if slices.Contains(o.keys, k) || slices.Contains(o.kinds, k.Kind) || slices.Contains(o.inNS, kindNS{k.Kind, k.Namespace}) {
			return true
		}
		if len(o.hosts) == 0 && len(o.lists) == 0 {
			return false
		}
		lookup()
		for i := range objs {
			if s := objs[i]; s != nil {
				if slices.Contains(o.hosts, s.Hostname) {
					return true
				}
				for _, l := range o.lists {
					if l.kind == model.KindService && l.service(views[i], s) {
						return true
					}
				}
			}
			if c := cfgs[i]; c != nil {
				for _, l := range o.lists {
					if l.kind == k.Kind && l.config != nil && l.config(views[i], c) {
						return true
					}
				}
			}
		}
		return false
	})
}

// Kinds lists the kinds r read in any way, for the debug endpoints and
// tests.
func (r *Reads) Kinds() map[model.Kind]bool {
	out := map[model.Kind]bool{}
	r.walk(func(o *Reads) bool {
		if o.mesh {
			out[model.KindMeshConfig] = true
		}
		for _, k := range o.keys {
			out[k.Kind] = true
		}
		if len(o.hosts) > 0 {
			out[model.KindService] = true
		}
		for _, k := range o.inNS {
			out[k.kind] = true
		}
		for _, k := range o.kinds {
			out[k] = true
		}
		for _, l := range o.lists {
			out[l.kind] = true
		}
		return false
	})
	return out
}

// Len is the number of recorded reads, with repeats, for tests and
// memory accounting.
func (r *Reads) Len() int {
	n := 0
	r.walk(func(o *Reads) bool {
		n += len(o.keys) + len(o.hosts) + len(o.inNS) + len(o.kinds) + len(o.lists)
		return false
	})
	return n
}

// view is the World as generation code sees it: every read goes through
// it and is recorded in r. Generation code is handed views, never a
// *model.World (TestGenerationReadsOnlyThroughViews), so a read it does
// not record cannot be written.
type view struct {
	w *model.World
	r *Reads
	// Version and DomainSuffix are not reads of the mesh's objects.
	Version      uint64
	DomainSuffix string
}

func newView(w *model.World, r *Reads) *view {
	return &view{w: w, r: r, Version: w.Version, DomainSuffix: w.DomainSuffix}
}

// into returns a view of the same World that records into r.
func (v *view) into(r *Reads) *view { return newView(v.w, r) }

// Mesh is the MeshConfig in force.
func (v *view) Mesh() *mesh.Config {
	v.r.key(model.MeshKey)
	return v.w.Mesh()
}

// Config returns the config kind ns/name, or nil.
func (v *view) Config(kind model.Kind, ns, name string) *model.Config {
	v.r.key(model.Key{Kind: kind, Namespace: ns, Name: name})
	c := v.w.Config(kind, ns, name)
	v.r.use(c)
	return c
}

// Configs returns every config of kind: any change of the kind touches
// the reads. Prefer ConfigsWhere or ConfigsIn.
func (v *view) Configs(kind model.Kind) []*model.Config {
	v.r.kind(kind)
	return v.w.Configs(kind)
}

// ConfigsWhere returns the configs of kind that match chooses, in Configs'
// order. match reads the World through the view it is given, unrecorded:
// the planner calls it on a changed config, with a view of the old and of
// the new World. Whatever else match depends on (the proxy, what the
// class read elsewhere) must be recorded where it is read.
func (v *view) ConfigsWhere(kind model.Kind, match func(*view, *model.Config) bool) []*model.Config {
	v.r.list(listRead{kind: kind, config: match})
	u := v.into(nil)
	var out []*model.Config
	for _, c := range v.w.Configs(kind) {
		if match(u, c) {
			out = append(out, c)
			v.r.use(c)
		}
	}
	return out
}

// unrecorded is v reading without recording, for what shapes no resource:
// warnings and provenance.
func (v *view) unrecorded() *view { return v.into(nil) }

// ConfigsIn returns the configs of kind in the namespaces nss.
func (v *view) ConfigsIn(kind model.Kind, nss ...string) []*model.Config {
	for _, ns := range nss {
		v.r.namespace(kind, ns)
	}
	var out []*model.Config
	for _, c := range v.w.Configs(kind) {
		for _, ns := range nss {
			if c.Key.Namespace == ns {
				out = append(out, c)
				v.r.use(c)
				break
			}
		}
	}
	return out
}

// Service returns the Service ns/name, or nil.
func (v *view) Service(ns, name string) *model.Service {
	v.r.key(model.Key{Kind: model.KindService, Namespace: ns, Name: name})
	return v.w.Service(ns, name)
}

// ServiceByHost returns the service that owns host, or nil.
func (v *view) ServiceByHost(host string) *model.Service {
	v.r.host(host)
	return v.w.ServiceByHost(host)
}

// ServicesWhere returns the services match chooses, sorted by namespace
// and name (match as for ConfigsWhere).
func (v *view) ServicesWhere(match func(*view, *model.Service) bool) []*model.Service {
	v.r.list(listRead{kind: model.KindService, service: match})
	u := v.into(nil)
	var out []*model.Service
	for _, s := range v.w.Services() {
		if match(u, s) {
			out = append(out, s)
		}
	}
	return out
}

// ServicesSelecting returns the Services of ns whose selector matches
// labels, sorted by name.
func (v *view) ServicesSelecting(ns string, labels map[string]string) []*model.Service {
	v.r.list(listRead{kind: model.KindService, service: func(_ *view, s *model.Service) bool {
		return s.Namespace == ns && selectsLabels(s.Selector, labels)
	}})
	return v.w.ServicesSelecting(ns, labels)
}

func selectsLabels(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, val := range selector {
		if labels[k] != val {
			return false
		}
	}
	return true
}

// ServiceCount is the number of services: a size, not a read (the part
// cache sweeps by it).
func (v *view) ServiceCount() int { return v.w.ServiceCount() }

// Endpoints returns the endpoints of the service ns/name, or nil.
func (v *view) Endpoints(ns, name string) *model.ServiceEndpoints {
	v.r.key(model.Key{Kind: model.KindEndpoints, Namespace: ns, Name: name})
	return v.w.Endpoints(ns, name)
}

// Pod returns the Pod ns/name, or nil.
func (v *view) Pod(ns, name string) *model.Pod {
	v.r.key(model.Key{Kind: model.KindPod, Namespace: ns, Name: name})
	return v.w.Pod(ns, name)
}

// Node returns the Node name, or nil.
func (v *view) Node(name string) *model.Node {
	v.r.key(model.Key{Kind: model.KindNode, Name: name})
	return v.w.Node(name)
}

// JWKS returns the fetched key set of issuer and uri, or nil.
func (v *view) JWKS(issuer, uri string) *model.JWKS {
	v.r.key(model.JWKSKey(issuer, uri))
	return v.w.JWKS(issuer, uri)
}

// TrafficDistribution is the traffic distribution in force for s: its
// own, else its namespace's.
func (v *view) TrafficDistribution(s *model.Service) model.TrafficDistribution {
	if s != nil && s.TrafficDistribution == model.TrafficDistributionUnset {
		v.r.key(model.Key{Kind: model.KindNamespace, Name: s.Namespace})
	}
	return v.w.TrafficDistribution(s)
}

// index is the World's index (class_key.go). It is a memo of the whole
// World: what a lookup in it reads is recorded by the view method that
// makes the lookup (paKey, drsFor, ...), never by the caller.
func (v *view) index() *worldIndex { return indexFor(v.w) }

// TrafficDistributionsInUse reports which preferences some service has
// in force: a read of every Service and Namespace.
func (v *view) TrafficDistributionsInUse() (sameZone, sameNode bool) {
	v.r.kind(model.KindService)
	v.r.kind(model.KindNamespace)
	return v.w.TrafficDistributionsInUse()
}

// Lookups in the World's index, each recording what it reads.

// paKey identifies the PeerAuthentications the clusters and endpoints of
// namespace ns's services read (paIndex.key): ns's and the root
// namespace's.
func (v *view) paKey(ns string) string {
	v.peerAuthentications(ns)
	return v.index().pa.key(ns)
}

// paMTLSOff is paIndex.mtlsOff, read for namespace ns.
func (v *view) paMTLSOff(ns string) func(*model.Endpoint, int32) bool {
	v.peerAuthentications(ns)
	return v.index().pa.mtlsOff(ns)
}

func (v *view) peerAuthentications(ns string) {
	v.r.namespace(model.KindPeerAuthentication, ns)
	v.r.namespace(model.KindPeerAuthentication, rootNamespace(v))
}

// localityDeps is lbIndex.forService: it reads the MeshConfig and the
// rule drc (read where it was chosen).
func (v *view) localityDeps(drc *model.Config, td model.TrafficDistribution) *lbDeps {
	v.Mesh()
	return v.index().lb.forService(drc, td)
}

// sidecarFor is the Sidecar that applies to p and the ones it shadows: a
// read of the Sidecars of p's namespace and of the root namespace.
func (v *view) sidecarFor(p *model.Proxy) (*model.Config, []*model.Config) {
	v.r.namespace(model.KindSidecar, p.Namespace)
	v.r.namespace(model.KindSidecar, rootNamespace(v))
	c, shadowed := v.index().choose(p)
	v.r.use(c)
	return c, shadowed
}

// destinationRulesFor is ruleIndex.forScope: a read of the
// DestinationRules that may apply to the class's namespace (and, through
// ServiceByHost, of the services their hosts name).
func (v *view) destinationRulesFor(sc *Scope) (map[string]*model.Config, map[string][]*model.Config) {
	ns := sc.Proxy.Namespace
	v.r.list(listRead{kind: model.KindDestinationRule, config: func(u *view, c *model.Config) bool {
		dr, ok := c.Object.(*networkingv1.DestinationRule)
		return ok && destinationRuleExportedTo(u, &dr.Spec, c.Key.Namespace, ns)
	}})
	return v.index().rules.forScope(sc)
}

// envoyFiltersFor are the EnvoyFilters that select p, in order.
func (v *view) envoyFiltersFor(p *model.Proxy) []*envoyfilter.Filter {
	v.r.list(listRead{kind: model.KindEnvoyFilter, config: func(u *view, c *model.Config) bool {
		return envoyFilterSelects(u, c, p)
	}})
	return v.index().envoyFiltersFor(p)
}

// wasmSelected are the WasmPlugins that attach to p.
func (v *view) wasmSelected(p *model.Proxy) []*wasmPlugin {
	v.wasmRead(p)
	return v.index().wasmSelected(p)
}

// wasmKey names the WasmPlugins of p and their versions.
func (v *view) wasmKey(p *model.Proxy) string {
	v.wasmRead(p)
	return v.index().wasmKey(p)
}

func (v *view) wasmRead(p *model.Proxy) {
	v.r.list(listRead{kind: model.KindWasmPlugin, config: func(u *view, c *model.Config) bool {
		return wasmPluginSelects(u, c, p)
	}})
}
