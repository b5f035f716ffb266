package validate

import (
	"net"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// protocols Istio accepts on a Gateway server or ServiceEntry port.
var protocols = map[string]bool{
	"HTTP": true, "HTTPS": true, "GRPC": true, "GRPC-WEB": true, "HTTP2": true,
	"MONGO": true, "MYSQL": true, "REDIS": true, "TCP": true, "TLS": true, "UDP": true,
}

func checkProtocol(p *problems, path, proto string) {
	if proto == "" {
		p.add(path, "a protocol is required")
	} else if !protocols[strings.ToUpper(proto)] {
		p.add(path, "unknown protocol %q", proto)
	}
}

func checkGateway(m proto.Message, p *problems) {
	g := m.(*networking.Gateway)
	if len(g.Servers) == 0 {
		p.add("spec.servers", "a Gateway must have at least one server")
	}
	for i, s := range g.Servers {
		path := at("spec.servers", i)
		if s.Port == nil {
			p.add(path+".port", "a server needs a port")
		} else {
			checkPort(p, path+".port.number", s.Port.Number)
			checkProtocol(p, path+".port.protocol", s.Port.Protocol)
		}
		if len(s.Hosts) == 0 {
			p.add(path+".hosts", "a server must have at least one host")
		}
		for j, h := range s.Hosts {
			if strings.Contains(h, "/") {
				checkNamespacedHost(p, at(path+".hosts", j), h)
			} else {
				checkHost(p, at(path+".hosts", j), h)
			}
		}
		checkServerTLS(p, path, s)
	}
}

func checkServerTLS(p *problems, path string, s *networking.Server) {
	proto := strings.ToUpper(s.GetPort().GetProtocol())
	t := s.Tls
	if (proto == "HTTPS" || proto == "TLS") && t == nil {
		p.add(path+".tls", "a %s server needs tls settings", proto)
		return
	}
	if t == nil || t.HttpsRedirect {
		return
	}
	switch t.Mode {
	case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL:
		if t.CredentialName == "" && len(t.CredentialNames) == 0 && len(t.TlsCertificates) == 0 &&
			(t.ServerCertificate == "" || t.PrivateKey == "") {
			p.add(path+".tls", "%s needs credentialName, or serverCertificate and privateKey", t.Mode)
		}
	}
}

func checkServiceEntry(m proto.Message, p *problems) {
	se := m.(*networking.ServiceEntry)
	if len(se.Hosts) == 0 {
		p.add("spec.hosts", "a ServiceEntry must have at least one host")
	}
	for i, h := range se.Hosts {
		checkHost(p, at("spec.hosts", i), h)
		if strings.HasPrefix(h, "*") && se.Resolution == networking.ServiceEntry_DNS {
			p.add(at("spec.hosts", i), "a wildcard host cannot use DNS resolution")
		}
	}
	for i, a := range se.Addresses {
		if net.ParseIP(a) == nil {
			if _, _, err := net.ParseCIDR(a); err != nil {
				p.add(at("spec.addresses", i), "%q is neither an IP address nor a CIDR", a)
			}
		}
	}
	names := map[string]bool{}
	for i, port := range se.Ports {
		path := at("spec.ports", i)
		checkPort(p, path+".number", port.Number)
		checkProtocol(p, path+".protocol", port.Protocol)
		if port.Name != "" && names[port.Name] {
			p.add(path+".name", "port name %q is used twice", port.Name)
		}
		names[port.Name] = true
	}
	if se.Resolution == networking.ServiceEntry_STATIC && len(se.Endpoints) == 0 && se.WorkloadSelector == nil {
		p.add("spec.endpoints", "STATIC resolution needs endpoints or a workloadSelector")
	}
	for i, ep := range se.Endpoints {
		path := at("spec.endpoints", i)
		if se.Resolution == networking.ServiceEntry_STATIC && net.ParseIP(ep.Address) == nil && !strings.HasPrefix(ep.Address, "unix://") {
			p.add(path+".address", "STATIC resolution needs an IP address, not %q", ep.Address)
		}
		checkEndpointPorts(p, path+".ports", ep.Ports)
	}
}

func checkSidecar(m proto.Message, p *problems) {
	sc := m.(*networking.Sidecar)
	if len(sc.Egress) == 0 && len(sc.Ingress) == 0 && sc.OutboundTrafficPolicy == nil && sc.InboundConnectionPool == nil {
		p.add("spec", "a Sidecar must configure egress, ingress or outboundTrafficPolicy")
	}
	for i, e := range sc.Egress {
		path := at("spec.egress", i)
		if len(e.Hosts) == 0 {
			p.add(path+".hosts", "an egress listener must have at least one host")
		}
		for j, h := range e.Hosts {
			checkNamespacedHost(p, at(path+".hosts", j), h)
		}
		if e.Port != nil {
			checkPort(p, path+".port.number", e.Port.Number)
		}
	}
	for i, in := range sc.Ingress {
		path := at("spec.ingress", i)
		if in.Port == nil {
			p.add(path+".port", "an ingress listener needs a port")
			continue
		}
		checkPort(p, path+".port.number", in.Port.Number)
		checkProtocol(p, path+".port.protocol", in.Port.Protocol)
	}
}

func checkWorkloadEntry(m proto.Message, p *problems) {
	we := m.(*networking.WorkloadEntry)
	if we.Address == "" && we.Network == "" {
		p.add("spec.address", "a WorkloadEntry needs an address (or a network to reach it through)")
	} else if we.Address != "" && net.ParseIP(we.Address) == nil && !strings.HasPrefix(we.Address, "unix://") {
		checkDNSName(p, "spec.address", we.Address)
	}
	checkEndpointPorts(p, "spec.ports", we.Ports)
}

func checkEndpointPorts(p *problems, path string, ports map[string]uint32) {
	names := make([]string, 0, len(ports))
	for name := range ports {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		checkPort(p, path+"."+name, ports[name])
	}
}
