package validate

import (
	"net"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

func checkSidecar(m proto.Message, md *meta, p *problems) {
	sc := m.(*networking.Sidecar)
	if sel := sc.WorkloadSelector; sel != nil {
		checkSelectorLabels(p, "spec.workloadSelector.labels", sel.Labels)
		if len(sel.Labels) == 0 {
			p.warn("spec.workloadSelector", "sidecar: workload selector specified without labels, will be applied to all services in namespace")
		}
	}
	if len(sc.Egress) == 0 && len(sc.Ingress) == 0 && sc.OutboundTrafficPolicy == nil && sc.InboundConnectionPool == nil {
		p.add("spec", "sidecar: empty configuration provided")
		return
	}
	ports := map[uint32]bool{}
	for i, in := range sc.Ingress {
		checkIngressListener(p, at("spec.ingress", i), in, ports)
	}
	checkConnectionPool(p, "spec.inboundConnectionPool", sc.InboundConnectionPool)
	ports = map[uint32]bool{}
	sockets := map[string]bool{}
	catchAll := false
	for i, e := range sc.Egress {
		path := at("spec.egress", i)
		if e == nil {
			p.add(path, "egress listener may not be null")
			continue
		}
		if e.Port == nil {
			switch {
			case catchAll:
				p.add(path+".port", "sidecar: egress can have only one listener with empty port")
				continue
			case i == len(sc.Egress)-1:
				catchAll = true
			default:
				p.add(path+".port", "sidecar: the egress listener with empty port should be the last listener in the list")
			}
		} else {
			checkEgressPort(p, path, e)
			if e.Port.Number == 0 {
				if sockets[e.Bind] {
					p.add(path+".bind", "sidecar: unix domain socket values for listeners must be unique")
				}
				sockets[e.Bind] = true
			} else {
				if ports[e.Port.Number] {
					p.add(path+".port", "sidecar: ports on IP bound listeners must be unique")
				}
				ports[e.Port.Number] = true
			}
		}
		checkEgressHosts(p, path+".hosts", md.namespace(), e.Hosts)
	}
	checkOutboundTrafficPolicy(p, "spec.outboundTrafficPolicy", sc.OutboundTrafficPolicy)
}

func checkIngressListener(p *problems, path string, in *networking.IstioIngressListener, ports map[uint32]bool) {
	if in == nil {
		p.add(path, "sidecar: ingress may not be null")
		return
	}
	if in.Port == nil {
		p.add(path+".port", "sidecar: port is required for ingress listeners")
		return
	}
	if in.Port.TargetPort > 0 { //nolint:staticcheck // deprecated, and Istio refuses it here
		p.add(path+".port.targetPort", "targetPort has no impact on Sidecars")
	}
	checkSidecarPort(p, path+".port", in.Port, in.Bind)
	if ports[in.Port.Number] {
		p.add(path+".port", "sidecar: ports on IP bound listeners must be unique")
	}
	ports[in.Port.Number] = true
	checkDefaultEndpoint(p, path+".defaultEndpoint", in.DefaultEndpoint)
	if t := in.Tls; t != nil {
		switch {
		case len(t.SubjectAltNames) > 0:
			p.add(path+".tls", "sidecar: subjectAltNames is not supported in ingress tls")
		case t.HttpsRedirect:
			p.add(path+".tls", "sidecar: httpsRedirect is not supported")
		case t.CredentialName != "" || len(t.CredentialNames) > 0 || len(t.TlsCertificates) > 0:
			p.add(path+".tls", "sidecar: credentialName, credentialNames and tlsCertificates are not currently supported")
		}
		if t.Mode == networking.ServerTLSSettings_ISTIO_MUTUAL || t.Mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
			p.add(path+".tls.mode", "cannot set mode to %s in sidecar ingress tls", t.Mode)
		}
		if !isTLSProtocol(in.Port.Protocol) {
			p.add(path+".tls", "server cannot have TLS settings for non HTTPS/TLS ports")
		}
		checkServerTLS(p, path+".tls", t)
	}
	checkConnectionPool(p, path+".connectionPool", in.ConnectionPool)
	if in.ConnectionPool.GetHttp() != nil && !isHTTPProtocol(in.Port.Protocol) {
		p.warn(path+".connectionPool.http", "sidecar: HTTP connection pool settings are configured for port %d (%q) but its protocol is not HTTP (%s); only TCP settings will apply",
			in.Port.Number, in.Port.Name, in.Port.Protocol)
	}
}

// checkSidecarPort: an optional name, an optional protocol, a port.
func checkSidecarPort(p *problems, path string, port *networking.SidecarPort, bind string) {
	if port.Name != "" {
		checkPortName(p, path+".name", port.Name)
	}
	checkOptionalProtocol(p, path+".protocol", port.Protocol)
	checkPort(p, path+".number", port.Number)
	if bind != "" && !isIP(bind) {
		p.add(path, "bind %s is not a valid IP", bind)
	}
}

