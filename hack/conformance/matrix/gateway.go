package matrix

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// clientIP is where gateway clients connect from.
const clientIP = "203.0.113.7"

// gateway probes every server of the Gateways that select the node: the
// server's hosts and the hosts of the VirtualServices bound to it, over
// the server's protocol and TLS mode.
func (b *builder) gateway() {
	// Gateway API Gateways as the Istio Gateways they stand for.
	defer func(in *scenario.Input) { b.in = in }(b.in)
	b.in = withGatewayAPI(b.in)
	aps := b.nodePolicies("AuthorizationPolicy")
	for _, gw := range b.in.Of("Gateway") {
		sel := strMap(gw.Spec()["selector"])
		if len(sel) == 0 || !scenario.SelectorMatches(sel, b.node.Labels) {
			continue
		}
		name := gw.Namespace + "/" + gw.Name
		for i, si := range asList(gw.Spec()["servers"]) {
			s := mapOf(si)
			for _, h := range b.serverHosts(s, name) {
				b.server(gw, name, i, s, h, aps)
			}
		}
	}
}

// serverHosts lists the hosts to ask a server for: a name each of its
// host patterns matches, and the hosts of VirtualServices bound to the
// gateway that the patterns cover.
func (b *builder) serverHosts(s map[string]any, gateway string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(h string) {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	var patterns []string
	for _, h := range strList(s["hosts"]) {
		if _, host, ok := strings.Cut(h, "/"); ok {
			h = host
		}
		patterns = append(patterns, h)
		add(sampleHost(h))
	}
	for _, vs := range b.in.Of("VirtualService") {
		if !containsGateway(strList(vs.Spec()["gateways"]), gateway, vs.Namespace) {
			continue
		}
		for _, h := range strList(vs.Spec()["hosts"]) {
			for _, p := range patterns {
				if hostMatches(p, h) && !strings.Contains(h, "*") {
					add(h)
				}
			}
		}
	}
	return out
}

func sampleHost(h string) string {
	switch {
	case h == "*":
		return "www.example.com"
	case strings.HasPrefix(h, "*"):
		return "www" + h[1:]
	}
	return h
}

// server adds the probes of one gateway server and host.
func (b *builder) server(gw *scenario.Object, gateway string, i int, s map[string]any, host string, aps []*scenario.Object) {
	pm := mapOf(s["port"])
	num := toInt(pm["number"])
	proto := strings.ToUpper(str(pm["protocol"]))
	tls := mapOf(s["tls"])
	mode := strings.ToUpper(str(tls["mode"]))
	objs := append([]*scenario.Object{gw}, b.destinationObjects(host, gateway)...)
	objs = append(objs, aps...)
	base := dataplane.Request{Mode: dataplane.Gateway, DstIP: b.node.IP, DstPort: uint32(b.gatewayPort(num)), SrcIP: clientIP}
	origin := fmt.Sprintf("Gateway %s servers[%d] host %s", gateway, i, host)
	authority := host
	if num != 80 && num != 443 {
		authority += ":" + strconv.Itoa(num)
	}
	p := port{Number: num, Protocol: proto}
	switch {
	case proto == "HTTP" || proto == "HTTP2" || proto == "GRPC" || ((proto == "HTTPS" || proto == "TLS") && terminated(mode)):
		r := base
		r.Protocol = dataplane.HTTP1
		if proto == "HTTP2" || proto == "GRPC" {
			r.Protocol = dataplane.HTTP2
		}
		r.Authority = authority
		if proto == "HTTPS" || proto == "TLS" {
			r.TLS, r.SNI = dataplane.SimpleTLS, host
			switch mode {
			case "MUTUAL", "OPTIONAL_MUTUAL":
				r.TLS = dataplane.MutualTLS
			case "ISTIO_MUTUAL":
				r.TLS, r.Peer = dataplane.MutualTLS, b.peer
			}
		}
		if proto == "TLS" {
			r.Protocol, r.Authority = dataplane.TCP, ""
			b.add(Probe{Request: r, Origin: origin, Objects: objs})
			return
		}
		b.add(Probe{Request: r, Origin: origin, Objects: objs})
		for _, vs := range vsFor(b.in, host, gateway, b.node.Namespace) {
			b.fromVirtualService(vs, r, p, objs, gateway, nil)
		}
		n := r
		n.Path, n.Method = "/conformance/nomatch", "DELETE"
		b.add(Probe{Request: n, Origin: origin + ", a path no match names", Objects: objs})
		u := r
		u.Authority, u.SNI = "unknown.example.org", "unknown.example.org"
		if r.TLS == dataplane.Plaintext {
			u.SNI = ""
		}
		b.add(Probe{Request: u, Origin: origin + ", a host no server names", Objects: objs})
	case mode == "PASSTHROUGH" || mode == "AUTO_PASSTHROUGH":
		r := base
		r.TLS, r.Protocol, r.SNI = dataplane.SimpleTLS, dataplane.TCP, host
		if mode == "AUTO_PASSTHROUGH" {
			b.autoPassthrough(r, origin, objs)
			return
		}
		b.add(Probe{Request: r, Origin: origin, Objects: objs})
		for _, vs := range vsFor(b.in, host, gateway, b.node.Namespace) {
			for _, sni := range tlsSNIs(vs) {
				r.SNI = sni
				b.add(Probe{Request: r, Origin: origin + " tls sniHosts", Objects: objs})
			}
		}
	default:
		r := base
		r.Protocol = dataplane.TCP
		b.add(Probe{Request: r, Origin: origin, Objects: objs})
	}
}

func terminated(mode string) bool {
	switch mode {
	case "", "SIMPLE", "MUTUAL", "OPTIONAL_MUTUAL", "ISTIO_MUTUAL":
		return true
	}
	return false
}

// autoPassthrough probes an AUTO_PASSTHROUGH server as a sidecar of
// another network would: mTLS with the SNI Istio names a cluster by.
func (b *builder) autoPassthrough(base dataplane.Request, origin string, objs []*scenario.Object) {
	for _, s := range b.svcs {
		if s.Entry != nil {
			continue
		}
		for _, p := range s.Ports {
			r := base
			r.TLS, r.Peer = dataplane.MutualTLS, b.peer
			r.SNI = fmt.Sprintf("outbound_.%d_._.%s", p.Number, s.Host)
			b.add(Probe{Request: r, Origin: origin + " for " + s.Host, Objects: objs})
		}
	}
}

// gatewayPort is the gateway pod's port behind a Gateway server port: the
// target port of a Service in front of the gateway, else the port.
func (b *builder) gatewayPort(n int) int {
	for _, s := range b.svcs {
		if s.Entry != nil || s.Namespace != b.node.Namespace || len(s.Selector) == 0 || !scenario.SelectorMatches(s.Selector, b.node.Labels) {
			continue
		}
		for _, p := range s.Ports {
			if p.Number == n && p.Target != 0 {
				return p.Target
			}
		}
	}
	return n
}

// GRPCTargets lists what the input's proxyless gRPC clients dial: every
// gRPC or HTTP/2 port of every host, as HOST:PORT.
func GRPCTargets(in *scenario.Input) []string {
	var out []string
	for _, s := range services(in) {
		for _, p := range s.Ports {
			if p.Protocol == "GRPC" || p.Protocol == "HTTP2" {
				out = append(out, s.Host+":"+strconv.Itoa(p.Number))
			}
		}
	}
	return out
}

// grpc probes every gRPC target of the input from the node's client.
func (b *builder) grpc() {
	for _, s := range b.svcs {
		for _, p := range s.Ports {
			if p.Protocol != "GRPC" && p.Protocol != "HTTP2" {
				continue
			}
			target := s.Host + ":" + strconv.Itoa(p.Number)
			objs := b.destinationObjects(s.Host, "mesh")
			base := dataplane.Request{Mode: dataplane.GRPC, Target: target, Protocol: dataplane.HTTP2,
				Path: "/grpc.testing.TestService/UnaryCall", Authority: target}
			b.add(Probe{Request: base, Origin: "an RPC to " + target, Objects: objs})
			for _, vs := range vsFor(b.in, s.Host, "mesh", b.node.Namespace) {
				b.fromVirtualService(vs, base, p, objs, "mesh", nil)
			}
		}
	}
}
