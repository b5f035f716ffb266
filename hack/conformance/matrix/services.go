// Package matrix derives the requests of the suite from an input: for
// every host and port a proxy can reach, the paths, headers and methods
// the VirtualServices for it match on (and one that matches none), sent
// as the mesh would send them; for every workload, inbound requests from
// the principals its AuthorizationPolicies allow and deny; for every
// gateway server, requests for its hosts.
//
// In: a scenario.Input and one of its Nodes. Out: Probes, each a
// dataplane.Request with the Istio kinds and fields its fate depends on.
package matrix

import (
	"sort"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// service is a host a proxy may send to: a Kubernetes Service or a
// ServiceEntry host.
type service struct {
	Host      string // FQDN
	Name      string // Kubernetes name ("" for ServiceEntry hosts)
	Namespace string
	VIP       string // "" when headless or without address
	Ports     []port
	Selector  map[string]string
	// Entry is the ServiceEntry the host comes from (nil for Services).
	Entry *scenario.Object
	// Endpoints are the addresses behind the host (pods, entry endpoints).
	Endpoints []string
}

type port struct {
	Number   int
	Name     string
	Protocol string // Istio's protocol, upper case; "" when unknown
	Target   int
}

// protocolOf reads a port's protocol the way Istio does: appProtocol,
// then the name's prefix.
func protocolOf(name, appProtocol, declared string) string {
	if declared != "" {
		return strings.ToUpper(declared)
	}
	if appProtocol != "" {
		switch strings.ToLower(appProtocol) {
		case "http", "kubernetes.io/h2c":
			return map[string]string{"http": "HTTP", "kubernetes.io/h2c": "HTTP2"}[strings.ToLower(appProtocol)]
		}
		return strings.ToUpper(appProtocol)
	}
	p, _, _ := strings.Cut(strings.ToLower(name), "-")
	switch p {
	case "http", "http2", "grpc", "grpc-web", "https", "tls", "tcp", "mongo", "mysql", "redis":
		return strings.ToUpper(p)
	}
	return ""
}

func httpish(p string) bool {
	switch p {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return true
	}
	return false
}

// services indexes the input's Services and ServiceEntry hosts.
func services(in *scenario.Input) []*service {
	var out []*service
	podIPs := map[string][]string{}
	for _, es := range in.Of("EndpointSlice") {
		eps, _ := es.Doc["endpoints"].([]any)
		svc := es.Namespace + "/" + es.Labels()["kubernetes.io/service-name"]
		for _, e := range eps {
			em, _ := e.(map[string]any)
			addrs, _ := em["addresses"].([]any)
			for _, a := range addrs {
				if s, ok := a.(string); ok {
					podIPs[svc] = append(podIPs[svc], s)
				}
			}
		}
	}
	for _, o := range in.Of("Service") {
		spec := o.Spec()
		s := &service{Host: o.Name + "." + o.Namespace + ".svc.cluster.local", Name: o.Name, Namespace: o.Namespace,
			Selector: strMap(spec["selector"]), Endpoints: podIPs[o.Namespace+"/"+o.Name]}
		if ip, _ := spec["clusterIP"].(string); ip != "None" {
			s.VIP = ip
		}
		ports, _ := spec["ports"].([]any)
		for _, pi := range ports {
			p, _ := pi.(map[string]any)
			name, _ := p["name"].(string)
			ap, _ := p["appProtocol"].(string)
			s.Ports = append(s.Ports, port{Number: toInt(p["port"]), Name: name, Protocol: protocolOf(name, ap, ""), Target: toInt(p["targetPort"])})
		}
		out = append(out, s)
	}
	for _, o := range in.Of("ServiceEntry") {
		spec := o.Spec()
		hosts := strList(spec["hosts"])
		addrs := strList(spec["addresses"])
		var ps []port
		for _, pi := range asList(spec["ports"]) {
			p, _ := pi.(map[string]any)
			name, _ := p["name"].(string)
			proto, _ := p["protocol"].(string)
			ps = append(ps, port{Number: toInt(p["number"]), Name: name, Protocol: protocolOf(name, "", proto), Target: toInt(p["targetPort"])})
		}
		var eps []string
		for _, ei := range asList(spec["endpoints"]) {
			e, _ := ei.(map[string]any)
			if a, _ := e["address"].(string); a != "" {
				eps = append(eps, a)
			}
		}
		for _, h := range hosts {
			s := &service{Host: h, Namespace: o.Namespace, Ports: ps, Entry: o, Endpoints: eps}
			if len(addrs) > 0 && !strings.Contains(addrs[0], "/") {
				s.VIP = addrs[0]
			}
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

func strMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := map[string]string{}
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out
}

func strList(v any) []string {
	var out []string
	for _, x := range asList(v) {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func toInt(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case int:
		return x
	case int64:
		return int(x)
	case string:
		n := 0
		for _, r := range x {
			if r < '0' || r > '9' {
				return 0
			}
			n = n*10 + int(r-'0')
		}
		return n
	}
	return 0
}

// resolve turns a host as written in an Istio config of namespace ns into
// an FQDN (short names are relative to the config's namespace).
func resolve(h, ns string) string {
	if strings.Contains(h, ".") || h == "*" {
		return h
	}
	return h + "." + ns + ".svc.cluster.local"
}

// hostMatches reports whether a host pattern of a config (with * wildcards)
// covers host.
func hostMatches(pattern, host string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(host, pattern[1:])
	}
	return pattern == host
}
