package dataplane

import (
	"fmt"
	"sort"
	"strings"
)

// Outcome is the fate of a request.
type Outcome string

// Outcomes.
const (
	// Forward: the request (or connection) is proxied to Upstreams.
	Forward Outcome = "forward"
	// Local: the proxy answers itself (Status, Body or Location).
	Local Outcome = "local"
	// Reset: the connection is closed without an HTTP answer.
	Reset Outcome = "reset"
	// Fail: a proxyless gRPC client fails the RPC (Reason says why).
	Fail Outcome = "fail"
)

// Decision is what the proxy does with a request. Names of resources
// appear only in Trace, which Facts leaves out.
type Decision struct {
	Outcome Outcome
	// Status, Body and Location of a local reply.
	Status   int
	Body     string
	Location string
	// Reason explains a reset, a failure or a local reply the proxy makes
	// of its own accord (no route, RBAC, no cluster).
	Reason string
	// Downstream describes the TLS the proxy terminates ("" for none).
	Downstream string
	// Connection describes the HTTP connection manager or TCP proxy that
	// handled the connection.
	Connection []string
	// Policy lists the route's policies: timeout, retries, faults, hash
	// policy, mirrors, CORS, upgrades.
	Policy []string
	// Upstreams are where the request goes, with their weights.
	Upstreams []Upstream
	// Trace names the resources the decision went through.
	Trace []string
}

// Upstream is one destination of a request.
type Upstream struct {
	// Weight is the share of requests, in parts per million.
	Weight uint32
	// Path and Authority are the request's after rewrites (HTTP only).
	Path      string
	Authority string
	// RequestHeaders and ResponseHeaders are the header changes on the
	// way: "name: value" set, "-name" removed.
	RequestHeaders  []string
	ResponseHeaders []string
	Cluster         Cluster

	// responseMutations are the changes behind ResponseHeaders, for
	// ResponseHeadersFrom.
	responseMutations []mutation
}

// Cluster is an upstream cluster by what it does.
type Cluster struct {
	// Missing: the route names a cluster the proxy does not have.
	Missing bool
	// NotFoundStatus is what Envoy answers for a Missing cluster of an
	// HTTP route (its cluster_not_found_response_code); 0 is Envoy's 503.
	NotFoundStatus int
	Discovery      string
	LB             string
	// Settings are the connection settings (protocol, limits, outlier
	// detection, timeouts), one per line.
	Settings  []string
	Endpoints []Endpoint
}

// Endpoint is one upstream host.
type Endpoint struct {
	Address  string
	Locality string
	Priority uint32
	Weight   uint32
	Health   string
	// TLS is what the proxy does towards this host ("plaintext", or the
	// TLS context summarised).
	TLS string
}

func (e Endpoint) String() string {
	s := e.Address
	if e.Locality != "" {
		s += " locality=" + e.Locality
	}
	if e.Priority != 0 {
		s += fmt.Sprintf(" priority=%d", e.Priority)
	}
	if e.Weight != 1 {
		s += fmt.Sprintf(" weight=%d", e.Weight)
	}
	if e.Health != "" && e.Health != "healthy" {
		s += " health=" + e.Health
	}
	return s
}

// Facts renders the decision as sorted lines, resource names left out:
// two decisions are the same behaviour when their facts are equal.
func (d Decision) Facts() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	add("outcome: %s", d.Outcome)
	if d.Status != 0 {
		add("status: %d", d.Status)
	}
	if d.Body != "" {
		add("body: %q", d.Body)
	}
	if d.Location != "" {
		add("location: %s", d.Location)
	}
	switch {
	case d.Outcome == Local:
		// A local reply is its status, body and location: why Envoy
		// made it is not seen by the client (a route's direct response
		// of 404 and Envoy's own 404 for no route are the same answer).
		if d.Body == "" {
			add("body: %q", envoyBody(d.Reason))
		}
	case d.Outcome == Reset && d.Reason == "no listener":
		// Nothing listens: the client's connection is refused.
		add("reset: refused")
	case d.Outcome == Reset:
		// Accepted, then closed: why is the proxy's business (no chain,
		// a failed handshake, a protocol error, an RBAC denial).
		add("reset: closed")
	case d.Reason != "":
		add("reason: %s", d.Reason)
	}
	if d.Downstream != "" {
		add("downstream tls: %s", d.Downstream)
	}
	for _, c := range d.Connection {
		add("connection: %s", c)
	}
	for _, p := range d.Policy {
		add("policy: %s", p)
	}
	ups := make([]string, 0, len(d.Upstreams))
	for _, u := range d.Upstreams {
		ups = append(ups, u.facts())
	}
	sort.Strings(ups)
	for i, u := range ups {
		for _, l := range strings.Split(u, "\n") {
			add("upstream[%d] %s", i, l)
		}
	}
	return out
}

