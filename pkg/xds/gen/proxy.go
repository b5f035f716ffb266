package gen

import (
	"slices"
	"sort"
	"strconv"

	"github.com/meshplane/discovery/pkg/model"
)

// ProxyConfig is everything one proxy is sent: its class's configuration
// plus its own (inbound clusters and the virtualInbound listener), which
// never share names with the class's.
type ProxyConfig struct {
	Class *ClassConfig
	// Own holds the proxy's own resources per type URL (nil when none).
	Own map[string]*Set
	// InboundPorts are the pod ports the proxy receives traffic on.
	InboundPorts []InboundPort
	// own are what Own was built from (reads.go).
	own *Reads
}

// OwnReads returns what the proxy's own configuration was built from.
func (c *ProxyConfig) OwnReads() *Reads { return c.own }

// Touched reports which parts of c a change of k, which made the World
// cur, can alter: its class's configuration, its own, both or neither.
// The change is judged against c's class's World: every change since was
// judged to touch neither part (or the part was rebuilt), so what they
// read is as it was there.
func (c *ProxyConfig) Touched(k model.Key, cur *model.World) (class, own bool) {
	return c.Class.Touches(k, cur), c.OwnTouches(k, cur)
}

// OwnTouches reports whether a change of k can alter c's own
// configuration (Touched).
func (c *ProxyConfig) OwnTouches(k model.Key, cur *model.World) bool {
	return c.own.Touches(k, c.Class.scope.w.w, cur)
}

// Touches reports whether a change of k, which made the World cur, can
// alter c (judged against c's World, as ProxyConfig.Touched).
func (c *ClassConfig) Touches(k model.Key, cur *model.World) bool {
	return c.reads.Touches(k, c.scope.w.w, cur)
}

// TouchesFrom is what Touches answers from: configurations with the same
// (a base class and its variants, which share its reads and World) answer
// alike, and a planner asks one of them.
type TouchesFrom struct {
	reads *Reads
	view  *view // of the World the reads were made in
}

// TouchesFrom returns what c's Touches answers from.
func (c *ClassConfig) TouchesFrom() TouchesFrom { return TouchesFrom{c.reads, c.scope.w} }

// Touches reports whether a change of k can alter c (Touched).
func (c *ProxyConfig) Touches(k model.Key, cur *model.World) bool {
	class, own := c.Touched(k, cur)
	return class || own
}

// WithClass returns c's own configuration with the class configuration
// cls: the push of a change that touched the class alone.
func (c *ProxyConfig) WithClass(cls *ClassConfig) *ProxyConfig {
	return &ProxyConfig{Class: cls, Own: c.Own, InboundPorts: c.InboundPorts, own: c.own}
}

// Get returns the resource of typeURL named name, or nil.
func (c *ProxyConfig) Get(typeURL, name string) *Resource {
	if r := c.Own[typeURL].Get(name); r != nil {
		return r
	}
	return c.Class.Sets[typeURL].Get(name)
}

// Hash returns the version of the resource of typeURL named name, and
// false when there is none. Unlike Get it makes nothing: a variant's
// listener is made when asked for (retagView).
func (c *ProxyConfig) Hash(typeURL, name string) (string, bool) {
	if h, ok := c.Own[typeURL].Hash(name); ok {
		return h, true
	}
	return c.Class.Sets[typeURL].Hash(name)
}

// Name returns the configuration's own string for the resource of
// typeURL named name, and false when there is none. Unlike Get it makes
// nothing.
func (c *ProxyConfig) Name(typeURL, name string) (string, bool) {
	if n, ok := c.Own[typeURL].Name(name); ok {
		return n, true
	}
	return c.Class.Sets[typeURL].Name(name)
}

// Has reports whether there is a resource of typeURL named name.
func (c *ProxyConfig) Has(typeURL, name string) bool {
	_, ok := c.Hash(typeURL, name)
	return ok
}

// Version changes whenever any resource of typeURL changes.
func (c *ProxyConfig) Version(typeURL string) string {
	v := c.Class.Sets[typeURL].Version
	if own := c.Own[typeURL]; own.Len() > 0 {
		v += "-" + own.Version
	}
	return v
}

// Names returns every resource name of typeURL, the class's first.
func (c *ProxyConfig) Names(typeURL string) []string {
	cls := c.Class.Sets[typeURL]
	own := c.Own[typeURL]
	if own.Len() == 0 {
		return cls.Names
	}
	out := make([]string, 0, cls.Len()+own.Len())
	return append(append(out, cls.Names...), own.Names...)
}

// Len is the number of resources of typeURL.
func (c *ProxyConfig) Len(typeURL string) int {
	return c.Class.Sets[typeURL].Len() + c.Own[typeURL].Len()
}

