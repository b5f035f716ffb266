package gen

import (
	"hash/maphash"
	"slices"
	"strings"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Scope is what one proxy class sees of a World: the visible services and
// the Istio configuration that applies to them. It is built once per class
// and generation and only read after.
type Scope struct {
	w     *view
	Proxy *model.Proxy
	// Services are the visible services, sorted by namespace and name.
	// Services of type ExternalName are not among them: aliases holds
	// them by the host they name.
	Services []*model.Service
	aliases  map[string][]*model.Service
	visible  map[model.NamespacedName]bool
	// namespaces are those of the visible services.
	namespaces map[string]bool
	// vs maps a host to the VirtualServices that name it, in precedence
	// order (scope_vs.go); a service host without one for sidecars also
	// gets the first sidecar VirtualService of the most specific wildcard
	// covering it.
	vs map[string][]*model.Config
	// vsRank is each VirtualService's place in precedence order.
	vsRank map[*model.Config]int
	// vsWild are the wildcard hosts of vs, most specific first.
	vsWild []string
	// delegations are the http routes of root VirtualServices with their
	// delegates merged in.
	delegations map[*model.Config]*delegation
	// dr maps a host to its DestinationRule (cluster_drselect.go), drShadowed to
	// the rules that one shadows, if any.
	dr         map[string]*model.Config
	drShadowed map[string][]*model.Config
	// sidecar is the Sidecar that applies to the class, or nil.
	sidecar *egressScope
	// tel is the class's telemetry (Class sets it; nil: none).
	tel *classTelemetry
	// topo is the class's proxy's locality and labels as locality load
	// balancing reads them (endpoint_locality.go).
	topo proxyTopology
	// quiet is this scope reading unrecorded (unrecorded).
	quiet *Scope
	// vis are the visible services the fields above were taken from.
	vis *visibleServices
	// byPort groups Services by port (servicesByPort).
	byPort *portIndex
}

// topology is what locality load balancing reads of the class's proxies:
// all of them agree on what it reads (ClassKey's |lb=).
func (sc *Scope) topology() proxyTopology { return sc.topo }

// outTel is the telemetry of the class's client-side listeners: a
// sidecar's outbound ones, a gateway's.
func (sc *Scope) outTel() *listenerTelemetry {
	if sc == nil {
		return nil
	}
	sc.readTelemetry()
	if sc.Proxy.Type == model.ProxyRouter {
		return sc.tel.of(classGateway)
	}
	return sc.tel.of(classOutbound)
}

// readTelemetry records that what is being built uses the class's
// telemetry: what it was decided from.
func (sc *Scope) readTelemetry() {
	if sc.tel != nil {
		sc.w.r.add(sc.tel.reads)
	}
}

// inTel is the telemetry of a sidecar's inbound listener.
func (sc *Scope) inTel() *listenerTelemetry {
	if sc == nil {
		return nil
	}
	sc.readTelemetry()
	return sc.tel.of(classInbound)
}

// recording returns sc reading through a view that records into r.
func (sc *Scope) recording(r *Reads) *Scope {
	c := *sc
	c.w, c.quiet = sc.w.into(r), nil
	return &c
}

// unrecorded returns sc reading without recording (made once).
func (sc *Scope) unrecorded() *Scope {
	if sc.w.r == nil {
		return sc
	}
	if sc.quiet == nil {
		sc.quiet = sc.recording(nil)
	}
	return sc.quiet
}

// in returns sc reading w, recording nothing.
func (sc *Scope) in(w *model.World) *Scope {
	c := *sc
	c.w, c.quiet = newView(w, nil), nil
	return &c
}

// newScope computes what proxies of p's class see of w. prev, the
// class's previous scope or nil, lends its visible services when what
// choosing them read stands (visibleServices).
func newScope(w *view, p *model.Proxy, prev *Scope) *Scope {
	sc := &Scope{w: w, Proxy: p, vs: map[string][]*model.Config{}, topo: topologyOf(w, p)}
	vis := prev.visibleIn(w, p)
	if vis == nil {
		vis = chooseServices(w, p)
	}
	w.r.add(vis.reads)
	sc.vis, sc.sidecar, sc.byPort = vis, vis.egress, vis.byPort
	sc.Services, sc.aliases, sc.visible, sc.namespaces = vis.services, vis.aliases, vis.visible, vis.namespaces
	sc.indexVirtualServices()
	sc.dr, sc.drShadowed = w.destinationRulesFor(sc)
	return sc
}

// visibleServices are the services a class sees and its Sidecar's
// egress, the part of its scope that most changes leave as it was: a
// VirtualService edit or an endpoint change does not choose them again.
// Filtering and indexing a thousand services was a sixth of a class's
// regeneration after a VirtualService edit.
type visibleServices struct {
	// reads are what choosing them read (sealed), at the World they were
	// chosen in, or one where no change since touched the reads.
	reads *Reads
	at    *view
	// ns is the class's namespace, egress its Sidecar's egress (nil:
	// none).
	ns     string
	egress *egressScope
	*chosen
}

// chosen is what the services a class sees are made into, shared by the
// classes that see the same services (chosenPool) and never written but
// for byPort, made once. M1's 50 namespace classes see the same 1,000
// services, and each made its own index of them for every service added
// or removed (63 MB of what ten of them allocated, with the ports' index
// 19 MB more).
type chosen struct {
	// from are the services they are made from, aliases included.
	from       []*model.Service
	services   []*model.Service
	aliases    map[string][]*model.Service
	visible    map[model.NamespacedName]bool
	namespaces map[string]bool
	// byPort groups the services by port when first asked
	// (servicesByPort).
	byPort *portIndex
}

// chooseServices chooses the services proxies of p's class see in w.
func chooseServices(w *view, p *model.Proxy) *visibleServices {
	vis := &visibleServices{reads: newReads(), at: w.unrecorded(), ns: p.Namespace}
	defer vis.reads.seal()
	w = w.into(vis.reads)
	egress := sidecarScope(w, p)
	vis.egress = egress
	// Every service exported to the class's namespace and allowed by
	// its Sidecar's egress is a read: adding, changing or removing one
	// changes what the class sees (ownHosts may then hide another).
	seen := w.ServicesWhere(func(u *view, s *model.Service) bool {
		return exportedTo(serviceExportTo(u, s), s.Namespace, p.Namespace) && egress.allows(s)
	})
	own := seen
	if hostShared(seen, w.w.SharedHostnames()) {
		own = ownHosts(seen, p.Namespace)
	}
	vis.chosen = chosenPool.of(own)
	return vis
}

// chosenPool finds the chosen services in use by the services they are
// made from, held weakly.
var chosenPool = chosenShare{weakPool[uint64, chosen]{m: newWeakMap[uint64, chosen](64)}}

var chosenSeed = maphash.MakeSeed()

type chosenShare struct{ weakPool[uint64, chosen] }

// of returns the chosen services made from own, made now if none in use
// are.
func (p *chosenShare) of(own []*model.Service) *chosen {
	var h maphash.Hash
	h.SetSeed(chosenSeed)
	for _, s := range own {
		maphash.WriteComparable(&h, s)
	}
	k := h.Sum64()
	same := func(c *chosen) bool { return slices.Equal(c.from, own) }
	if c := p.find(k, same); c != nil {
		return c
	}
	return p.keep(k, choose(own), same)
}

// choose makes own, the services a class sees, into their index.
func choose(own []*model.Service) *chosen {
	// Sized once: grown from empty, a map of a thousand services is
	// rehashed seven times.
	c := &chosen{from: own, visible: make(map[model.NamespacedName]bool, len(own)), namespaces: map[string]bool{}, byPort: &portIndex{}}
	for _, s := range own {
		if s.ExternalName != "" {
			// An alias: its names go to the host it names (aliasNames).
			if c.aliases == nil {
				c.aliases = map[string][]*model.Service{}
			}
			c.aliases[s.ExternalName] = append(c.aliases[s.ExternalName], s)
			continue
		}
		c.services = append(c.services, s)
		c.visible[s.Key()] = true
		c.namespaces[s.Namespace] = true
	}
	return c
}

// visibleIn returns sc's visible services if they are those of p's
// class in w: the same namespace and Sidecar, and no change since they
// were chosen touches what choosing them read. Otherwise nil.
func (sc *Scope) visibleIn(w *view, p *model.Proxy) *visibleServices {
	if sc == nil || sc.vis == nil || sc.vis.ns != p.Namespace {
		return nil
	}
	vis := sc.vis
	if vis.at.w == w.w {
		return vis
	}
	// The Sidecar p's class chooses, asked again of p (its choice and
	// what it read are among vis.reads).
	c, _ := w.unrecorded().sidecarFor(p)
	if egressConfig(vis.egress) != c {
		return nil
	}
	// A MeshConfig change is read by the rule that chooses them (the
	// default exportTo) through a view that records nothing: it chooses
	// them again, whatever the reads say.
	if cs := changesSince(vis.at, w.w); cs.mesh || vis.reads.touchedBy(cs) {
		return nil
	}
	moved := *vis
	moved.at = w.unrecorded()
	return &moved
}

func egressConfig(es *egressScope) *model.Config {
	if es == nil {
		return nil
	}
	return es.cfg
}

// Visible reports whether the service ns/name is visible to the class.
func (sc *Scope) Visible(nn model.NamespacedName) bool { return sc.visible[nn] }

// SeesNamespace reports whether the class sees a service of namespace ns.
func (sc *Scope) SeesNamespace(ns string) bool { return sc.namespaces[ns] }

// VirtualServices returns the VirtualServices for host that apply to the
// gateway or, for "mesh", to sidecars, in precedence order. For "mesh", a
// host without one of its own gets the wildcard one that covers it.
func (sc *Scope) VirtualServices(host, gateway string) []*model.Config {
	all := sc.vs[host]
	sc.w.r.scope(scopeRead{q: qVirtualServices, host: host, cfgs: all})
	var out []*model.Config
	for _, c := range all {
		if appliesTo(c, gateway) {
			out = append(out, c)
		}
	}
	sc.use(out...)
	return out
}

// use notes that what is being built takes the configs cs, chosen from
// the class's scope (provenance.go).
func (sc *Scope) use(cs ...*model.Config) {
	for _, c := range cs {
		sc.w.r.use(c)
	}
}

// DestinationRule returns the DestinationRule for host, or nil.
func (sc *Scope) DestinationRule(host string) *networkingv1.DestinationRule {
	if c := sc.destinationRuleConfig(host); c != nil {
		return c.Object.(*networkingv1.DestinationRule)
	}
	return nil
}

func (sc *Scope) destinationRuleConfig(host string) *model.Config {
	c := sc.dr[host]
	sc.w.r.scope(scopeRead{q: qDestinationRule, host: host, cfg: c})
	sc.use(c)
	return c
}

// boundTo is the rule of the VirtualServices that apply to gateway.
func boundTo(gateway string) func(*view, *model.Config) bool {
	return func(_ *view, c *model.Config) bool { return appliesTo(c, gateway) }
}

func appliesTo(c *model.Config, gateway string) bool {
	vs := c.Object.(*networkingv1.VirtualService)
	gws := vs.Spec.GetGateways()
	if len(gws) == 0 {
		return gateway == "mesh"
	}
	for _, g := range gws {
		// A gateway named without a namespace lives in the VirtualService's.
		if resolveGatewayName(g, c.Key.Namespace) == gateway {
			return true
		}
	}
	return false
}

// exportedTo applies Istio's exportTo: empty or "*" is everywhere, "." the
// object's own namespace, anything else a namespace name.
func exportedTo(exportTo []string, ownNS, toNS string) bool {
	if len(exportTo) == 0 {
		return true
	}
	for _, e := range exportTo {
		switch e {
		case "*":
			return true
		case ".":
			if ownNS == toNS {
				return true
			}
		default:
			if e == toNS {
				return true
			}
		}
	}
	return false
}

// ResolveHost turns a host as written in an Istio config of namespace ns into
// a FQDN: a short name (no dot) is a service of ns.
func ResolveHost(h, ns, domainSuffix string) string {
	if strings.Contains(h, ".") || h == "*" {
		return h
	}
	return model.Hostname(h, ns, domainSuffix)
}

// ClusterName is Istio's name for an outbound cluster.
func ClusterName(port int32, subset, host string) string {
	return "outbound|" + itoa(port) + "|" + subset + "|" + host
}

// InboundClusterName is Istio's name for the cluster to a local port.
func InboundClusterName(port int32) string { return "inbound|" + itoa(port) + "||" }

// RouteName names the RouteConfiguration of one service port.
func RouteName(host string, port int32) string { return host + ":" + itoa(port) }

// ownHosts keeps, of the services a class sees, those that own their
// hostname, as istiod's sidecar scope does: a hostname seen in several
// namespaces belongs to the proxy's namespace if it has it, else to the
// namespace of a Kubernetes Service of that name, else to the first
// (istiod's oldest; here the first by namespace and name). In the owning
// namespace a Kubernetes Service takes the hostname from ServiceEntries
// (no "domain squatting" on a Service's name). ServiceEntries of one
// namespace that share a hostname are all kept (istiod merges their
// ports); the others are left out, so no two clusters share a name.
func ownHosts(svcs []*model.Service, ns string) []*model.Service {
	type owner struct {
		ns   string
		kube bool
	}
	own := make(map[string]owner, len(svcs))
	shared := false
	for _, s := range svcs {
		o := owner{s.Namespace, s.Entry == nil}
		ex, ok := own[s.Hostname]
		switch {
		case !ok:
			own[s.Hostname] = o
			continue
		case ex.ns == ns:
		case s.Namespace == ns, !ex.kube && o.kube:
			own[s.Hostname] = o
		}
		shared = true
	}
	if !shared {
		return svcs
	}
	kube := map[string]bool{}
	for _, s := range svcs {
		if s.Entry == nil && own[s.Hostname].ns == s.Namespace {
			kube[s.Hostname] = true
		}
	}
	out := make([]*model.Service, 0, len(svcs))
	for _, s := range svcs {
		if s.Namespace != own[s.Hostname].ns || (kube[s.Hostname] && s.Entry != nil) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// hostShared reports whether one of svcs has a host name of shared, the
// World's host names that several Services have: only then can ownHosts
// leave one out. (Not a read: ownHosts's result depends on svcs alone,
// which are read.)
func hostShared(svcs []*model.Service, shared []string) bool {
	if len(shared) == 0 {
		return false
	}
	for _, s := range svcs {
		if _, ok := slices.BinarySearch(shared, s.Hostname); ok {
			return true
		}
	}
	return false
}

// aliasNames are the names of the ExternalName Services the class sees
// that name svc's host, with their short forms, for svc's virtual hosts
// on port (istiod adds an alias's names to its concrete service's
// virtual host; an alias of a host not in the mesh has no route, so its
// traffic goes where the application's DNS sends it).
func (sc *Scope) aliasNames(svc *model.Service, port int32) []string {
	as := sc.aliases[svc.Hostname]
	sc.w.r.scope(scopeRead{q: qAliases, host: svc.Hostname, svcs: as})
	var out []string
	for _, a := range as {
		out = append(out, sc.hostNames(a, port)...)
	}
	return out
}