func (u Upstream) facts() string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("weight: %d", u.Weight)
	if u.Path != "" {
		add("path: %s", u.Path)
	}
	if u.Authority != "" {
		add("authority: %s", u.Authority)
	}
	for _, h := range u.RequestHeaders {
		add("request header: %s", h)
	}
	for _, h := range u.ResponseHeaders {
		add("response header: %s", h)
	}
	c := u.Cluster
	if c.Missing {
		if c.NotFoundStatus != 0 {
			add("cluster: missing, answered %d", c.NotFoundStatus)
		} else {
			add("cluster: missing")
		}
		return strings.Join(lines, "\n")
	}
	add("cluster: %s", c.Discovery)
	add("cluster lb: %s", c.LB)
	for _, s := range c.Settings {
		add("cluster setting: %s", s)
	}
	var eps, tls []string
	for _, e := range c.Endpoints {
		eps = append(eps, e.String())
		tls = append(tls, e.Address+" "+e.TLS)
	}
	sort.Strings(eps)
	sort.Strings(tls)
	if len(eps) == 0 {
		add("endpoints: none")
	}
	for _, e := range eps {
		add("endpoint: %s", e)
	}
	for _, t := range tls {
		add("endpoint tls: %s", t)
	}
	return strings.Join(lines, "\n")
}

// envoyBody is the body of the local replies Envoy makes of its own
// accord.
func envoyBody(reason string) string {
	switch reason {
	case "rbac: denied":
		return "RBAC: access denied"
	case "no healthy upstream":
		return "no healthy upstream"
	}
	return ""
}

// Aspects of a decision, most important first.
const (
	// Routing: where the request goes (outcome, local replies, upstream
	// hosts and weights, rewrites, header changes).
	Routing = "routing"
	// Security: TLS towards the client and the upstream, authentication
	// filters. (An RBAC denial is a routing outcome.)
	Security = "security"
	// RoutePolicy: timeouts, retries, faults, mirrors, CORS, hashing,
	// upgrades.
	RoutePolicy = "route policy"
	// ClusterPolicy: load balancing and connection settings of the
	// upstream cluster.
	ClusterPolicy = "cluster policy"
	// Connection: how the connection manager or TCP proxy reads the
	// connection.
	Connection = "connection"
)

// Aspects lists the aspects in report order.
var Aspects = []string{Routing, Security, RoutePolicy, ClusterPolicy, Connection}

// AspectOf says which aspect a fact of Facts is about.
func AspectOf(fact string) string {
	f := fact
	if strings.HasPrefix(f, "upstream[") {
		if i := strings.Index(f, "] "); i > 0 {
			f = f[i+2:]
		}
	}
	switch {
	case strings.HasPrefix(f, "downstream tls:"), strings.HasPrefix(f, "endpoint tls:"),
		strings.HasPrefix(f, "policy: jwt"), strings.HasPrefix(f, "policy: ext_authz"), strings.HasPrefix(f, "policy: wasm"):
		return Security
	case strings.HasPrefix(f, "policy:"):
		return RoutePolicy
	case strings.HasPrefix(f, "cluster setting:"), strings.HasPrefix(f, "cluster lb:"):
		return ClusterPolicy
	case strings.HasPrefix(f, "connection:"):
		return Connection
	}
	return Routing
}

// DiffByAspect groups Diff's lines by aspect.
func DiffByAspect(a, b Decision) map[string][]string {
	out := map[string][]string{}
	for _, d := range Diff(a, b) {
		asp := AspectOf(strings.TrimPrefix(strings.TrimPrefix(d, "- "), "+ "))
		out[asp] = append(out[asp], d)
	}
	return out
}

// Equal reports whether two decisions are the same behaviour.
func Equal(a, b Decision) bool { return len(Diff(a, b)) == 0 }

// Diff lists the facts of a not in b ("- fact") and of b not in a
// ("+ fact"), in order.
func Diff(a, b Decision) []string {
	fa, fb := a.Facts(), b.Facts()
	inA, inB := count(fa), count(fb)
	var out []string
	for _, f := range fa {
		if inB[f] > 0 {
			inB[f]--
			continue
		}
		out = append(out, "- "+f)
	}
	for _, f := range fb {
		if inA[f] > 0 {
			inA[f]--
			continue
		}
		out = append(out, "+ "+f)
	}
	return out
}

func count(fs []string) map[string]int {
	m := map[string]int{}
	for _, f := range fs {
		m[f]++
	}
	return m
}

// Summary is the decision in one line, for reports.
func (d Decision) Summary() string {
	var b strings.Builder
	b.WriteString(string(d.Outcome))
	if d.Status != 0 {
		fmt.Fprintf(&b, " %d", d.Status)
	}
	if d.Location != "" {
		b.WriteString(" -> " + d.Location)
	}
	if d.Reason != "" {
		b.WriteString(" (" + d.Reason + ")")
	}
	if len(d.Upstreams) > 0 {
		var ups []string
		for _, u := range d.Upstreams {
			ups = append(ups, u.brief())
		}
		sort.Strings(ups)
		b.WriteString(" to " + strings.Join(ups, ", "))
	}
	return b.String()
}

func (u Upstream) brief() string {
	if u.Cluster.Missing {
		if u.Cluster.NotFoundStatus != 0 {
			return fmt.Sprintf("missing cluster (%d)", u.Cluster.NotFoundStatus)
		}
		return "missing cluster"
	}
	var eps []string
	for _, e := range u.Cluster.Endpoints {
		eps = append(eps, e.Address)
	}
	sort.Strings(eps)
	s := u.Cluster.Discovery + "[" + strings.Join(eps, " ") + "]"
	if u.Weight != 1000000 {
		s = fmt.Sprintf("%d%% %s", u.Weight/10000, s)
	}
	return s
}
