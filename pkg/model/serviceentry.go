package model

import (
	"net/netip"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
)

// Resolutions of a ServiceEntry, as Istio names them.
const (
	ResolutionNone          = "NONE"
	ResolutionStatic        = "STATIC"
	ResolutionDNS           = "DNS"
	ResolutionDNSRoundRobin = "DNS_ROUND_ROBIN"
)

// ServiceEntryInfo is what a Service made from a ServiceEntry host carries
// beyond a Kubernetes Service.
type ServiceEntryInfo struct {
	// Name is the ServiceEntry's name (its namespace is the Service's).
	Name string `json:"name"`
	// Resolution is NONE, STATIC, DNS or DNS_ROUND_ROBIN.
	Resolution string `json:"resolution"`
	// External is true for location MESH_EXTERNAL (the default).
	External bool `json:"external,omitempty"`
}

// A ServiceEntry becomes one Service per host, keyed by the ServiceEntry's
// namespace and the host (a host always has a dot, a Kubernetes Service
// name never does, so the keys do not collide). Its endpoints are its
// inline endpoints, or, with a workloadSelector, the WorkloadEntries and
// Pods of its namespace that the selector matches. A Kubernetes Service
// keeps its key and host name should a ServiceEntry name the same.

// rebuildServiceEntries recomputes the services and endpoints of every
// ServiceEntry when a ServiceEntry or WorkloadEntry changed, or a Pod
// changed while some ServiceEntry selects workloads. Unchanged services and
// endpoint sets keep their objects, so generators can reuse their output.
func (b *builder) rebuildServiceEntries() {
	if !b.serviceEntryInputsChanged() {
		return
	}
	svcs, eps := serviceEntryServices(b.w)
	for nn, old := range b.w.services {
		if old.Entry == nil || svcs[nn] != nil {
			continue
		}
		cow(b, "services", &b.w.services)
		cow(b, "byHost", &b.w.byHost)
		delete(b.w.services, nn)
		if b.w.byHost[old.Hostname] == old {
			delete(b.w.byHost, old.Hostname)
		}
		// A ServiceEntry's hosts are Services to their readers: their
		// changes are Service changes (the push planner matches them
		// against what generation read).
		b.changed(Key{Kind: KindService, Namespace: nn.Namespace, Name: nn.Name}, OpDelete)
	}
	for nn, svc := range svcs {
		old := b.w.services[nn]
		if old != nil && old.Entry == nil {
			continue // a Kubernetes Service holds the key
		}
		if old == nil || !reflect.DeepEqual(old, svc) {
			cow(b, "services", &b.w.services)
			cow(b, "byHost", &b.w.byHost)
			b.w.services[nn] = svc
			if h := b.w.byHost[svc.Hostname]; h == nil || h.Entry != nil {
				b.w.byHost[svc.Hostname] = svc
			}
			b.changed(Key{Kind: KindService, Namespace: nn.Namespace, Name: nn.Name}, OpUpsert)
		}
		b.setEntryEndpoints(nn, eps[nn])
	}
	for nn, old := range b.w.endpoints {
		if svcs[nn] == nil && len(old.Endpoints) > 0 && strings.Contains(nn.Name, ".") {
			b.setEntryEndpoints(nn, nil)
		}
	}
}

func (b *builder) setEntryEndpoints(nn NamespacedName, eps []*Endpoint) {
	old := b.w.endpoints[nn]
	key := Key{Kind: KindEndpoints, Namespace: nn.Namespace, Name: nn.Name}
	switch {
	case len(eps) == 0 && old == nil:
	case len(eps) == 0:
		cow(b, "endpoints", &b.w.endpoints)
		delete(b.w.endpoints, nn)
		b.changed(key, OpDelete)
	case old != nil && reflect.DeepEqual(old.Endpoints, eps):
	default:
		cow(b, "endpoints", &b.w.endpoints)
		b.w.endpoints[nn] = &ServiceEndpoints{Service: nn, Endpoints: eps}
		b.changed(key, OpUpsert)
	}
}

func (b *builder) serviceEntryInputsChanged() bool {
	pods := false
	for _, c := range b.changes {
		switch c.Key.Kind {
		case KindServiceEntry, KindWorkloadEntry:
			return true
		case KindPod, KindNode:
			pods = true
		}
	}
	if !pods {
		return false
	}
	for _, c := range b.w.configs[KindServiceEntry] {
		if se, ok := c.Object.(*networkingv1.ServiceEntry); ok && se.Spec.GetWorkloadSelector() != nil {
			return true
		}
	}
	return false
}

// serviceEntryServices converts every ServiceEntry of w.
func serviceEntryServices(w *World) (map[NamespacedName]*Service, map[NamespacedName][]*Endpoint) {
	svcs := map[NamespacedName]*Service{}
	eps := map[NamespacedName][]*Endpoint{}
	for _, c := range w.configs[KindServiceEntry] {
		se, ok := c.Object.(*networkingv1.ServiceEntry)
		if !ok {
			continue
		}
		ports := entryPorts(se.Spec.GetPorts())
		endpoints := entryEndpoints(w, c.Key, &se.Spec)
		for _, h := range se.Spec.GetHosts() {
			nn := NamespacedName{c.Key.Namespace, h}
			svcs[nn] = &Service{
				Name: h, Namespace: c.Key.Namespace, Hostname: h,
				Addresses: entryAddresses(se.Spec.GetAddresses()),
				Ports:     ports, Labels: se.Labels,
				ExportTo:        se.Spec.GetExportTo(),
				ResourceVersion: se.ResourceVersion,
				// A ServiceEntry has no spec field: its annotation only.
				TrafficDistribution: trafficDistribution(nil, se.Annotations),
				Entry: &ServiceEntryInfo{
					Name:       c.Key.Name,
					Resolution: se.Spec.GetResolution().String(),
					External:   se.Spec.GetLocation() == apinetworking.ServiceEntry_MESH_EXTERNAL,
				},
			}
			eps[nn] = endpoints
		}
	}
	return svcs, eps
}

