package validate

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Istio's rules for names, hosts, addresses and ports, as its validation
// applies them. Istio's DNS labels, unlike Kubernetes', may hold capitals.
var (
	dnsLabel      = regexp.MustCompile(`^[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
	wildcardLabel = regexp.MustCompile(`^(\*|(\*|\*-)?[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)$`)
	labelKey      = regexp.MustCompile(`^([a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)*/)?((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)
	labelValue    = regexp.MustCompile(`^((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
)

func isDNS1123Label(s string) bool { return len(s) <= 63 && dnsLabel.MatchString(s) }

// dns1123Subdomain is what Kubernetes says of an object name, "" if valid.
func dns1123Subdomain(name string) string {
	return strings.Join(validation.IsDNS1123Subdomain(name), "; ")
}

// fqdnProblem: at most 255 characters, dot-separated DNS labels (a final
// dot allowed), a top-level label that is not all digits.
func fqdnProblem(name string) string {
	if p := domainPreconditions(name); p != "" {
		return p
	}
	return labelsProblem(name)
}

func domainPreconditions(name string) string {
	switch {
	case len(name) > 255:
		return fmt.Sprintf("domain name %q too long (max 255)", name)
	case name == "":
		return "empty domain name not allowed"
	}
	return ""
}

func labelsProblem(domain string) string {
	parts := strings.Split(domain, ".")
	if _, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
		return fmt.Sprintf("domain name %q invalid (top level domain %q cannot be all-numeric)", domain, parts[len(parts)-1])
	}
	for i, l := range parts {
		if i == len(parts)-1 && l == "" {
			return ""
		}
		if !isDNS1123Label(l) {
			return fmt.Sprintf("domain name %q invalid (label %q invalid)", domain, l)
		}
	}
	return ""
}

// wildcardDomainProblem is fqdnProblem, but the first label may be "*",
// or start with "*" or "*-".
func wildcardDomainProblem(domain string) string {
	if p := domainPreconditions(domain); p != "" {
		return p
	}
	first, rest, more := strings.Cut(domain, ".")
	if len(first) > 63 || !wildcardLabel.MatchString(first) {
		return fmt.Sprintf("domain name %q invalid (label %q invalid)", domain, first)
	}
	if more {
		return labelsProblem(rest)
	}
	return ""
}

func checkWildcardDomain(p *problems, path, domain string) {
	if msg := wildcardDomainProblem(domain); msg != "" {
		p.add(path, "%s", msg)
	}
}

// partialWildcard: a "*" anywhere but as the whole host or its "*." prefix.
func partialWildcard(host string) bool {
	return strings.Contains(host, "*") && host != "*" && !strings.HasPrefix(host, "*.")
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// ipOrCIDRProblem: an IP address, or a CIDR block if it has one "/".
func ipOrCIDRProblem(s string) string {
	if strings.Count(s, "/") == 1 {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Sprintf("%s is not a valid CIDR block", s)
		}
		return ""
	}
	if !isIP(s) {
		return fmt.Sprintf("%s is not a valid IP", s)
	}
	return ""
}

// unixAddressProblem: an abstract socket (@name) or an absolute path that
// is not a directory.
func unixAddressProblem(addr string) string {
	switch {
	case addr == "":
		return "unix address must not be empty"
	case strings.HasPrefix(addr, "@"):
		return ""
	case !path.IsAbs(addr) || strings.HasSuffix(addr, "/"):
		return fmt.Sprintf("unix address %s is not an absolute path to a file", addr)
	}
	return ""
}

const unixPrefix = "unix://"

func checkPort(p *problems, path string, port uint32) {
	if port < 1 || port > 65535 {
		p.add(path, "port number %d must be in the range 1..65535", port)
	}
}

func checkPortName(p *problems, path, name string) {
	if !isDNS1123Label(name) {
		p.add(path, "invalid port name: %q", name)
	}
}

// protocols Istio knows (matched without regard to case); "" means
// "sniff it", which Sidecar and ServiceEntry ports allow.
var protocols = map[string]bool{
	"tcp": true, "udp": true, "grpc": true, "grpc-web": true, "http": true, "http_proxy": true,
	"http2": true, "https": true, "tls": true, "mongo": true, "redis": true, "mysql": true,
}

func knownProtocol(proto string) bool { return protocols[strings.ToLower(proto)] }

func checkOptionalProtocol(p *problems, path, proto string) {
	if proto != "" && !knownProtocol(proto) {
		p.add(path, "unsupported protocol: %s", proto)
	}
}

func isHTTPProtocol(proto string) bool {
	switch strings.ToLower(proto) {
	case "http", "http2", "grpc", "grpc-web", "http_proxy":
		return true
	}
	return false
}

func isTLSProtocol(proto string) bool {
	switch strings.ToLower(proto) {
	case "https", "tls":
		return true
	}
	return false
}

// checkLabels applies Kubernetes' label syntax (keys may have a DNS prefix).
func checkLabels(p *problems, path string, labels map[string]string) {
	for _, k := range sortedKeys(labels) {
		m := labelKey.FindStringSubmatch(k)
		switch {
		case m == nil:
			p.add(path, "invalid label key: %q", k)
		case len(m[1]) > 254:
			p.add(path, "invalid label key: %q (DNS prefix is too long)", k)
		case len(m[2]) > 63:
			p.add(path, "invalid label key: %q (name is too long)", k)
		}
		if !labelValue.MatchString(labels[k]) {
			p.add(path, "invalid label value: %q", labels[k])
		}
	}
}

// checkSelectorLabels: neither keys nor values may be empty keys or hold
// "*". It reports whether the selector has labels.
// It is the EnvoyFilter selector's rules (checkAlphaSelector) plus a
// length limit on values.
func checkSelectorLabels(p *problems, path string, labels map[string]string) {
	checkAlphaSelector(p, path, labels)
	for _, k := range sortedKeys(labels) {
		if v := labels[k]; len(v) > 63 {
			p.add(path, "label value %q is longer than 63 characters", v)
		}
	}
}

// checkExportTo: ".", "*", "~" (ServiceEntry only) or namespaces, no
// duplicates, "*" and "~" alone.
func checkExportTo(p *problems, namespace string, exportTo []string, serviceEntry, drSelector bool) {
	if len(exportTo) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, e := range exportTo {
		key := e
		if e == "." {
			key = namespace
		}
		switch {
		case seen[key] && key != e:
			p.add("spec.exportTo", "duplicate entries in exportTo: . and current namespace %s", namespace)
		case seen[key]:
			p.add("spec.exportTo", "duplicate entries in exportTo for entry %s", e)
		case serviceEntry && e == "~", key == "*", key != "~" && isDNS1123Label(key):
			seen[key] = true
		case key == "~":
			p.add("spec.exportTo", "exportTo ~ (none) is not allowed for Istio configuration objects")
		default:
			p.add("spec.exportTo", "exportTo %q: only ., * or a valid DNS-1123 label is allowed", e)
		}
	}
	if drSelector && len(seen) > 0 {
		if !seen[namespace] {
			p.add("spec.exportTo", "destination rule with workload selector cannot have exportTo beyond current namespace")
		} else if len(seen) > 1 {
			p.add("spec.exportTo", "destination rule with workload selector cannot have multiple entries in exportTo")
		}
	}
	if seen["*"] && len(exportTo) > 1 {
		p.add("spec.exportTo", "cannot have both public (*) and non-public exportTo values for a resource")
	}
	if seen["~"] && len(exportTo) > 1 {
		p.add("spec.exportTo", "cannot export service entry to no one (~) and someone")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
