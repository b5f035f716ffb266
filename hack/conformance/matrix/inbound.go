package matrix

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// inboundPort is a port of the node's workload that a Service (or the
// Sidecar's ingress) exposes.
type inboundPort struct {
	Target   int
	Protocol string
	Service  string // the Service's name, for the Host header
	Port     int    // the Service port
}

// inboundPorts lists the workload's ports that Services selecting it
// expose, by target port, and the ports its Sidecar's ingress names.
func (b *builder) inboundPorts() []inboundPort {
	seen := map[int]bool{}
	var out []inboundPort
	for _, s := range b.svcs {
		if s.Entry != nil || s.Namespace != b.node.Namespace || len(s.Selector) == 0 || !scenario.SelectorMatches(s.Selector, b.node.Labels) {
			continue
		}
		for _, p := range s.Ports {
			t := b.targetPort(s, p)
			if t == 0 || seen[t] {
				continue
			}
			seen[t] = true
			out = append(out, inboundPort{Target: t, Protocol: p.Protocol, Service: s.Name, Port: p.Number})
		}
	}
	for _, sc := range b.sidecarsFor() {
		for _, ii := range asList(sc.Spec()["ingress"]) {
			pm := mapOf(mapOf(ii)["port"])
			n := toInt(pm["number"])
			if n == 0 || seen[n] {
				continue
			}
			seen[n] = true
			out = append(out, inboundPort{Target: n, Protocol: protocolOf(str(pm["name"]), "", str(pm["protocol"])), Port: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}

// targetPort is the pod port behind a Service port, as the
// EndpointSlices that hold the node's address say.
func (b *builder) targetPort(s *service, p port) int {
	for _, es := range b.in.Of("EndpointSlice") {
		if es.Namespace != s.Namespace || es.Labels()["kubernetes.io/service-name"] != s.Name || !sliceHolds(es, b.node.IP) {
			continue
		}
		for _, pi := range asList(es.Doc["ports"]) {
			ep := mapOf(pi)
			if str(ep["name"]) == p.Name {
				return toInt(ep["port"])
			}
		}
	}
	return 0
}

func sliceHolds(es *scenario.Object, ip string) bool {
	for _, e := range asList(es.Doc["endpoints"]) {
		for _, a := range strList(mapOf(e)["addresses"]) {
			if a == ip {
				return true
			}
		}
	}
	return false
}

// inbound probes the workload's ports: mTLS from a mesh peer, plaintext
// from outside the mesh, and for every AuthorizationPolicy rule a request
// that meets it, plus one from a principal no policy names.
func (b *builder) inbound() {
	var objs []*scenario.Object
	for _, kind := range []string{"PeerAuthentication", "AuthorizationPolicy", "RequestAuthentication"} {
		objs = append(objs, b.nodePolicies(kind)...)
	}
	objs = append(objs, b.sidecarsFor()...)
	for _, ip := range b.inboundPorts() {
		base := dataplane.Request{Mode: dataplane.Inbound, DstIP: b.node.IP, DstPort: uint32(ip.Target), SrcIP: b.srcIP, Protocol: dataplane.TCP}
		if httpish(ip.Protocol) || ip.Protocol == "" {
			base.Protocol = dataplane.HTTP1
			if ip.Protocol == "HTTP2" || ip.Protocol == "GRPC" {
				base.Protocol = dataplane.HTTP2
			}
			base.Authority = fmt.Sprintf("%s:%d", ip.Service, ip.Port)
		}
		mtls := base
		mtls.TLS, mtls.Peer = dataplane.MutualTLS, b.peer
		b.add(Probe{Request: mtls, Origin: "mTLS from a mesh peer", Objects: objs})
		b.add(Probe{Request: base, Origin: "plaintext from outside the mesh", Objects: objs})
		for _, ap := range b.nodePolicies("AuthorizationPolicy") {
			for i, ri := range asList(ap.Spec()["rules"]) {
				r, ok := authzRequest(mapOf(ri), mtls)
				if ok {
					b.add(Probe{Request: r, Origin: fmt.Sprintf("AuthorizationPolicy %s/%s rules[%d]", ap.Namespace, ap.Name, i), Objects: objs})
				}
			}
		}
		denied := mtls
		denied.Peer, denied.SrcIP = deniedPeer, deniedSourceIP
		if denied.IsHTTP() {
			denied.Path, denied.Method = "/conformance/denied", "PATCH"
		}
		b.add(Probe{Request: denied, Origin: "a principal no policy names", Objects: objs})
	}
}

// authzRequest builds a request that meets an AuthorizationPolicy rule's
// first source, first operation and conditions; ok is false when the
// rule cannot apply to the request's port.
func authzRequest(rule map[string]any, base dataplane.Request) (dataplane.Request, bool) {
	r := base
	r.Headers = map[string]string{}
	for k, v := range base.Headers {
		r.Headers[k] = v
	}
	if src := mapOf(mapOf(first(rule["from"]))["source"]); src != nil {
		if p := strList(src["principals"]); len(p) > 0 && p[0] != "*" {
			r.Peer = "spiffe://" + samplePattern(p[0])
		} else if ns := strList(src["namespaces"]); len(ns) > 0 && ns[0] != "*" {
			r.Peer = "spiffe://cluster.local/ns/" + samplePattern(ns[0]) + "/sa/default"
		}
		for _, key := range []string{"ipBlocks", "remoteIpBlocks"} {
			if ips := strList(src[key]); len(ips) > 0 {
				r.SrcIP = firstAddress(ips[0])
			}
		}
	}
	if op := mapOf(mapOf(first(rule["to"]))["operation"]); op != nil {
		if ports := strList(op["ports"]); len(ports) > 0 && !contains(ports, fmt.Sprint(base.DstPort)) {
			return r, false
		}
		if r.IsHTTP() {
			if h := strList(op["hosts"]); len(h) > 0 {
				r.Authority = samplePattern(h[0])
			}
			if m := strList(op["methods"]); len(m) > 0 {
				r.Method = samplePattern(m[0])
			}
			if p := strList(op["paths"]); len(p) > 0 {
				r.Path = samplePath(p[0])
			}
		}
	}
	for _, ci := range asList(rule["when"]) {
		c := mapOf(ci)
		vals := strList(c["values"])
		if len(vals) == 0 {
			continue
		}
		key, v := str(c["key"]), vals[0]
		switch {
		case strings.HasPrefix(key, "request.headers[") && r.IsHTTP():
			r.Headers[strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(key, "request.headers["), "]"))] = samplePattern(v)
		case key == "source.ip" || key == "remote.ip":
			r.SrcIP = firstAddress(v)
		case key == "source.namespace":
			r.Peer = "spiffe://cluster.local/ns/" + samplePattern(v) + "/sa/default"
		case key == "source.principal":
			r.Peer = "spiffe://" + samplePattern(v)
		case key == "destination.port":
			if !contains(vals, fmt.Sprint(base.DstPort)) {
				return r, false
			}
		case key == "connection.sni":
			r.SNI = samplePattern(v)
		}
	}
	if len(r.Headers) == 0 {
		r.Headers = nil
	}
	return r, true
}

func first(v any) any {
	if l := asList(v); len(l) > 0 {
		return l[0]
	}
	return nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// firstAddress is an address in a CIDR (the first host), or the address.
func firstAddress(s string) string {
	if p, err := netip.ParsePrefix(s); err == nil {
		a := p.Masked().Addr()
		if p.Bits() < a.BitLen() {
			a = a.Next()
		}
		return a.String()
	}
	return s
}
