package model

import (
	"slices"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// World is one consistent, immutable view of the mesh. Nothing in it is
// changed after it is published: readers never lock. Every map and slice
// reachable from a World is shared with later Worlds that did not change it.
type World struct {
	// Version increases by one with every published World.
	Version uint64
	// DomainSuffix is the cluster's DNS suffix (cluster.local).
	DomainSuffix string

	services   map[NamespacedName]*Service
	byHost     map[string]*Service
	endpoints  map[NamespacedName]*ServiceEndpoints
	pods       map[NamespacedName]*Pod
	podsByIP   map[string]*Pod
	namespaces map[string]*Namespace
	nodes      map[string]*Node
	configs    map[Kind]map[NamespacedName]*Config
	// mesh is the MeshConfig in force; nil for Istio's defaults.
	mesh *MeshObject
	// jwks are the fetched key sets, by JWKSKey name (jwks.go).
	jwks map[string]*JWKS
	// gatewayReports are the translation's findings on each Gateway API
	// object (derived.go).
	gatewayReports map[Key]*gatewayapi.Report
	// caConfigMaps are the CA keys (ca.crt, cacert) of every ConfigMap,
	// for BackendTLSPolicy (KindCAConfigMap); a ConfigMap without them
	// is held with no data.
	caConfigMaps map[NamespacedName]map[string]string
	// log is the change log shared by the Worlds of one Store
	// (changelog.go).
	log *changeLog
	// sorted holds Services and Configs sorted, made once per map: a
	// World shares it with the Worlds before it until they change the
	// map (Store.publish). Each class's generation lists the services;
	// sorting 1,000 of them 50 times per change was a tenth of a
	// VirtualService edit's generation.
	sorted *sortedLists
}

// sortedLists are a World's sorted listings, each made at its first use
// and shared with the next Worlds while their map stays the same.
type sortedLists struct {
	services *lazyList[*Service]
	// sharedHosts are the host names several Services have, made with
	// services (SharedHostnames).
	sharedHosts *lazyList[string]
	mu          sync.Mutex
	configs     map[Kind]*lazyList[*Config]
}

// lazyList is a list made once, at its first use.
type lazyList[T any] struct {
	once sync.Once
	list []T
}

func (l *lazyList[T]) get(build func() []T) []T {
	l.once.Do(func() { l.list = build() })
	return l.list
}

// configList is the listing of kind.
func (sl *sortedLists) configList(kind Kind) *lazyList[*Config] {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	l := sl.configs[kind]
	if l == nil {
		l = &lazyList[*Config]{}
		sl.configs[kind] = l
	}
	return l
}

// next returns the listings of the World made from this one: new ones for
// its services when their map is new, and for each kind of configs whose
// map is.
func (sl *sortedLists) next(services bool, configs map[Kind]bool) *sortedLists {
	if sl != nil && !services && len(configs) == 0 {
		return sl
	}
	n := &sortedLists{services: &lazyList[*Service]{}, sharedHosts: &lazyList[string]{}, configs: map[Kind]*lazyList[*Config]{}}
	if sl == nil {
		return n
	}
	if !services {
		n.services, n.sharedHosts = sl.services, sl.sharedHosts
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for k, l := range sl.configs {
		if !configs[k] {
			n.configs[k] = l
		}
	}
	return n
}

// Protocol is a service port's application protocol, as Istio reads it from
// the port's appProtocol or the prefix of its name (http-web, grpc, tcp-db)
// for a Kubernetes Service, from its protocol field for a ServiceEntry.
type Protocol string

// Protocols discovery distinguishes. ProtocolUnknown is Istio's
// UnsupportedProtocol: the port declares no protocol Istio knows, and
// sidecars sniff its traffic.
const (
	ProtocolHTTP    Protocol = "HTTP"
	ProtocolHTTP2   Protocol = "HTTP2"
	ProtocolGRPC    Protocol = "GRPC"
	ProtocolHTTPS   Protocol = "HTTPS"
	ProtocolTLS     Protocol = "TLS"
	ProtocolTCP     Protocol = "TCP"
	ProtocolMongo   Protocol = "Mongo"
	ProtocolRedis   Protocol = "Redis"
	ProtocolMySQL   Protocol = "MySQL"
	ProtocolUDP     Protocol = "UDP"
	ProtocolUnknown Protocol = "UnsupportedProtocol"
)

// IsHTTP reports whether traffic on the port is routed as HTTP.
func (p Protocol) IsHTTP() bool {
	return p == ProtocolHTTP || p == ProtocolHTTP2 || p == ProtocolGRPC
}

// IsSniffed reports whether the port declares no protocol Istio knows, so
// that a sidecar tells HTTP from other traffic by looking at it (Istio's
// IsUnsupported).
func (p Protocol) IsSniffed() bool { return p == ProtocolUnknown }

// Port is one port of a Service.
type Port struct {
	Name       string   `json:"name,omitempty"`
	Port       int32    `json:"port"`
	TargetPort string   `json:"targetPort,omitempty"` // a number or a container port name
	Protocol   Protocol `json:"protocol"`
}

// Service is a Kubernetes Service as the mesh sees it.
type Service struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Hostname  string            `json:"hostname"`            // name.namespace.svc.<domain suffix>
	Addresses []string          `json:"addresses,omitempty"` // IPs; a ServiceEntry may also have CIDRs
	Ports     []Port            `json:"ports"`
	Labels    map[string]string `json:"labels,omitempty"`
	Selector  map[string]string `json:"selector,omitempty"`
	Headless  bool              `json:"headless,omitempty"`
	// ExportTo is the networking.istio.io/exportTo annotation, split; empty
	// means exported everywhere.
	ExportTo        []string `json:"exportTo,omitempty"`
	ResourceVersion string   `json:"resourceVersion,omitempty"`
	// Entry is set for a host of a ServiceEntry (see serviceentry.go).
	Entry *ServiceEntryInfo `json:"serviceEntry,omitempty"`
	// TrafficDistribution is what the Service (spec.trafficDistribution,
	// else its annotation) or ServiceEntry (its annotation) says; unset
	// lets the namespace decide (World.TrafficDistribution).
	TrafficDistribution TrafficDistribution `json:"trafficDistribution,omitempty"`
	// ExternalName is set for a Service of type ExternalName: an alias of
	// that host, as istiod reads it (no clusters or listeners of its own;
	// the host it names, when in the mesh, also answers to its names).
	ExternalName string `json:"externalName,omitempty"`
}

// Key names the Service.
func (s *Service) Key() NamespacedName { return NamespacedName{s.Namespace, s.Name} }

// PortByName returns the port named name.
func (s *Service) PortByName(name string) (Port, bool) {
	for _, p := range s.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return Port{}, false
}

// PortByNumber returns the port numbered port.
func (s *Service) PortByNumber(port int32) (Port, bool) {
	for _, p := range s.Ports {
		if p.Port == port {
			return p, true
		}
	}
	return Port{}, false
}

// Locality is where an endpoint runs.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	Subzone string `json:"subzone,omitempty"`
}