// entryAddresses keeps the IP addresses and CIDRs: a CIDR of one address
// counts as that address, a wider one is kept in its canonical form
// (192.192.192.192/24 is 192.192.192.0/24), which listeners match as a
// prefix range, as istiod's filter chain match for a CIDR VIP does.
func entryAddresses(in []string) []string {
	var out []string
	for _, a := range in {
		if p, err := netip.ParsePrefix(a); err == nil {
			if !p.IsSingleIP() {
				out = append(out, p.Masked().String())
				continue
			}
			a = p.Addr().String()
		}
		if _, err := netip.ParseAddr(a); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func entryPorts(in []*apinetworking.ServicePort) []Port {
	out := make([]Port, 0, len(in))
	for _, p := range in {
		target := p.GetTargetPort()
		if target == 0 {
			target = p.GetNumber()
		}
		// Istio's convertPort: protocol.Parse of the protocol field alone;
		// a port without one is sniffed (ProtocolUnknown), whatever its name.
		out = append(out, Port{
			Name: p.GetName(), Port: int32(p.GetNumber()),
			TargetPort: strconv.Itoa(int(target)), Protocol: ParseProtocol(p.GetProtocol()),
		})
	}
	return out
}

// entryEndpoints lists a ServiceEntry's endpoints: inline, or selected.
func entryEndpoints(w *World, key Key, se *apinetworking.ServiceEntry) []*Endpoint {
	var out []*Endpoint
	origin := string(KindServiceEntry) + "/" + key.Namespace + "/" + key.Name
	for _, we := range se.GetEndpoints() {
		out = append(out, workloadEndpoint(we, origin))
	}
	if sel := se.GetWorkloadSelector().GetLabels(); sel != nil {
		for nn, c := range w.configs[KindWorkloadEntry] {
			we, ok := c.Object.(*networkingv1.WorkloadEntry)
			if ok && nn.Namespace == key.Namespace && selects(sel, we.Spec.GetLabels()) && workloadEntryHealthy(we) {
				out = append(out, workloadEndpoint(&we.Spec, string(KindWorkloadEntry)+"/"+nn.String()))
			}
		}
		for nn, p := range w.pods {
			if nn.Namespace == key.Namespace && len(p.IPs) > 0 && selects(sel, p.Labels) {
				loc, _ := w.PodLocality(p)
				out = append(out, &Endpoint{
					Address: p.IPs[0], Ready: p.Ready, ServiceAccount: p.ServiceAccount, Locality: loc,
					Labels: p.Labels, Pod: p.Name, Node: p.Node, Slice: string(KindPod) + "/" + nn.String(),
				})
			}
		}
	}
	sortEndpoints(out)
	return out
}

// Health checks of WorkloadEntries (istio.io/api's status names): an entry
// annotated proxy.istio.io/health-checks-enabled=true is an endpoint only
// once its Healthy condition is True, which the VM's agent reports
// (pkg/autoregister); until then, and while it is False, it is left out,
// as istiod's ServiceEntry controller leaves it out.
const (
	healthChecksAnnotation = "proxy.istio.io/health-checks-enabled"
	conditionHealthy       = "Healthy"
)

func workloadEntryHealthy(we *networkingv1.WorkloadEntry) bool {
	if on, _ := strconv.ParseBool(we.Annotations[healthChecksAnnotation]); !on {
		return true
	}
	for _, c := range we.Status.Conditions {
		if c.GetType() == conditionHealthy {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// tlsModeLabel marks a workload that runs Istio's proxy (auto mTLS).
const tlsModeLabel = "security.istio.io/tlsMode"

// workloadEntryLabels are a WorkloadEntry's labels with its TLS mode as
// istiod infers it: the entry's own security.istio.io/tlsMode label, else
// istio when it names a service account (a VM that runs Istio's agent),
// else none (plaintext). The spec's map is not changed.
func workloadEntryLabels(we *apinetworking.WorkloadEntry) map[string]string {
	labels := we.GetLabels()
	if _, ok := labels[tlsModeLabel]; ok || we.GetServiceAccount() == "" {
		return labels
	}
	out := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		out[k] = v
	}
	out[tlsModeLabel] = "istio"
	return out
}

// workloadEndpoint turns a WorkloadEntry (inline or standalone) into an
// endpoint. Its ports map service port names to the workload's ports.
func workloadEndpoint(we *apinetworking.WorkloadEntry, origin string) *Endpoint {
	ep := &Endpoint{
		Address: we.GetAddress(), Ready: true, ServiceAccount: we.GetServiceAccount(),
		Labels: workloadEntryLabels(we), Slice: origin, Weight: we.GetWeight(),
	}
	if loc := we.GetLocality(); loc != "" {
		parts := strings.SplitN(loc, "/", 3)
		ep.Locality.Region = parts[0]
		if len(parts) > 1 {
			ep.Locality.Zone = parts[1]
		}
		if len(parts) > 2 {
			ep.Locality.Subzone = parts[2]
		}
	}
	names := make([]string, 0, len(we.GetPorts()))
	for n := range we.GetPorts() {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ep.Ports = append(ep.Ports, EndpointPort{Name: n, Port: int32(we.GetPorts()[n])})
	}
	return ep
}
