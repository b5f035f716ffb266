package gen

import (
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/envoyfilter"
)

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
// makes the lookup (paMTLSOff, sidecarFor, ...), never by the caller.
func (v *view) index() *worldIndex { return indexFor(v.w) }

// TrafficDistributionsInUse reports which preferences some service has
// in force: a read of every Service and Namespace.
func (v *view) TrafficDistributionsInUse() (sameZone, sameNode bool) {
	v.r.kind(model.KindService)
	v.r.kind(model.KindNamespace)
	return v.w.TrafficDistributionsInUse()
}

// Lookups in the World's index, each recording what it reads.

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