// EndpointPort is the port an endpoint serves for a service port name.
type EndpointPort struct {
	Name     string `json:"name,omitempty"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol,omitempty"`
}

// Endpoint is one address behind a Service.
type Endpoint struct {
	Address string `json:"address"`
	// Ports are shared by every endpoint of one EndpointSlice.
	Ports          []EndpointPort    `json:"ports"`
	Ready          bool              `json:"ready"`
	Locality       Locality          `json:"locality"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Pod            string            `json:"pod,omitempty"`
	Node           string            `json:"node,omitempty"`
	// Slice is the EndpointSlice the endpoint came from, or for a
	// ServiceEntry the object it came from (Kind/ns/name).
	Slice string `json:"slice"`
	// Weight is a WorkloadEntry's load-balancing weight; 0 means 1.
	Weight uint32 `json:"weight,omitempty"`
}

// PortFor returns the endpoint's port for the service port named name.
func (e *Endpoint) PortFor(name string) (int32, bool) {
	for _, p := range e.Ports {
		if p.Name == name {
			return p.Port, true
		}
	}
	return 0, false
}

// ServiceEndpoints are all endpoints of one Service, sorted by slice and
// address.
type ServiceEndpoints struct {
	Service   NamespacedName `json:"service"`
	Endpoints []*Endpoint    `json:"endpoints"`
}

// Pod is what the mesh needs of a Pod.
type Pod struct {
	Name           string            `json:"name"`
	Namespace      string            `json:"namespace"`
	IPs            []string          `json:"ips,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
	Node           string            `json:"node,omitempty"`
	Ready          bool              `json:"ready"`
	// ContainerPorts maps named container ports to their numbers, for
	// services whose targetPort is a name.
	ContainerPorts map[string]int32 `json:"containerPorts,omitempty"`
}

// Namespace is what the mesh needs of a Namespace.
type Namespace struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// TrafficDistribution is the namespace's
	// networking.istio.io/traffic-distribution annotation, for its
	// services that say nothing themselves.
	TrafficDistribution TrafficDistribution `json:"trafficDistribution,omitempty"`
}

// Config is one configuration object. Object is its istio.io/client-go
// v1 type (*networkingv1.VirtualService, *securityv1.AuthorizationPolicy,
// ...), or for a Gateway API kind its sigs.k8s.io/gateway-api v1 type.
type Config struct {
	Key    Key
	Object runtime.Object
	// Derived is set on an Istio Gateway or VirtualService the Store made
	// from Gateway API objects (derived.go): no such object exists in the
	// API server, and nothing writes its status.
	Derived bool
}

