package validate

import (
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

const labelAutoallocate = "networking.istio.io/enable-autoallocate-ip"

func checkServiceEntry(m proto.Message, md *meta, p *problems) {
	se := m.(*networking.ServiceEntry)
	if sel := se.WorkloadSelector; sel != nil {
		checkSelectorLabels(p, "spec.workloadSelector.labels", sel.Labels)
		if len(sel.Labels) == 0 {
			p.warn("spec.workloadSelector", "service entry: workload selector specified without labels, will be applied to all services in namespace")
		}
		if se.Endpoints != nil {
			p.add("spec", "only one of WorkloadSelector or Endpoints is allowed in Service Entry")
		}
	}
	checkServiceEntryHosts(p, se)
	cidr := false
	for i, a := range se.Addresses {
		cidr = cidr || strings.Contains(a, "/")
		if msg := ipOrCIDRProblem(a); msg != "" {
			p.add(at("spec.addresses", i), "%s", msg)
		}
	}
	if cidr && se.Resolution != networking.ServiceEntry_NONE && se.Resolution != networking.ServiceEntry_STATIC {
		p.add("spec.addresses", "CIDR addresses are allowed only for NONE/STATIC resolution types")
	}
	ports := checkServiceEntryPorts(p, se, md)
	checkResolution(p, se, ports)
	if se.Resolution != networking.ServiceEntry_NONE && len(se.Hosts) > 1 {
		for _, port := range se.Ports {
			if port != nil && !isHTTPProtocol(port.Protocol) && !isTLSProtocol(port.Protocol) {
				p.add("spec.ports", "multiple hosts provided with non-HTTP, non-TLS ports")
				break
			}
		}
	}
	checkExportTo(p, md.namespace(), se.ExportTo, true, false)
}

func checkServiceEntryHosts(p *problems, se *networking.ServiceEntry) {
	if len(se.Hosts) == 0 {
		p.add("spec.hosts", "service entry must have at least one host")
	}
	for i, h := range se.Hosts {
		path := at("spec.hosts", i)
		if h == "*" {
			p.add(path, "hostname cannot be wildcard")
			continue
		}
		checkWildcardDomain(p, path, h)
		if se.Resolution != networking.ServiceEntry_DYNAMIC_DNS && partialWildcard(h) {
			p.warn(path, "partial wildcard %q not allowed", h)
		}
	}
}

// checkServiceEntryPorts returns the port names.
func checkServiceEntryPorts(p *problems, se *networking.ServiceEntry, md *meta) map[string]bool {
	// Without addresses, Istio allocates some unless resolution is NONE or
	// the label opts out; TCP needs an address to be told apart.
	autoAllocate := se.Resolution != networking.ServiceEntry_NONE && !strings.EqualFold(md.Labels[labelAutoallocate], "false") && len(se.Addresses) == 0
	names, numbers := map[string]bool{}, map[uint32]bool{}
	for i, port := range se.Ports {
		path := at("spec.ports", i)
		if port == nil {
			p.add(path, "service entry port may not be null")
			continue
		}
		if names[port.Name] {
			p.add(path+".name", "service entry port name %q already defined", port.Name)
		}
		if numbers[port.Number] {
			p.add(path+".number", "service entry port %d already defined", port.Number)
		}
		names[port.Name], numbers[port.Number] = true, true
		if port.TargetPort != 0 {
			checkPort(p, path+".targetPort", port.TargetPort)
		}
		if len(se.Addresses) == 0 && !autoAllocate && (port.Protocol == "" || port.Protocol == "TCP") {
			p.warn(path, "addresses are required for ports serving TCP (or unset) protocol when IP Autoallocation is not enabled")
		}
		checkPortName(p, path+".name", port.Name)
		checkOptionalProtocol(p, path+".protocol", port.Protocol)
		checkPort(p, path+".number", port.Number)
	}
	return names
}

func checkResolution(p *problems, se *networking.ServiceEntry, ports map[string]bool) {
	switch se.Resolution {
	case networking.ServiceEntry_NONE:
		if len(se.Endpoints) != 0 {
			p.add("spec.endpoints", "no endpoints should be provided for resolution type NONE")
		}
		if se.WorkloadSelector != nil {
			p.warn("spec.workloadSelector", "workloadSelector should not be set when resolution mode is NONE")
		}
	case networking.ServiceEntry_STATIC:
		for i, ep := range se.Endpoints {
			if ep == nil {
				p.add(at("spec.endpoints", i), "endpoint cannot be null")
				continue
			}
			checkEndpoint(p, at("spec.endpoints", i), ep, ports, false)
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		checkDNSResolution(p, se, ports)
	case networking.ServiceEntry_DYNAMIC_DNS:
		checkDynamicDNS(p, se)
	default:
		p.add("spec.resolution", "unsupported resolution type %s", se.Resolution)
	}
}

func checkDNSResolution(p *problems, se *networking.ServiceEntry, ports map[string]bool) {
	if len(se.Endpoints) == 0 {
		for _, h := range se.Hosts {
			if msg := fqdnProblem(h); msg != "" {
				p.add("spec.hosts", "hosts must be FQDN or contain only prefix wildcards if no endpoints are provided for resolution mode %s, %s", se.Resolution, msg)
				break
			}
		}
	}
	if se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && len(se.Endpoints) > 1 {
		p.add("spec.endpoints", "there must only be 0 or 1 endpoint for resolution mode DNS_ROUND_ROBIN")
	}
	for i, ep := range se.Endpoints {
		path := at("spec.endpoints", i)
		if ep == nil {
			p.add(path, "endpoint cannot be null")
			continue
		}
		if !isIP(ep.Address) && fqdnProblem(ep.Address) != "" {
			p.add(path+".address", "endpoint address %q is not a valid FQDN or an IP address", ep.Address)
		}
		checkLabels(p, path+".labels", ep.Labels)
		checkEndpointPorts(p, path+".ports", ep.Ports, ports)
	}
	if len(se.Addresses) > 0 && len(se.Hosts) > 1 {
		for _, port := range se.Ports {
			if port != nil && isTCPProtocol(port.Protocol) {
				p.warn("spec.hosts", "service entry can not have more than one host specified simultaneously with address and tcp port")
				break
			}
		}
	}
}

// isTCPProtocol: carried over TCP, which is every protocol but UDP (and
// one Istio does not know).
func isTCPProtocol(proto string) bool {
	return knownProtocol(proto) && !strings.EqualFold(proto, "udp")
}

func checkDynamicDNS(p *problems, se *networking.ServiceEntry) {
	for _, h := range se.Hosts {
		if !strings.HasPrefix(h, "*") {
			p.add("spec.hosts", "host must be wildcarded for resolution mode DYNAMIC_DNS")
		}
	}
	if len(se.Addresses) != 0 {
		p.add("spec.addresses", "addresses cannot be set for resolution type DYNAMIC_DNS")
	}
	if len(se.Endpoints) != 0 {
		p.add("spec.endpoints", "endpoints cannot be set for resolution type DYNAMIC_DNS")
	}
	for _, port := range se.Ports {
		switch strings.ToLower(port.GetProtocol()) {
		case "http", "tls", "grpc", "http2":
		default:
			p.add("spec.ports", "only HTTP, TLS, GRPC, and HTTP2 protocols are supported for resolution type DYNAMIC_DNS")
		}
	}
	if se.Location != networking.ServiceEntry_MESH_EXTERNAL && se.Location != networking.ServiceEntry_MESH_INTERNAL {
		p.add("spec.location", "location must be MESH_EXTERNAL or MESH_INTERNAL for resolution type DYNAMIC_DNS")
	}
}

// checkEndpoint checks a WorkloadEntry, or a ServiceEntry endpoint (whose
// ports must be the ServiceEntry's; fqdn says whether a host name may stand
// for the address).
func checkEndpoint(p *problems, path string, we *networking.WorkloadEntry, ports map[string]bool, fqdn bool) {
	addr := we.Address
	if addr == "" && we.Network == "" {
		p.add(path+".address", "address is required")
		return
	}
	if addr == "" {
		p.warn(path+".address", "address is unset with network %q", we.Network)
	}
	unix := strings.HasPrefix(addr, unixPrefix)
	switch {
	case unix:
		if msg := unixAddressProblem(strings.TrimPrefix(addr, unixPrefix)); msg != "" {
			p.add(path+".address", "%s", msg)
		}
		if len(we.Ports) != 0 {
			p.add(path+".ports", "unix endpoint %s must not include ports", addr)
		}
	case addr == "" || isIP(addr):
	case !fqdn:
		p.add(path+".address", "endpoint address %q is not a valid IP address", addr)
	case fqdnProblem(addr) != "":
		p.add(path+".address", "endpoint address %q is not a valid FQDN or an IP address", addr)
	}
	if len(addr) > 256 {
		p.add(path+".address", "at most 256 characters")
	}
	checkEndpointPorts(p, path+".ports", we.Ports, ports)
	checkLabels(p, path+".labels", we.Labels)
	if unix && ports != nil && len(ports) != 1 {
		p.add(path, "exactly 1 service port required for unix endpoints")
	}
}

func checkEndpointPorts(p *problems, path string, ports map[string]uint32, service map[string]bool) {
	for _, name := range sortedKeys(ports) {
		if service != nil && !service[name] {
			p.add(path+"."+name, "endpoint port %v is not defined by the service entry", ports[name])
		}
		checkPortName(p, path+"."+name, name)
		checkPort(p, path+"."+name, ports[name])
	}
}

func checkWorkloadEntry(m proto.Message, _ *meta, p *problems) {
	checkEndpoint(p, "spec", m.(*networking.WorkloadEntry), nil, true)
}
