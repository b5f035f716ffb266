package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
)

// Class is a difference shared by cases: the same differing facts in one
// aspect, addresses and names generalised.
type Class struct {
	ID     string
	Aspect string
	Facts  []string
	Cases  []*Case
	// Reason is the class's explanation (explained.txt), if any.
	Reason string
}

// classIDPattern is the form of a class ID: D and six hex digits.
var classIDPattern = regexp.MustCompile(`^D[0-9a-f]{6}$`)

// classID names a class by a digest of its aspect and facts, so that the
// same difference keeps its ID while others come and go.
func classID(aspect string, facts []string) string {
	sum := sha256.Sum256([]byte(aspect + "\n" + strings.Join(facts, "\n")))
	return "D" + hex.EncodeToString(sum[:3])
}

var generalise = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`^upstream\[\d+\] `), "upstream "},
	{regexp.MustCompile(`outbound_\.\d+_\.[^.]*_\.[^ \]]+`), "outbound_.PORT_.SUBSET_.HOST"},
	{regexp.MustCompile(`spiffe://[^ \]]+`), "spiffe://ID"},
	{regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(:\d+)?\b`), "IP"},
}

func classFact(f string) string {
	sign, rest := f[:2], f[2:]
	for _, g := range generalise {
		rest = g.re.ReplaceAllString(rest, g.with)
	}
	return sign + rest
}

// Classes groups the differences of the cases that differ (not those
// discovery reports unsupported) and names them (classID).
func Classes(cases []Case) map[string]*Class {
	byKey := map[string]*Class{}
	for i := range cases {
		c := &cases[i]
		if c.Verdict == NotSupported {
			continue // listed by what discovery reports, not by class
		}
		for _, asp := range dataplane.Aspects {
			d := c.Diff[asp]
			if len(d) == 0 {
				continue
			}
			facts := classFacts(d)
			key := asp + "\x00" + strings.Join(facts, "\x00")
			cl := byKey[key]
			if cl == nil {
				cl = &Class{Aspect: asp, Facts: facts}
				byKey[key] = cl
			}
			cl.Cases = append(cl.Cases, c)
		}
	}
	for _, cl := range byKey {
		cl.ID = classID(cl.Aspect, cl.Facts)
	}
	return byKey
}

// classOf returns the class of a case's difference in one aspect.
func classOf(classes map[string]*Class, c *Case, aspect string) *Class {
	return classes[aspect+"\x00"+strings.Join(classFacts(c.Diff[aspect]), "\x00")]
}

// classFacts generalises a difference for its class: when the outcome
// differs, the outcome, status and reason say it all.
func classFacts(d []string) []string {
	coarse := false
	for _, f := range d {
		if strings.HasPrefix(f[2:], "outcome:") {
			coarse = true
		}
	}
	set := map[string]bool{}
	for _, f := range d {
		rest := f[2:]
		if coarse && !strings.HasPrefix(rest, "outcome:") && !strings.HasPrefix(rest, "status:") &&
			!strings.HasPrefix(rest, "reason:") && !strings.HasPrefix(rest, "reset:") {
			continue
		}
		set[classFact(f)] = true
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

func sortedClasses(classes map[string]*Class) []*Class {
	var out []*Class
	for _, c := range classes {
		out = append(out, c)
	}
	aspectRank := map[string]int{}
	for i, a := range dataplane.Aspects {
		aspectRank[a] = i
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Aspect != b.Aspect {
			return aspectRank[a.Aspect] < aspectRank[b.Aspect]
		}
		if len(a.Cases) != len(b.Cases) {
			return len(a.Cases) > len(b.Cases)
		}
		return strings.Join(a.Facts, "\n") < strings.Join(b.Facts, "\n")
	})
	return out
}

// tally counts cases overall and per aspect.
type tally struct {
	all     Counts
	aspects map[string]*Counts
}

func newTally() *tally {
	t := &tally{aspects: map[string]*Counts{}}
	for _, a := range dataplane.Aspects {
		t.aspects[a] = &Counts{}
	}
	return t
}

func (t *tally) add(c *Case) {
	t.all.Add(c.Verdict)
	for _, a := range dataplane.Aspects {
		t.aspects[a].Add(c.AspectVerdict(a))
	}
}

func (t *tally) row(label string) string {
	cells := []string{label, fmt.Sprint(t.all.Total()), fmt.Sprint(t.all.Pass), fmt.Sprint(t.all.Explained), fmt.Sprint(t.all.Differs), fmt.Sprint(t.all.NotSupported), t.all.Rate()}
	for _, a := range dataplane.Aspects {
		cells = append(cells, t.aspects[a].Rate())
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

func tableHeader(first string) string {
	h := "| " + first + " | cases | pass | explained | differs | not supported | pass rate |"
	sep := "|---|---:|---:|---:|---:|---:|---:|"
	for _, a := range dataplane.Aspects {
		h += " " + a + " |"
		sep += "---:|"
	}
	return h + "\n" + sep
}

// ReportOptions say what the report is about.
type ReportOptions struct {
	IstioVersion string
	Command      string
}

// Report renders CONFORMANCE.md.
func Report(cases []Case, classes map[string]*Class, inputs []InputResult, opts ReportOptions) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Conformance with istiod")
	w("")
	w("Generated by `%s`; do not edit. The test fails when a case's aspect that passed here starts to differ (the ratchet, `cases.txt`), and when this file is stale.", opts.Command)
	w("")
	w("For every input of the corpus, istiod's own config generation (istio.io/istio %s, in process) and discovery's generator (`pkg/xds/gen`) build the configuration of the same proxies; for every request of the matrix, `hack/conformance/dataplane` decides what Envoy (or grpc-go, for proxyless gRPC) would do with each configuration. A case is an (input, proxy, request); it passes when both decisions are the same behaviour, resource names aside. Each decision is compared in five aspects:", opts.IstioVersion)
	w("")
	w("- **routing**: outcome (forwarded, local reply, reset), status, redirect location, upstream hosts and their weights, rewritten path and authority, header changes;")
	w("- **security**: TLS the proxy terminates (certificate, client certificate, CA, ALPN, versions, ciphers, client SANs) and originates per upstream host (SNI, certificate, CA, SANs, ALPN, versions), JWT and ext_authz filters; an RBAC denial is a routing outcome;")
	w("- **route policy**: timeout, retries, faults, mirrors, CORS, hash policy, upgrades;")
	w("- **cluster policy**: load balancer and connection settings (limits, outlier detection, timeouts, upstream protocol, DNS);")
	w("- **connection**: how the HTTP connection manager or TCP proxy reads the connection (codec, path normalisation, remote address).")
	w("")
	w("A difference in a case whose request depends on a field or kind discovery reports it does not support (`UnsupportedFields`, `EnvoyRefusals`, kinds it does not read) counts as *not supported*, not as *differs*. A difference whose class `hack/conformance/explained.txt` gives a reason for (a choice discovery makes on purpose, or a corner the comparison cannot settle) counts as *explained*; the reason is next to its class below. Differences no reason explains are marked **unexplained** and count as *differs*; the test fails on an unexplained difference and on a reason whose class is gone. The pass rate counts passes only.")
	w("")
	inputsOK := 0
	for _, in := range inputs {
		if in.Error == "" {
			inputsOK++
		}
	}
	var kinds []string
	nodeKinds := map[string]bool{}
	for _, c := range cases {
		nodeKinds[string(c.NodeKind)] = true
	}
	for k := range nodeKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	w("## Summary")
	w("")
	w("%d inputs (%d compared), %d cases, proxies: %s.", len(inputs), inputsOK, len(cases), strings.Join(kinds, ", "))
	w("")
	w("%s", tableHeader(""))
	total := newTally()
	for i := range cases {
		total.add(&cases[i])
	}
	w("%s", total.row("all"))
	w("")
	w("Pass rates per aspect count a case as passing the aspect when its decisions agree in that aspect.")
	w("")
	section(&b, "By source", "source", cases, func(c *Case) []string { return []string{c.Source} })
	section(&b, "By proxy and mode", "proxy / mode", cases, func(c *Case) []string {
		return []string{string(c.NodeKind) + " / " + string(c.Request.Mode)}
	})
	section(&b, "By Istio kind", "kind", cases, func(c *Case) []string {
		if len(c.Kinds) == 0 {
			return []string{"(Kubernetes objects only)"}
		}
		return c.Kinds
	})
	section(&b, "By feature", "feature (kind/field)", cases, func(c *Case) []string { return c.Features })
	writeClasses(&b, classes)
	writeDifferences(&b, cases, classes)
	writeNotSupported(&b, cases)
	writeInputs(&b, inputs)
	writeNormalisations(&b)
	return b.String()
}

func section(b *strings.Builder, title, first string, cases []Case, keys func(*Case) []string) {
	groups := map[string]*tally{}
	for i := range cases {
		for _, k := range keys(&cases[i]) {
			if groups[k] == nil {
				groups[k] = newTally()
			}
			groups[k].add(&cases[i])
		}
	}
	fmt.Fprintf(b, "## %s\n\n%s\n", title, tableHeader(first))
	var names []string
	for k := range groups {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintln(b, groups[k].row(strings.ReplaceAll(k, "|", "\\|")))
	}
	fmt.Fprintln(b)
}

func writeClasses(b *strings.Builder, classes map[string]*Class) {
	fmt.Fprintf(b, "## Difference classes\n\n")
	fmt.Fprintf(b, "Cases that differ in the same facts of one aspect, with addresses and names generalised (IP, HOST, spiffe://ID). `-` is istiod's configuration only, `+` discovery's only. Each names one case as an example (input | proxy | request | istiod's decision | discovery's) and the reason of the difference, or says it is unexplained. A class's ID is a digest of its aspect and facts.\n\n")
	for _, cl := range sortedClasses(classes) {
		ex := cl.Cases[0]
		reason := "**unexplained**"
		if cl.Reason != "" {
			reason = "explained: " + cl.Reason
		}
		fmt.Fprintf(b, "- **%s** (%s, %d cases): `%s`  \n  e.g. %s | %s | `%s` | istiod: %s | discovery: %s  \n  %s\n",
			cl.ID, cl.Aspect, len(cl.Cases), strings.Join(cl.Facts, "` `"), ex.Input, ex.Node, ex.Request.String(), ex.Istiod, ex.Ours, reason)
	}
	if len(classes) == 0 {
		fmt.Fprintln(b, "None.")
	}
	fmt.Fprintln(b)
}

func writeDifferences(b *strings.Builder, cases []Case, classes map[string]*Class) {
	fmt.Fprintf(b, "## Differences in routing\n\n")
	fmt.Fprintf(b, "One line per case whose decisions differ in routing (where the request goes, or what answers it): input | proxy | request | istiod's decision | discovery's | its classes. Differences in the other aspects are mostly systematic (a default one side sets for every cluster or route): they are listed once per class above, and every case's classes are in `cases.txt`.\n\n")
	n := 0
	for i := range cases {
		c := &cases[i]
		if c.Verdict != Differs && c.Verdict != Explained {
			continue
		}
		if len(c.Diff[dataplane.Routing]) == 0 {
			continue
		}
		var ids []string
		for _, a := range dataplane.Aspects {
			if cl := classOf(classes, c, a); cl != nil {
				ids = append(ids, cl.ID)
			}
		}
		n++
		fmt.Fprintf(b, "- %s | %s | `%s` | istiod: %s | discovery: %s | %s\n", c.Input, c.Node, c.Request.String(), oneLine(c.Istiod), oneLine(c.Ours), strings.Join(ids, " "))
	}
	if n == 0 {
		fmt.Fprintln(b, "None.")
	}
	fmt.Fprintln(b)
}

func writeNotSupported(b *strings.Builder, cases []Case) {
	fmt.Fprintf(b, "## Not supported\n\n")
	fmt.Fprintf(b, "Cases that differ and depend on what discovery reports it does not support, grouped by that report: the report | cases | an example case.\n\n")
	groups := map[string][]*Case{}
	for i := range cases {
		c := &cases[i]
		if c.Verdict == NotSupported {
			k := strings.Join(c.Unsupported, "; ")
			groups[k] = append(groups[k], c)
		}
	}
	var keys []string
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ex := groups[k][0]
		fmt.Fprintf(b, "- %s | %d | %s | %s | `%s`\n", k, len(groups[k]), ex.Input, ex.Node, ex.Request.String())
	}
	if len(keys) == 0 {
		fmt.Fprintln(b, "None.")
	}
	fmt.Fprintln(b)
}

func writeInputs(b *strings.Builder, inputs []InputResult) {
	fmt.Fprintf(b, "## Inputs\n\n")
	fmt.Fprintf(b, "Objects Istio's validation rejects never reach a cluster: neither side is given them. Kinds of other APIs (Deployments become Pods) are dropped for both.\n\n")
	for _, in := range inputs {
		var notes []string
		if in.Error != "" {
			notes = append(notes, "not compared: "+oneLine(in.Error))
		}
		for _, k := range sortedKeys(in.Rejected) {
			notes = append(notes, "rejected "+k+" ("+oneLine(in.Rejected[k])+")")
		}
		for _, k := range sortedKeys(in.Dropped) {
			notes = append(notes, fmt.Sprintf("dropped %d %s", in.Dropped[k], k))
		}
		if len(notes) > 0 {
			fmt.Fprintf(b, "- %s: %s\n", in.Name, strings.Join(notes, "; "))
		}
	}
	fmt.Fprintln(b)
}

func writeNormalisations(b *strings.Builder) {
	fmt.Fprintf(b, "## Normalisations\n\n")
	fmt.Fprintf(b, "Deliberate differences that are not counted, and readings of Envoy that make equal configurations compare equal:\n\n")
	for _, n := range Normalisations {
		fmt.Fprintf(b, "- %s\n", n)
	}
}

// Normalisations lists what the comparison leaves out on purpose.
var Normalisations = []string{
	"Resource names (listeners, filter chains, route configurations, virtual hosts, routes, clusters, EDS service names) are not compared: decisions follow the names to what they name. discovery's route shape (a filter chain per service address, one RouteConfiguration per service port) and istiod's (one RouteConfiguration per port) therefore compare by behaviour.",
	"Upstream weights are compared as shares (parts per million of the total), not as written.",
	"Envoy's defaults are filled in where a field is unset: route timeout 15s, one retry when a retry policy sets none, circuit breaker thresholds 1024/1024/1024/3, connect timeout 5s, idle timeout 1h, TLS 1.2-1.2 for clients and 1.2-1.3 for servers, healthy panic threshold 50%, escaped slashes kept.",
	"A SAN matcher for a spiffe:// ID checks the same certificates typed as URI or untyped (a SPIFFE ID cannot be another kind of SAN).",
	"Endpoint health UNKNOWN and HEALTHY are the same (Envoy sends to both); an unhealthy endpoint of a cluster whose healthy panic threshold is 0 is left out (Envoy never sends to it, so it is as good as absent; istiod's EDS has such endpoints or not depending on the order its informers see a not-ready pod).",
	"Connection resets compare as refused (nothing listens) or closed (accepted, then closed), whatever the proxy's reason; local replies compare by status, body and location.",
	"Requests to a service's address carry a Host header that names that service, as a client that resolved the name sends (discovery selects routes by destination address, istiod by Host header; for such requests they agree). Inputs are completed as a cluster would hold them: a running Pod per workload (with the sidecar's tlsMode label unless injection is off), EndpointSlices, cluster IPs, the Node a zone comes from, gateway Pods and Services (istioctl's 80->8080 and 443->8443 for istio=ingressgateway/egressgateway, the gateway chart's same-port mapping for other selectors).",
	"What discovery reports it does not support counts as not supported (see above), not as a difference.",
	"Telemetry (stats, access logs, tracing, metadata exchange filters) is not part of a decision.",
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
