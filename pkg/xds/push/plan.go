package push

import (
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Plan is what a change means for one proxy: a full push, or new
// endpoints of some of the services it sees.
type Plan struct {
	Full bool
	// KeepOwn is set when no change behind the plan can change the
	// proxy's own configuration (gen.Proxy: inbound clusters and
	// listener), which a full push then reuses instead of rebuilding it
	// for every proxy.
	KeepOwn bool
	// EDS are the services whose endpoints an endpoints-only push sends.
	EDS map[model.NamespacedName]bool
	// Class is the proxy's class in the new World.
	Class string
}

// Changes are a Request's changes as planning reads them: endpoints of
// services, and every other changed object.
type Changes struct {
	Endpoints map[model.NamespacedName]bool
	Others    []model.Key
}

// Split sorts changes for planning. EndpointSlice changes are left out:
// their effect arrives as KindEndpoints changes.
func Split(changes map[model.Key]model.Op) Changes {
	ch := Changes{Endpoints: map[model.NamespacedName]bool{}}
	for k := range changes {
		switch k.Kind {
		case model.KindEndpoints:
			ch.Endpoints[model.NamespacedName{Namespace: k.Namespace, Name: k.Name}] = true
		case model.KindEndpointSlice:
		default:
			ch.Others = append(ch.Others, k)
		}
	}
	return ch
}

// For plans the push of proxy p, whose configuration is cfg (nil: none
// yet), after the changes that made w: nil when they cannot alter what
// p is sent. class is p's class in w.
func (ch Changes) For(w *model.World, p *model.Proxy, cfg *gen.ProxyConfig) (plan *Plan, class string) {
	// The class can change with the World (a Sidecar selecting the
	// workload, a VirtualService matching its labels): then everything
	// is regenerated for the new class.
	key := gen.ClassKey(w, p)
	if cfg == nil || cfg.Class.Class != key {
		return &Plan{Full: true, Class: key}, key
	}
	scope := cfg.Class.Scope()
	for _, k := range ch.Others {
		if ChangeMatters(k, p, w, scope) {
			return &Plan{Full: true, KeepOwn: ownUnchanged(ch.Others), Class: key}, key
		}
	}
	var seen map[model.NamespacedName]bool
	for nn := range ch.Endpoints {
		if scope.Visible(nn) {
			if svc := w.Service(nn.Namespace, nn.Name); svc != nil && p.Type == model.ProxySidecar && gen.EndpointsShapeListeners(svc) {
				// Its endpoints are listener chains too (headless TCP).
				return &Plan{Full: true, Class: key}, key
			}
			if seen == nil {
				seen = map[model.NamespacedName]bool{}
			}
			seen[nn] = true
		}
	}
	if seen == nil {
		return nil, key
	}
	return &Plan{EDS: seen, KeepOwn: true, Class: key}, key
}

// ChangeMatters reports whether a change to k can alter what proxy p is
// sent, judged by the new World w and the scope p's configuration was
// built from.
func ChangeMatters(k model.Key, p *model.Proxy, w *model.World, old *gen.Scope) bool {
	nn := model.NamespacedName{Namespace: k.Namespace, Name: k.Name}
	switch k.Kind {
	case model.KindService:
		if k.Namespace == p.Namespace || old.Visible(nn) {
			return true
		}
		svc := w.Service(k.Namespace, k.Name)
		return svc != nil && gen.ServiceExportedTo(w, svc, p.Namespace) ||
			gen.ExtAuthzServiceChanged(w, old.World, k.Namespace, k.Name)
	case model.KindVirtualService, model.KindDestinationRule:
		return configVisible(w, k, p.Namespace) || configVisible(old.World, k, p.Namespace)
	case model.KindGateway:
		return p.Type == model.ProxyRouter
	case model.KindPod:
		return k.Namespace == p.Namespace && k.Name == p.PodName
	case model.KindSidecar:
		return k.Namespace == p.Namespace || k.Namespace == gen.RootNamespace(w)
	case model.KindPeerAuthentication:
		// It shapes the inbound configuration of the proxies of its
		// namespace (the root namespace's: of every proxy) and, through
		// auto mTLS, the clusters and endpoints of every client of its
		// namespace's services (gen/endpoint_mtls.go). istiod pushes
		// every proxy.
		return k.Namespace == p.Namespace || k.Namespace == gen.RootNamespace(w) ||
			k.Namespace == gen.RootNamespace(old.World) || old.SeesNamespace(k.Namespace)
	case model.KindAuthorizationPolicy, model.KindRequestAuthentication:
		// They shape the configuration of the workloads they select (a
		// sidecar's inbound side, a gateway's listeners: gen/authz.go,
		// gen/authn_jwt.go), before or after the change. A change of the
		// root namespace is a MeshConfig change, which pushes everyone.
		return gen.PolicyApplies(w, k, p) || gen.PolicyApplies(old.World, k, p)
	case model.KindJWKS:
		// A fetched key set is inlined where a policy names it.
		issuer, uri := model.JWKSKeyParts(k)
		return gen.JWKSNeeded(w, p, issuer, uri) || gen.JWKSNeeded(old.World, p, issuer, uri)
	case model.KindTelemetry:
		// Root and namespace Telemetry shape every listener of the
		// proxies they apply to; a selecting one also moves the proxies
		// it selects to another class (ClassKey).
		return k.Namespace == p.Namespace || k.Namespace == gen.RootNamespace(w)
	case model.KindEnvoyFilter:
		// Its patches reach the proxies it selects (whose class key
		// names it: gen/envoyfilter.go), before or after the change.
		return gen.EnvoyFilterApplies(w, k, p) || gen.EnvoyFilterApplies(old.World, k, p)
	case model.KindWasmPlugin:
		// Its filters and extension reach the proxies it selects (whose
		// class key names it: gen/wasm.go), before or after the change.
		return gen.WasmPluginApplies(w, k, p) || gen.WasmPluginApplies(old.World, k, p)
	case model.KindMeshConfig:
		return true // mesh-wide, as istiod's full push on a mesh change
	case model.KindNode:
		// A Node's locality reaches proxies through their class key (a
		// proxy on it moves class) and the endpoints of the pods on it
		// (KindEndpoints changes).
		return false
	case model.KindCAConfigMap:
		// Read only by the Gateway API translation: its effect arrives
		// as a change of the DestinationRule it derives.
		return false
	case model.KindProxyConfig, model.KindWorkloadGroup:
		// Not read by generation: the injector reads ProxyConfig when a
		// pod is created (nothing is pushed, as in Istio); WorkloadGroup
		// becomes WorkloadEntries (auto-registration), whose changes
		// arrive as such.
		return false
	}
	if k.Kind.IsIstio() && !gen.ReadsKind(k.Kind) {
		// A kind discovery does not implement (TrafficExtension) changes
		// no proxy; it is reported on the object instead.
		return false
	}
	if k.Kind.IsGatewayAPI() {
		// Generation reads the Istio Gateways and VirtualServices the
		// Store derives from them: their effect arrives as those changes.
		return false
	}
	return true
}

// ownUnchanged reports whether none of the changes can change a proxy's
// own configuration: gen.Proxy reads the proxy's pod, the Services that
// select it, PeerAuthentication, AuthorizationPolicy, Sidecar ingress and
// ServiceEntry/WorkloadEntry, never routing configuration.
func ownUnchanged(changes []model.Key) bool {
	for _, k := range changes {
		switch k.Kind {
		case model.KindVirtualService, model.KindDestinationRule, model.KindGateway, model.KindNode, model.KindCAConfigMap:
		default:
			return false
		}
	}
	return true
}

func configVisible(w *model.World, k model.Key, ns string) bool {
	c := w.Config(k.Kind, k.Namespace, k.Name)
	if c == nil {
		return false
	}
	switch o := c.Object.(type) {
	case *networkingv1.VirtualService:
		if len(o.Spec.GetHosts()) == 0 {
			// A delegate: its exportTo names its roots' namespaces; it
			// matters where a root that names it is seen.
			return gen.DelegatedTo(w, k, ns)
		}
		return gen.VirtualServiceExportedTo(w, &o.Spec, k.Namespace, ns)
	case *networkingv1.DestinationRule:
		// One with a workloadSelector applies in its own namespace only,
		// whatever its exportTo: there to the proxies it selects, which a
		// changed selection also moves to another class (ClassKey).
		return gen.DestinationRuleExportedTo(w, &o.Spec, k.Namespace, ns)
	}
	return true
}