// Proxy adds p's own configuration to its class's. Gateways have none; a
// proxyless gRPC workload gets the server-side listeners of its ports; a
// sidecar gets an inbound cluster and virtualInbound filter chains for
// each of its inbound ports: the ingress listeners of its Sidecar if that
// has any (listener_inbound.go), else the ports of the services that select
// its labels.
func (g *Generator) Proxy(mw *model.World, p *model.Proxy, cls *ClassConfig) (out *ProxyConfig) {
	reads := newReads()
	w := newView(mw, reads)
	pc := &ProxyConfig{Class: cls, Own: map[string]*Set{}, own: reads}
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("inbound configuration generation failed; sending outbound only", "proxy", p.ID, "panic", r)
			out = &ProxyConfig{Class: cls, Own: map[string]*Set{}, own: readsAll}
		}
		reads.seal()
	}()
	if p.IsGRPC() {
		return g.grpcServer(w, p, pc)
	}
	if p.Type != model.ProxySidecar {
		return pc
	}
	sec := inboundSecurity{
		authz: g.authorization(w, p), mtls: g.peerAuthentication(w, p),
		serverTLS: newMeshServerTLS(g.trustIn(w)),
	}
	ports := g.inbound(w, p, sec.mtls)
	clusters := newBuilder(ClusterType)
	timeout := connectTimeout(w)
	byPort := inboundServices(w, p)
	for _, ip := range ports {
		ip.cluster.ConnectTimeout = timeout
		setDefaultLimits(ip.cluster) // istiod's, as on outbound clusters
		setServicesMetadata(ip.cluster, byPort[ip.Port])
		pc.InboundPorts = append(pc.InboundPorts, ip.InboundPort)
		// Istio's setUpstreamProtocol, for inbound clusters too: HTTP/2
		// to the application on an HTTP2 or gRPC port, the client's
		// protocol on a sniffed one.
		switch {
		case ip.Protocol == model.ProtocolHTTP2 || ip.Protocol == model.ProtocolGRPC:
			upgradeToH2(ip.cluster)
		case ip.Protocol.IsSniffed():
			useDownstreamProtocol(ip.cluster)
		}
		clusters.add(ip.cluster.Name, ip.cluster)
	}
	var errs []error
	pc.Own[ListenerType], errs = g.inboundListeners(w, p, cls, reads, ports, sec)
	for _, err := range append(clusters.errs, errs...) {
		g.report(cls.Scope().recording(reads), p.ID, err)
	}
	pc.Own[ClusterType] = clusters.set()
	g.wasmOwn(w, p, pc)
	g.patchOwn(w, p, pc)
	return pc
}

// inboundServices maps each target port of p's pod to the services of p's
// namespace that select it there (the istio metadata of its inbound
// cluster, which istio.stats reads for destination_service on inbound).
func inboundServices(w *view, p *model.Proxy) map[int32][]*model.Service {
	if len(p.Labels()) == 0 {
		return nil
	}
	pod := w.Pod(p.Namespace, p.PodName)
	out := map[int32][]*model.Service{}
	for _, svc := range w.ServicesSelecting(p.Namespace, p.Labels()) {
		for _, sp := range svc.Ports {
			port, err := strconv.Atoi(sp.TargetPort)
			if err != nil {
				if pod == nil || pod.ContainerPorts[sp.TargetPort] == 0 {
					continue
				}
				port = int(pod.ContainerPorts[sp.TargetPort])
			}
			if n := int32(port); n > 0 && !slices.Contains(out[n], svc) {
				out[n] = append(out[n], svc)
			}
		}
	}
	return out
}

// inboundPorts are the target ports of the services in p's namespace that
// select p's labels; a named targetPort is looked up in the pod's
// container ports.
func inboundPorts(w *view, p *model.Proxy) []InboundPort {
	if len(p.Labels()) == 0 {
		return nil
	}
	pod := w.Pod(p.Namespace, p.PodName)
	seen := map[int32]bool{}
	var out []InboundPort
	for _, svc := range w.ServicesSelecting(p.Namespace, p.Labels()) {
		for _, sp := range svc.Ports {
			if sp.Protocol == model.ProtocolUDP {
				continue
			}
			port, err := strconv.Atoi(sp.TargetPort)
			if err != nil {
				if pod == nil || pod.ContainerPorts[sp.TargetPort] == 0 {
					continue
				}
				port = int(pod.ContainerPorts[sp.TargetPort])
			}
			if port <= 0 || seen[int32(port)] {
				continue
			}
			seen[int32(port)] = true
			out = append(out, InboundPort{Port: int32(port), Protocol: sp.Protocol})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}
