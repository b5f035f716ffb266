package matrix

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// Probe is one request of the matrix.
type Probe struct {
	Request dataplane.Request
	// Origin says what the request was derived from.
	Origin string
	// Objects are the Istio objects the request's fate depends on.
	Objects []*scenario.Object
}

// Kinds lists the Istio kinds of the probe's objects.
func (p Probe) Kinds() []string {
	set := map[string]bool{}
	for _, o := range p.Objects {
		set[o.Kind] = true
	}
	return sortedSet(set)
}

// Features lists Kind/field paths of the probe's objects.
func (p Probe) Features() []string {
	set := map[string]bool{}
	for _, o := range p.Objects {
		for _, f := range Fields(o) {
			set[o.Kind+"/"+f] = true
		}
	}
	return sortedSet(set)
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// External addresses of the matrix: a host outside the mesh, and a
// principal no policy names.
const (
	externalIP     = "192.0.2.10"
	externalHost   = "external.example.org"
	deniedPeer     = "spiffe://cluster.local/ns/conformance-denied/sa/nobody"
	deniedSourceIP = "192.0.2.99"
)

type builder struct {
	in    *scenario.Input
	node  *scenario.Node
	svcs  []*service
	out   []Probe
	seen  map[string]bool
	peer  string
	srcIP string
}

// For derives the probes of a node of the input.
func For(in *scenario.Input, n *scenario.Node) []Probe {
	b := &builder{in: in, node: n, svcs: services(in), seen: map[string]bool{}}
	b.peer, b.srcIP = "spiffe://cluster.local/ns/default/sa/conformance-peer", "10.250.0.1"
	for _, o := range in.Nodes {
		if o.Kind == scenario.Sidecar && o.ID != n.ID {
			b.peer, b.srcIP = o.Principal(), o.IP
			break
		}
	}
	switch n.Kind {
	case scenario.Sidecar:
		b.outbound()
		b.inbound()
	case scenario.Gateway:
		b.gateway()
	case scenario.GRPC:
		b.grpc()
	}
	return b.out
}

func (b *builder) add(p Probe) {
	k := p.Request.String()
	if b.seen[k] {
		return
	}
	b.seen[k] = true
	b.out = append(b.out, p)
}

// outbound probes every host and port from the sidecar's application,
// and destinations outside the mesh.
func (b *builder) outbound() {
	sidecars := b.sidecarsFor()
	for _, s := range b.svcs {
		for _, p := range s.Ports {
			objs := append(b.destinationObjects(s.Host, "mesh"), sidecars...)
			dst := s.VIP
			if dst == "" && len(s.Endpoints) > 0 && s.Entry == nil {
				dst = s.Endpoints[0]
			}
			if dst == "" {
				dst = externalIP
			}
			base := dataplane.Request{Mode: dataplane.Outbound, DstIP: dst, DstPort: uint32(p.Number)}
			b.forPort(s, p, base, objs, "mesh")
		}
	}
	out := []dataplane.Request{
		{Mode: dataplane.Outbound, DstIP: externalIP, DstPort: 9999, Protocol: dataplane.TCP},
		{Mode: dataplane.Outbound, DstIP: externalIP, DstPort: 80, Authority: externalHost},
		{Mode: dataplane.Outbound, DstIP: externalIP, DstPort: 443, TLS: dataplane.SimpleTLS, SNI: externalHost, Protocol: dataplane.TCP},
	}
	for _, r := range out {
		b.add(Probe{Request: r, Origin: "a destination outside the mesh", Objects: sidecars})
	}
}

// forPort adds the probes of one host and port: HTTP requests for HTTP
// ports (and for ports of unknown protocol, which are sniffed, a TCP
// connection too), TLS for TLS ports, TCP for the rest.
func (b *builder) forPort(s *service, p port, base dataplane.Request, objs []*scenario.Object, gateway string) {
	switch {
	case httpish(p.Protocol) || p.Protocol == "":
		base.Protocol = dataplane.HTTP1
		if p.Protocol == "HTTP2" || p.Protocol == "GRPC" {
			base.Protocol = dataplane.HTTP2
		}
		if p.Protocol == "GRPC" {
			base.Headers = map[string]string{"content-type": "application/grpc"}
		}
		base.Authority = b.authority(s, p)
		b.add(Probe{Request: base, Origin: "the host's default route", Objects: objs})
		if fq := fqdnAuthority(s, p); fq != base.Authority {
			r := base
			r.Authority = fq
			b.add(Probe{Request: r, Origin: "the host by its full name", Objects: objs})
		}
		for _, vs := range vsFor(b.in, s.Host, gateway, b.node.Namespace) {
			b.fromVirtualService(vs, base, p, objs, gateway, b.names(s, p))
		}
		r := base
		r.Path = "/conformance/nomatch"
		r.Method = "DELETE"
		b.add(Probe{Request: r, Origin: "a request no match names", Objects: objs})
		if p.Protocol == "" {
			t := base
			t.Protocol, t.Authority, t.Headers = dataplane.TCP, "", nil
			b.add(Probe{Request: t, Origin: "TCP to a port without protocol", Objects: objs})
		}
	case p.Protocol == "TLS" || p.Protocol == "HTTPS":
		r := base
		r.TLS, r.Protocol, r.SNI = dataplane.SimpleTLS, dataplane.TCP, s.Host
		b.add(Probe{Request: r, Origin: "TLS from the application", Objects: objs})
		for _, vs := range vsFor(b.in, s.Host, gateway, b.node.Namespace) {
			for _, sni := range tlsSNIs(vs) {
				r.SNI = sni
				b.add(Probe{Request: r, Origin: "VirtualService " + vs.Namespace + "/" + vs.Name + " tls sniHosts", Objects: objs})
			}
		}
	default:
		r := base
		r.Protocol = dataplane.TCP
		b.add(Probe{Request: r, Origin: "a TCP connection", Objects: objs})
	}
}

// authority is the Host header an application in the node's namespace
// uses for a host: the short name in the same namespace, name.namespace
// in another; the port unless 80.
func (b *builder) authority(s *service, p port) string {
	h := s.Host
	if s.Entry == nil {
		h = s.Name
		if s.Namespace != b.node.Namespace {
			h += "." + s.Namespace
		}
	}
	if p.Number != 80 && !(s.Entry != nil && p.Number == 443) {
		h += ":" + strconv.Itoa(p.Number)
	}
	return h
}

func fqdnAuthority(s *service, p port) string {
	if p.Number == 80 {
		return s.Host
	}
	return s.Host + ":" + strconv.Itoa(p.Number)
}

// names lists the Host headers a client that resolved one of a host's
// names to its address sends: requests to an address name its host.
func (b *builder) names(s *service, p port) []string {
	var hosts []string
	if s.Entry == nil {
		hosts = []string{s.Name, s.Name + "." + s.Namespace, s.Name + "." + s.Namespace + ".svc", s.Host}
	} else {
		hosts = []string{s.Host}
	}
	var out []string
	for _, h := range hosts {
		out = append(out, h+":"+strconv.Itoa(p.Number))
		if p.Number == 80 || (s.Entry != nil && p.Number == 443) {
			out = append(out, h)
		}
	}
	return out
}

// fromVirtualService adds a request for every match of the service's
// VirtualService that applies to this port. names, when set, are the
// only Host headers the request may carry (see names).
func (b *builder) fromVirtualService(vs *scenario.Object, base dataplane.Request, p port, objs []*scenario.Object, gateway string, names []string) {
	for i, hr := range asList(vs.Spec()["http"]) {
		h, _ := hr.(map[string]any)
		for j, mi := range asList(h["match"]) {
			m, _ := mi.(map[string]any)
			if mp := toInt(m["port"]); mp != 0 && mp != p.Number {
				continue
			}
			if gws := strList(m["gateways"]); len(gws) > 0 && !containsGateway(gws, gateway, vs.Namespace) {
				continue
			}
			r, ok := satisfy(m, base, names)
			if !ok {
				continue
			}
			origin := fmt.Sprintf("VirtualService %s/%s http[%d].match[%d]", vs.Namespace, vs.Name, i, j)
			b.add(Probe{Request: r, Origin: origin, Objects: objs})
			if ic, _ := m["ignoreUriCase"].(bool); ic {
				u := r
				u.Path = strings.ToUpper(r.Path)
				b.add(Probe{Request: u, Origin: origin + " in upper case", Objects: objs})
			}
		}
	}
}

// satisfy builds a request that meets one HTTPMatchRequest; names, when
// set, are the Host headers an authority match may pick from.
func satisfy(m map[string]any, base dataplane.Request, names []string) (dataplane.Request, bool) {
	r := base
	r.Headers = map[string]string{}
	for k, v := range base.Headers {
		r.Headers[k] = v
	}
	if u, ok := m["uri"].(map[string]any); ok {
		v, ok := sampleString(u, "conformance")
		if !ok || !strings.HasPrefix(v, "/") {
			return r, false
		}
		r.Path = v
	}
	if mm, ok := m["method"].(map[string]any); ok {
		v, ok := sampleString(mm, "")
		if !ok {
			return r, false
		}
		r.Method = v
	}
	if a, ok := m["authority"].(map[string]any); ok {
		v, ok := sampleString(a, "conformance")
		if names != nil {
			v, ok = "", false
			for _, n := range names {
				if stringMatches(a, n) {
					v, ok = n, true
					break
				}
			}
		}
		if !ok {
			return r, false
		}
		r.Authority = v
	}
	hs, _ := m["headers"].(map[string]any)
	for _, name := range sortedKeys(hs) {
		sm, _ := hs[name].(map[string]any)
		v, ok := sampleString(sm, "conformance")
		if !ok {
			return r, false
		}
		r.Headers[strings.ToLower(name)] = v
	}
	qs, _ := m["queryParams"].(map[string]any)
	var q []string
	for _, name := range sortedKeys(qs) {
		sm, _ := qs[name].(map[string]any)
		v, ok := sampleString(sm, "conformance")
		if !ok {
			return r, false
		}
		q = append(q, name+"="+v)
	}
	if len(q) > 0 {
		path := r.Path
		if path == "" {
			path = "/"
		}
		r.Path = path + "?" + strings.Join(q, "&")
	}
	if len(r.Headers) == 0 {
		r.Headers = nil
	}
	return r, true
}

func containsGateway(gws []string, gateway, ns string) bool {
	for _, g := range gws {
		if g == gateway || resolveGateway(g, ns) == gateway {
			return true
		}
	}
	return false
}

// resolveGateway writes a VirtualService's gateway reference as
// namespace/name ("mesh" stays).
func resolveGateway(g, ns string) string {
	if g == "mesh" || strings.Contains(g, "/") {
		return g
	}
	if name, gns, ok := strings.Cut(g, "."); ok {
		return gns + "/" + name
	}
	return ns + "/" + g
}

func tlsSNIs(vs *scenario.Object) []string {
	var out []string
	for _, tr := range asList(vs.Spec()["tls"]) {
		t, _ := tr.(map[string]any)
		for _, mi := range asList(t["match"]) {
			m, _ := mi.(map[string]any)
			for _, s := range strList(m["sniHosts"]) {
				out = append(out, samplePattern(s))
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