// Service returns the Service named ns/name, or nil.
func (w *World) Service(ns, name string) *Service { return w.services[NamespacedName{ns, name}] }

// ServiceByHost returns the Service whose host name is host, or nil.
func (w *World) ServiceByHost(host string) *Service { return w.byHost[host] }

// Services returns every Service, sorted by namespace and name.
func (w *World) Services() []*Service {
	if w.sorted == nil {
		return w.sortServices()
	}
	return slices.Clone(w.sorted.services.get(w.sortServices))
}

func (w *World) sortServices() []*Service {
	out := make([]*Service, 0, len(w.services))
	for _, s := range w.services {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return lessNN(out[i].Key(), out[j].Key()) })
	return out
}

// SharedHostnames lists, sorted, the host names that more than one
// Service has (ServiceEntries may name a Service's host or each other's),
// made once per set of Services: each class's choice of the services it
// sees (gen's ownHosts) needs a map of their hosts only when one is
// shared, and 50 namespace classes filled one for every service added.
func (w *World) SharedHostnames() []string {
	if w.sorted == nil {
		return w.sharedHostnames()
	}
	return w.sorted.sharedHosts.get(w.sharedHostnames)
}

func (w *World) sharedHostnames() []string {
	seen := make(map[string]bool, len(w.services))
	var out []string
	for _, s := range w.services {
		if once, ok := seen[s.Hostname]; ok {
			if once {
				out = append(out, s.Hostname)
				seen[s.Hostname] = false
			}
			continue
		}
		seen[s.Hostname] = true
	}
	slices.Sort(out)
	return out
}

// ServiceCount is the number of Services.
func (w *World) ServiceCount() int { return len(w.services) }

// Endpoints returns the endpoints of the Service ns/name, or nil.
func (w *World) Endpoints(ns, name string) *ServiceEndpoints {
	return w.endpoints[NamespacedName{ns, name}]
}

// Pod returns the Pod ns/name, or nil.
func (w *World) Pod(ns, name string) *Pod { return w.pods[NamespacedName{ns, name}] }

// PodByIP returns a Pod that has ip, or nil.
func (w *World) PodByIP(ip string) *Pod { return w.podsByIP[ip] }

// Namespace returns the Namespace name, or nil.
func (w *World) Namespace(name string) *Namespace { return w.namespaces[name] }

// Namespaces returns every Namespace, sorted by name.
func (w *World) Namespaces() []*Namespace {
	out := make([]*Namespace, 0, len(w.namespaces))
	for _, n := range w.namespaces {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Config returns the Istio config kind ns/name, or nil.
func (w *World) Config(kind Kind, ns, name string) *Config {
	return w.configs[kind][NamespacedName{ns, name}]
}

// Configs returns every Istio config of kind, sorted by namespace and name.
func (w *World) Configs(kind Kind) []*Config {
	sortKind := func() []*Config { return w.sortConfigs(kind) }
	if w.sorted == nil {
		return sortKind()
	}
	return slices.Clone(w.sorted.configList(kind).get(sortKind))
}

func (w *World) sortConfigs(kind Kind) []*Config {
	m := w.configs[kind]
	out := make([]*Config, 0, len(m))
	for _, c := range m {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		return lessNN(NamespacedName{out[i].Key.Namespace, out[i].Key.Name}, NamespacedName{out[j].Key.Namespace, out[j].Key.Name})
	})
	return out
}

// ServicesSelecting returns the Services in ns whose selector matches labels,
// sorted by name.
func (w *World) ServicesSelecting(ns string, labels map[string]string) []*Service {
	var out []*Service
	for _, s := range w.services {
		if s.Namespace == ns && len(s.Selector) > 0 && selects(s.Selector, labels) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func lessNN(a, b NamespacedName) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// Change says that one object changed between two Worlds.
type Change struct {
	Key Key
	Op  Op
	// StatusOnly: an Istio config changed only where generation does not
	// read (its status, resourceVersion, managed fields): the World holds
	// the new object, for those who read its status, and no proxy needs
	// a push (istiod's NeedsPush: labels, annotations and spec count).
	StatusOnly bool
}

// Update is a newly published World and what changed since the previous one.
type Update struct {
	World   *World
	Changes []Change
}

// Kinds returns the set of kinds that changed.
func (u *Update) Kinds() map[Kind]bool {
	out := make(map[Kind]bool, 4)
	for _, c := range u.Changes {
		out[c.Key.Kind] = true
	}
	return out
}

// EndpointsOnly reports whether the update changed nothing but endpoints:
// such a change needs EDS only.
func (u *Update) EndpointsOnly() bool {
	for _, c := range u.Changes {
		switch c.Key.Kind {
		case KindEndpoints, KindEndpointSlice:
		default:
			return false
		}
	}
	return len(u.Changes) > 0
}