func checkEgressPort(p *problems, path string, e *networking.IstioEgressListener) {
	port := e.Port
	if port.TargetPort > 0 { //nolint:staticcheck // deprecated, and Istio refuses it here
		p.add(path+".port.targetPort", "targetPort has no impact on Sidecars")
	}
	if port.Number != 0 {
		checkSidecarPort(p, path+".port", port, e.Bind)
		return
	}
	// Port 0 is a unix domain socket listener.
	if port.Name != "" {
		checkPortName(p, path+".port.name", port.Name)
	}
	checkOptionalProtocol(p, path+".port.protocol", port.Protocol)
	if rest, ok := strings.CutPrefix(e.Bind, unixPrefix); !ok {
		p.add(path+".bind", "sidecar: ports with 0 value must have a unix domain socket bind address")
	} else if msg := unixAddressProblem(rest); msg != "" {
		p.add(path+".bind", "%s", msg)
	}
	if e.CaptureMode != networking.CaptureMode_DEFAULT && e.CaptureMode != networking.CaptureMode_NONE {
		p.add(path+".captureMode", "sidecar: captureMode must be DEFAULT/NONE for unix domain socket listeners")
	}
}

// checkDefaultEndpoint: 127.0.0.1:port, 0.0.0.0:port, [::1]:port, [::]:port,
// :port or unix://path.
func checkDefaultEndpoint(p *problems, path, ep string) {
	if ep == "" {
		return
	}
	if rest, ok := strings.CutPrefix(ep, unixPrefix); ok {
		if msg := unixAddressProblem(rest); msg != "" {
			p.add(path, "%s", msg)
		}
		return
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		p.add(path, "%v", err)
	}
	switch host {
	case "", "127.0.0.1", "0.0.0.0", "::1", "::":
	default:
		p.add(path, "sidecar: defaultEndpoint must be of form 127.0.0.1:<port>,0.0.0.0:<port>,[::1]:port,[::]:port,unix://filepath or unset")
	}
	if n, err := strconv.Atoi(port); err != nil {
		p.add(path, "sidecar: defaultEndpoint port (%s) is not a number", port)
	} else if n < 1 || n > 65535 {
		p.add(path, "port number %d must be in the range 1..65535", n)
	}
}

// checkEgressHosts: namespace/host each; Istio warns about duplicates.
func checkEgressHosts(p *problems, path, namespace string, hosts []string) {
	if len(hosts) == 0 {
		p.add(path, "sidecar: egress listener must contain at least one host")
		return
	}
	byNS := map[string]map[string]bool{}
	for j, h := range hosts {
		ns, svc, ok := strings.Cut(h, "/")
		if ok && !strings.HasPrefix(ns, "~") {
			if ns == "." {
				ns = namespace
			}
			if byNS[ns] == nil {
				byNS[ns] = map[string]bool{}
			}
			if (svc != "*" && (byNS[ns][svc] || byNS[ns]["*"])) || (svc == "*" && len(byNS[ns]) != 0) {
				p.warn(at(path, j), "duplicated egress host: %s", h)
			}
			byNS[ns][svc] = true
		}
		checkNamespacedHost(p, at(path, j), h, false)
	}
	if byNS["*"]["*"] && len(byNS) != 1 {
		p.warn(path, "`*/*` host select all resources, no other hosts can be added")
	}
}

func checkOutboundTrafficPolicy(p *problems, path string, tp *networking.OutboundTrafficPolicy) {
	if tp == nil {
		return
	}
	// ALLOW_ANY_DYNAMIC_DNS (2 in MeshConfig) is for the mesh only.
	if int32(tp.Mode) == 2 {
		p.add(path+".mode", "sidecar: ALLOW_ANY_DYNAMIC_DNS mode is only supported in MeshConfig, not in Sidecar resource")
		return
	}
	if tp.EgressProxy == nil {
		return
	}
	if tp.Mode != networking.OutboundTrafficPolicy_ALLOW_ANY {
		p.add(path+".egressProxy", "sidecar: egress_proxy must be set only with ALLOW_ANY outbound_traffic_policy mode")
		return
	}
	if msg := fqdnProblem(tp.EgressProxy.Host); msg != "" {
		p.add(path+".egressProxy.host", "%s", msg)
	}
	if tp.EgressProxy.Port == nil {
		p.add(path+".egressProxy.port", "sidecar: egress_proxy port must be non-nil")
		return
	}
	checkDestination(p, path+".egressProxy", tp.EgressProxy)
}
