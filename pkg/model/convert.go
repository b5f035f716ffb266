package model

import (
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Hostname is the DNS name of the Service ns/name.
func Hostname(name, ns, domainSuffix string) string {
	return name + "." + ns + ".svc." + domainSuffix
}

// AnnotationExportTo is Istio's annotation that limits where a Service is
// visible.
const AnnotationExportTo = "networking.istio.io/exportTo"

// LabelServiceName is the EndpointSlice label naming its Service.
const LabelServiceName = discoveryv1.LabelServiceName

// LabelLocality is Istio's older pod label that overrides a workload's
// locality, as region.zone.subzone (see LocalityLabel).
const LabelLocality = "istio-locality"

func convertService(s *corev1.Service, domainSuffix string) *Service {
	out := &Service{
		Name:      s.Name,
		Namespace: s.Namespace,
		Hostname:  Hostname(s.Name, s.Namespace, domainSuffix),
		Labels:    s.Labels,
		Selector:  s.Spec.Selector,
		Headless:  s.Spec.ClusterIP == corev1.ClusterIPNone,

		TrafficDistribution: trafficDistribution(s.Spec.TrafficDistribution, s.Annotations),
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName && s.Spec.ExternalName != "" {
		out.ExternalName = strings.TrimSuffix(s.Spec.ExternalName, ".")
	}
	for _, ip := range s.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			out.Addresses = append(out.Addresses, ip)
		}
	}
	if len(out.Addresses) == 0 && s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone {
		out.Addresses = []string{s.Spec.ClusterIP}
	}
	if v := s.Annotations[AnnotationExportTo]; v != "" {
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				out.ExportTo = append(out.ExportTo, ns)
			}
		}
	}
	for _, p := range s.Spec.Ports {
		target := p.TargetPort.String()
		if target == "0" || target == "" {
			target = strconv.Itoa(int(p.Port))
		}
		out.Ports = append(out.Ports, Port{
			Name:       p.Name,
			Port:       p.Port,
			TargetPort: target,
			Protocol:   PortProtocol(p.Port, p.Name, p.AppProtocol, p.Protocol),
		})
	}
	return out
}

// PortProtocol decides a Kubernetes Service port's protocol as Istio's
// kube.ConvertProtocol does: UDP is UDP; otherwise appProtocol alone when
// set (kubernetes.io/h2c, /ws and /wss are HTTP2, HTTP and HTTPS), else
// the port name's prefix before the first dash (grpc-web whole), either
// read by ParseProtocol. What that does not know is ProtocolUnknown,
// which Istio's sidecars sniff, except on the well-known ports of
// server-first protocols (wellKnownTCP), which are TCP: sniffing waits
// for the client to speak first.
func PortProtocol(port int32, name string, appProtocol *string, proto corev1.Protocol) Protocol {
	if proto == corev1.ProtocolUDP {
		return ProtocolUDP
	}
	if appProtocol != nil {
		name = *appProtocol
		switch name {
		case "kubernetes.io/h2c":
			return ProtocolHTTP2
		case "kubernetes.io/ws":
			return ProtocolHTTP
		case "kubernetes.io/wss":
			return ProtocolHTTPS
		}
	}
	if len(name) >= len("grpc-web") && strings.EqualFold(name[:len("grpc-web")], "grpc-web") {
		return ProtocolGRPC
	}
	if i := strings.IndexByte(name, '-'); i >= 0 {
		name = name[:i]
	}
	p := ParseProtocol(name)
	if p == ProtocolUnknown && wellKnownTCP(port) {
		return ProtocolTCP
	}
	return p
}

// wellKnownTCP reports whether port is one of the ports Istio never
// sniffs when they declare no protocol: SMTP (25), DNS (53), MySQL (3306)
// and MongoDB (27017), whose servers speak first.
func wellKnownTCP(port int32) bool {
	return port == 25 || port == 53 || port == 3306 || port == 27017
}

// ParseProtocol reads a protocol written in a field of its own (a
// ServiceEntry port's protocol, a Sidecar listener port's) as Istio's
// protocol.Parse does: case-insensitive, one of Istio's names, nothing
// taken from the port's name. An empty or unknown name is ProtocolUnknown,
// Istio's UnsupportedProtocol, whose traffic Istio sniffs (HTTP if it
// looks like HTTP, TCP otherwise). Istio's HTTP_PROXY, meant for Sidecar
// egress listeners, is not told apart here.
func ParseProtocol(s string) Protocol {
	switch strings.ToLower(s) {
	case "http":
		return ProtocolHTTP
	case "http2":
		return ProtocolHTTP2
	case "grpc", "grpc-web":
		return ProtocolGRPC
	case "https":
		return ProtocolHTTPS
	case "tls":
		return ProtocolTLS
	case "tcp":
		return ProtocolTCP
	case "udp":
		return ProtocolUDP
	case "mongo":
		return ProtocolMongo
	case "redis":
		return ProtocolRedis
	case "mysql":
		return ProtocolMySQL
	}
	return ProtocolUnknown
}

func convertPod(p *corev1.Pod) *Pod {
	out := &Pod{
		Name:           p.Name,
		Namespace:      p.Namespace,
		Labels:         p.Labels,
		ServiceAccount: p.Spec.ServiceAccountName,
		Node:           p.Spec.NodeName,
	}
	for _, ip := range p.Status.PodIPs {
		out.IPs = append(out.IPs, ip.IP)
	}
	if len(out.IPs) == 0 && p.Status.PodIP != "" {
		out.IPs = []string{p.Status.PodIP}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name != "" {
				if out.ContainerPorts == nil {
					out.ContainerPorts = map[string]int32{}
				}
				out.ContainerPorts[cp.Name] = cp.ContainerPort
			}
		}
	}
	return out
}

func convertNamespace(n *corev1.Namespace) *Namespace {
	return &Namespace{Name: n.Name, Labels: n.Labels, TrafficDistribution: trafficDistribution(nil, n.Annotations)}
}

// sliceEndpoints turns one EndpointSlice into endpoints, joined with the
// Pods they point at and their Nodes (either may be nil when not known
// yet). An endpoint's locality is its pod's as istiod reads it (the pod's
// locality label, else its Node's topology labels), else the zone the
// slice gives.
func sliceEndpoints(es *discoveryv1.EndpointSlice, pod func(ns, name string) *Pod, node func(name string) *Node) []*Endpoint {
	ports := make([]EndpointPort, 0, len(es.Ports))
	for _, p := range es.Ports {
		ep := EndpointPort{}
		if p.Name != nil {
			ep.Name = *p.Name
		}
		if p.Port != nil {
			ep.Port = *p.Port
		}
		if p.Protocol != nil {
			ep.Protocol = string(*p.Protocol)
		}
		ports = append(ports, ep)
	}
	var out []*Endpoint
	for i := range es.Endpoints {
		e := &es.Endpoints[i]
		// The API says a nil ready condition means ready.
		ready := e.Conditions.Ready == nil || *e.Conditions.Ready
		if !ready && (e.Conditions.Terminating == nil || *e.Conditions.Terminating) {
			// Unready and terminating, or unready saying nothing of it,
			// which istiod reads as terminating (endpointHealthStatus):
			// never sent, not even as unhealthy (a pod shutting down
			// counts for no health percentage). istiod keeps such an
			// endpoint as draining for persistent sessions, which
			// discovery does not implement.
			continue
		}
		var loc Locality
		if e.Zone != nil {
			loc.Zone = *e.Zone
		}
		nodeName := ""
		if e.NodeName != nil {
			nodeName = *e.NodeName
		}
		var p *Pod
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			ns := e.TargetRef.Namespace
			if ns == "" {
				ns = es.Namespace
			}
			p = pod(ns, e.TargetRef.Name)
		}
		if p != nil && p.Node != "" {
			nodeName = p.Node
		}
		switch {
		case p != nil:
			if l, ok := podLocality(p, node(nodeName)); ok {
				loc = l
			}
		case nodeName != "":
			if n := node(nodeName); n != nil && !n.Locality.IsZero() {
				loc = n.Locality
			}
		}
		for _, addr := range e.Addresses {
			ep := &Endpoint{Address: addr, Ports: ports, Ready: ready, Locality: loc, Slice: es.Name}
			if e.NodeName != nil {
				ep.Node = *e.NodeName
			}
			if p != nil {
				ep.Pod = p.Name
				ep.ServiceAccount = p.ServiceAccount
				ep.Labels = p.Labels
			}
			out = append(out, ep)
		}
	}
	return out
}

func sortEndpoints(eps []*Endpoint) {
	sort.SliceStable(eps, func(i, j int) bool {
		if eps[i].Slice != eps[j].Slice {
			return eps[i].Slice < eps[j].Slice
		}
		return eps[i].Address < eps[j].Address
	})
}
