package dataplane

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// action carries out a route's action.
func (e *evaluator) action(r *routev3.Route, vh *routev3.VirtualHost, rc *routev3.RouteConfiguration, h *hcmv3.HttpConnectionManager) Decision {
	switch a := r.GetAction().(type) {
	case *routev3.Route_DirectResponse:
		d := Decision{Outcome: Local, Status: int(a.DirectResponse.GetStatus()), Reason: "direct response"}
		if b := a.DirectResponse.GetBody(); b != nil {
			d.Body = b.GetInlineString() + string(b.GetInlineBytes())
			if f := b.GetFilename(); f != "" {
				d.Body = "file:" + f
			}
		}
		return d
	case *routev3.Route_Redirect:
		return Decision{Outcome: Local, Status: redirectCode(a.Redirect.GetResponseCode()), Reason: "redirect",
			Location: e.location(a.Redirect, r.GetMatch())}
	case *routev3.Route_Route:
		return e.forward(a.Route, r, vh, rc, h)
	case *routev3.Route_NonForwardingAction:
		return Decision{Outcome: Local, Reason: "non-forwarding route"}
	}
	return Decision{Outcome: Local, Status: 404, Reason: "route without action"}
}

func redirectCode(c routev3.RedirectAction_RedirectResponseCode) int {
	switch c {
	case routev3.RedirectAction_FOUND:
		return 302
	case routev3.RedirectAction_SEE_OTHER:
		return 303
	case routev3.RedirectAction_TEMPORARY_REDIRECT:
		return 307
	case routev3.RedirectAction_PERMANENT_REDIRECT:
		return 308
	}
	return 301
}

// location builds a redirect's Location as Envoy does: scheme, host and
// port swapped where the redirect says, the path replaced whole, by
// prefix or by regex, the query kept unless stripped.
func (e *evaluator) location(rd *routev3.RedirectAction, m *routev3.RouteMatch) string {
	scheme, _ := e.req.header(":scheme")
	origScheme := scheme
	switch s := rd.GetSchemeRewriteSpecifier().(type) {
	case *routev3.RedirectAction_HttpsRedirect:
		if s.HttpsRedirect {
			scheme = "https"
		}
	case *routev3.RedirectAction_SchemeRedirect:
		if s.SchemeRedirect != "" {
			scheme = s.SchemeRedirect
		}
	}
	// Envoy's newUri: the port is port_redirect's or none; a
	// host_redirect replaces the whole Host, port included; without one
	// the request's Host keeps its port unless port_redirect replaces it
	// or the scheme changes away from the port's default
	// (processRequestHost). Envoy does not leave out a :80 or :443 that
	// port_redirect names (istiod does, when it writes the redirect).
	newPort := ""
	if p := rd.GetPortRedirect(); p != 0 {
		newPort = ":" + fmt.Sprint(p)
	}
	authority := rd.GetHostRedirect()
	if authority == "" {
		authority = e.req.Authority
		if host, port, err := net.SplitHostPort(authority); err == nil {
			strip := newPort != "" || (scheme != origScheme && port == map[string]string{"http": "80", "https": "443"}[origScheme])
			if strip {
				authority = host
				if strings.Contains(host, ":") {
					authority = "[" + host + "]"
				}
			}
		}
	}
	authority += newPort
	path, query, _ := strings.Cut(e.req.Path, "?")
	// Envoy reads an empty path_redirect or prefix_rewrite as unset.
	switch p := rd.GetPathRewriteSpecifier().(type) {
	case *routev3.RedirectAction_PathRedirect:
		if p.PathRedirect != "" {
			path = p.PathRedirect
			if before, q, ok := strings.Cut(path, "?"); ok {
				path, query = before, q
			}
		}
	case *routev3.RedirectAction_PrefixRewrite:
		if p.PrefixRewrite != "" {
			path = rewritePrefix(path, m, p.PrefixRewrite)
		}
	case *routev3.RedirectAction_RegexRewrite:
		path = rewriteRegex(path, p.RegexRewrite)
	}
	loc := scheme + "://" + authority + path
	if query != "" && !rd.GetStripQuery() {
		loc += "?" + query
	}
	return loc
}

// rewritePrefix replaces the part of the path the route's prefix or path
// matched.
func rewritePrefix(path string, m *routev3.RouteMatch, repl string) string {
	var matched string
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		matched = p.Prefix
	case *routev3.RouteMatch_Path:
		matched = p.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		matched = p.PathSeparatedPrefix
	}
	if len(matched) > len(path) {
		return repl
	}
	return repl + path[len(matched):]
}

func rewriteRegex(path string, rr *matcherv3.RegexMatchAndSubstitute) string {
	re := compileRegex(rr.GetPattern().GetRegex())
	if re == nil {
		return path
	}
	return re.ReplaceAllString(path, envoySubstitution(rr.GetSubstitution()))
}

// envoySubstitution turns Envoy's \1 group references into Go's ${1}.
func envoySubstitution(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
			b.WriteString("${" + string(s[i+1]) + "}")
			i++
			continue
		}
		if s[i] == '$' {
			b.WriteString("$$")
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// forward builds the upstreams and policies of a route action.
func (e *evaluator) forward(a *routev3.RouteAction, r *routev3.Route, vh *routev3.VirtualHost, rc *routev3.RouteConfiguration, h *hcmv3.HttpConnectionManager) Decision {
	d := Decision{Outcome: Forward}
	d.Policy = e.routePolicies(a, vh, h, r)
	path := e.upstreamPath(a, r.GetMatch())
	base := headerLevels{route: r, vhost: vh, rc: rc}
	type target struct {
		name    string
		weight  uint32
		wc      *routev3.WeightedCluster_ClusterWeight
		literal string
	}
	var targets []target
	switch cs := a.GetClusterSpecifier().(type) {
	case *routev3.RouteAction_Cluster:
		targets = append(targets, target{name: cs.Cluster, weight: 1})
	case *routev3.RouteAction_WeightedClusters:
		for _, w := range cs.WeightedClusters.GetClusters() {
			if w.GetWeight().GetValue() == 0 {
				continue
			}
			targets = append(targets, target{name: w.GetName(), weight: w.GetWeight().GetValue(), wc: w, literal: w.GetHostRewriteLiteral()})
		}
	case *routev3.RouteAction_ClusterHeader:
		v, _ := e.req.header(strings.ToLower(cs.ClusterHeader))
		targets = append(targets, target{name: v, weight: 1})
	default:
		return Decision{Outcome: Local, Status: 503, Reason: "unsupported cluster specifier", Policy: d.Policy}
	}
	var total uint64
	for _, t := range targets {
		total += uint64(t.weight)
	}
	for _, t := range targets {
		c := e.describeCluster(t.name)
		if c.Missing {
			c.NotFoundStatus = clusterNotFoundStatus(a)
		}
		u := Upstream{Weight: uint32(uint64(t.weight) * 1000000 / total), Cluster: c}
		// What arrives upstream is stated only when a rewrite changed it.
		if path != e.req.Path {
			u.Path = path
		}
		if auth := e.upstreamAuthority(a, t.literal, c); auth != e.req.Authority {
			u.Authority = auth
		}
		lv := base
		lv.wc = t.wc
		u.RequestHeaders, u.ResponseHeaders = lv.mutations(e.req)
		u.responseMutations = lv.levels(true)
		d.Upstreams = append(d.Upstreams, u)
	}
	if len(d.Upstreams) == 0 {
		return Decision{Outcome: Local, Status: 503, Reason: "no cluster with weight", Policy: d.Policy}
	}
	if reason := unreachable(d.Upstreams); reason != "" {
		status := 503
		if reason == "cluster not found" {
			if s := clusterNotFoundStatus(a); s != 0 {
				status = s
			}
		}
		return Decision{Outcome: Local, Status: status, Reason: reason, Policy: d.Policy}
	}
	return d
}

// clusterNotFoundStatus is what Envoy answers when a's cluster does not
// exist, by its cluster_not_found_response_code: 0 for the default,
// SERVICE_UNAVAILABLE (503).
func clusterNotFoundStatus(a *routev3.RouteAction) int {
	switch a.GetClusterNotFoundResponseCode() {
	case routev3.RouteAction_NOT_FOUND:
		return 404
	case routev3.RouteAction_INTERNAL_SERVER_ERROR:
		return 500
	}
	return 0
}

// unreachable says why no upstream can take a request ("" when one
// can): every cluster is missing (Envoy answers 503 NC) or has no host
// to send to (503 UH).
func unreachable(ups []Upstream) string {
	missing, empty := 0, 0
	for _, u := range ups {
		switch {
		case u.Cluster.Missing:
			missing++
		case u.Cluster.Discovery != "original_dst" && healthyHosts(u.Cluster) == 0:
			empty++
		}
	}
	switch {
	case missing == len(ups):
		return "cluster not found"
	case missing+empty == len(ups):
		return "no healthy upstream"
	}
	return ""
}

func healthyHosts(c Cluster) int {
	n := 0
	for _, e := range c.Endpoints {
		if e.Health == "healthy" {
			n++
		}
	}
	return n
}

func (e *evaluator) upstreamPath(a *routev3.RouteAction, m *routev3.RouteMatch) string {
	path, query, hasQuery := strings.Cut(e.req.Path, "?")
	switch {
	case a.GetPrefixRewrite() != "":
		p := rewritePrefix(e.req.Path, m, a.GetPrefixRewrite())
		return p
	case a.GetRegexRewrite() != nil:
		path = rewriteRegex(path, a.GetRegexRewrite())
	case a.GetPathRewritePolicy() != nil:
		path = rewriteURITemplate(a.GetPathRewritePolicy(), m, path)
	default:
		return e.req.Path
	}
	if hasQuery {
		return path + "?" + query
	}
	return path
}

func (e *evaluator) upstreamAuthority(a *routev3.RouteAction, literal string, c Cluster) string {
	switch {
	case literal != "":
		return literal
	case a.GetHostRewriteLiteral() != "":
		return a.GetHostRewriteLiteral()
	case a.GetAutoHostRewrite().GetValue() && (c.Discovery == "strict_dns" || c.Discovery == "logical_dns") && len(c.Endpoints) > 0:
		host, _, _ := net.SplitHostPort(c.Endpoints[0].Address)
		return host
	case a.GetHostRewriteHeader() != "":
		if v, ok := e.req.header(strings.ToLower(a.GetHostRewriteHeader())); ok {
			return v
		}
	case a.GetHostRewritePathRegex() != nil:
		return rewriteRegex(e.req.pathOnly(), a.GetHostRewritePathRegex())
	}
	return e.req.Authority
}

// routePolicies lists the route's timeout, retries, hash policy,
// mirrors and upgrades, Envoy's defaults filled in.
func (e *evaluator) routePolicies(a *routev3.RouteAction, vh *routev3.VirtualHost, h *hcmv3.HttpConnectionManager, r *routev3.Route) []string {
	out := []string{"timeout=" + dur(a.GetTimeout(), 15*time.Second)}
	if t := a.GetIdleTimeout(); t != nil {
		out = append(out, "idle_timeout="+t.AsDuration().String())
	}
	out = append(out, streamDuration(a.GetMaxStreamDuration()))
	rp := a.GetRetryPolicy()
	if rp == nil {
		rp = vh.GetRetryPolicy()
	}
	out = append(out, retrySummary(rp))
	var hashes []string
	for _, hp := range a.GetHashPolicy() {
		hashes = append(hashes, hashSummary(hp))
	}
	if len(hashes) > 0 {
		out = append(out, "hash=["+strings.Join(hashes, " ")+"]")
	}
	for _, m := range a.GetRequestMirrorPolicies() {
		f := uint32(1000000)
		if rf := m.GetRuntimeFraction(); rf != nil {
			f = ppm(rf.GetDefaultValue())
		}
		out = append(out, fmt.Sprintf("mirror %s@%dppm", e.describeCluster(m.GetCluster()).brief(), f))
	}
	ups := map[string]bool{}
	for _, u := range h.GetUpgradeConfigs() {
		ups[strings.ToLower(u.GetUpgradeType())] = u.GetEnabled() == nil || u.GetEnabled().GetValue()
	}
	for _, u := range a.GetUpgradeConfigs() {
		ups[strings.ToLower(u.GetUpgradeType())] = u.GetEnabled() == nil || u.GetEnabled().GetValue()
	}
	var on []string
	for k, v := range ups {
		if v {
			on = append(on, k)
		}
	}
	sort.Strings(on)
	out = append(out, "upgrades=["+strings.Join(on, ",")+"]")
	_ = r
	return out
}

// streamDuration says how long a stream may last and whether the
// client's grpc-timeout header is honoured: Envoy ignores the header
// unless grpc_timeout_header_max is set (0 is no cap).
func streamDuration(m *routev3.RouteAction_MaxStreamDuration) string {
	max := "none"
	if d := m.GetMaxStreamDuration(); d != nil && d.AsDuration() > 0 {
		max = d.AsDuration().String()
	}
	header := "ignored"
	if h := m.GetGrpcTimeoutHeaderMax(); h != nil {
		header = "honoured"
		if h.AsDuration() > 0 {
			header += " up to " + h.AsDuration().String()
		}
	}
	return "max_stream_duration=" + max + " grpc-timeout header " + header
}

func retrySummary(rp *routev3.RetryPolicy) string {
	if rp == nil {
		return "retries=none"
	}
	on := strings.Split(rp.GetRetryOn(), ",")
	for i := range on {
		on[i] = strings.TrimSpace(on[i])
	}
	sort.Strings(on)
	n := uint32(1)
	if v := rp.GetNumRetries(); v != nil {
		n = v.GetValue()
	}
	var preds []string
	for _, p := range rp.GetRetryHostPredicate() {
		preds = append(preds, p.GetName())
	}
	sort.Strings(preds)
	codes := fmt.Sprint(rp.GetRetriableStatusCodes())
	s := fmt.Sprintf("retries=%d on=[%s] per_try=%s codes=%s host_predicates=[%s] host_attempts=%d",
		n, strings.Join(on, ","), dur(rp.GetPerTryTimeout(), 0), codes, strings.Join(preds, ","), rp.GetHostSelectionRetryMaxAttempts())
	if b := rp.GetRetryBackOff(); b != nil {
		s += fmt.Sprintf(" backoff=%s/%s", dur(b.GetBaseInterval(), 25*time.Millisecond), dur(b.GetMaxInterval(), 0))
	}
	if rp.GetPerTryIdleTimeout() != nil {
		s += " per_try_idle=" + rp.GetPerTryIdleTimeout().AsDuration().String()
	}
	return s
}

func hashSummary(hp *routev3.RouteAction_HashPolicy) string {
	s := "?"
	switch p := hp.GetPolicySpecifier().(type) {
	case *routev3.RouteAction_HashPolicy_Header_:
		s = "header:" + strings.ToLower(p.Header.GetHeaderName())
	case *routev3.RouteAction_HashPolicy_Cookie_:
		s = fmt.Sprintf("cookie:%s(ttl=%s,path=%s)", p.Cookie.GetName(), dur(p.Cookie.GetTtl(), 0), p.Cookie.GetPath())
	case *routev3.RouteAction_HashPolicy_ConnectionProperties_:
		s = fmt.Sprintf("source_ip:%v", p.ConnectionProperties.GetSourceIp())
	case *routev3.RouteAction_HashPolicy_QueryParameter_:
		s = "query:" + p.QueryParameter.GetName()
	case *routev3.RouteAction_HashPolicy_FilterState_:
		s = "filter_state:" + p.FilterState.GetKey()
	}
	if hp.GetTerminal() {
		s += "(terminal)"
	}
	return s
}

// headerLevels are the places a route's header mutations live, applied
// in Envoy's order: weighted cluster, route, virtual host, route
// configuration (the reverse when the most specific wins).
type headerLevels struct {
	wc    *routev3.WeightedCluster_ClusterWeight
	route *routev3.Route
	vhost *routev3.VirtualHost
	rc    *routev3.RouteConfiguration
}

type mutation struct {
	add    []*corev3.HeaderValueOption
	remove []string
}

func (l headerLevels) levels(response bool) []mutation {
	var ms []mutation
	if response {
		ms = []mutation{
			{l.wc.GetResponseHeadersToAdd(), l.wc.GetResponseHeadersToRemove()},
			{l.route.GetResponseHeadersToAdd(), l.route.GetResponseHeadersToRemove()},
			{l.vhost.GetResponseHeadersToAdd(), l.vhost.GetResponseHeadersToRemove()},
			{l.rc.GetResponseHeadersToAdd(), l.rc.GetResponseHeadersToRemove()},
		}
	} else {
		ms = []mutation{
			{l.wc.GetRequestHeadersToAdd(), l.wc.GetRequestHeadersToRemove()},
			{l.route.GetRequestHeadersToAdd(), l.route.GetRequestHeadersToRemove()},
			{l.vhost.GetRequestHeadersToAdd(), l.vhost.GetRequestHeadersToRemove()},
			{l.rc.GetRequestHeadersToAdd(), l.rc.GetRequestHeadersToRemove()},
		}
	}
	if l.rc.GetMostSpecificHeaderMutationsWins() {
		for i, j := 0, len(ms)-1; i < j; i, j = i+1, j-1 {
			ms[i], ms[j] = ms[j], ms[i]
		}
	}
	return ms
}

// mutations applies the header changes to the request's headers (and to
// an empty response) and lists what changed.
func (l headerLevels) mutations(req Request) (request, response []string) {
	return applyMutations(l.levels(false), req.Headers), applyMutations(l.levels(true), nil)
}

func applyMutations(ms []mutation, start map[string]string) []string {
	hs := map[string][]string{}
	for k, v := range start {
		hs[k] = []string{v}
	}
	touched := applyHeaderMutations(ms, hs)
	var out []string
	for k := range touched {
		v, ok := hs[k]
		orig, had := start[k]
		switch {
		case !ok && had:
			out = append(out, "-"+k)
		case !ok:
			out = append(out, "-"+k+" (absent)")
		case had && len(v) == 1 && v[0] == orig:
		default:
			out = append(out, k+": "+strings.Join(v, ","))
		}
	}
	sort.Strings(out)
	return out
}

// ResponseHeadersFrom returns the response headers the client receives when
// the upstream answers with backend (lower-case names): the route's
// response header changes applied to them.
func (u Upstream) ResponseHeadersFrom(backend map[string][]string) map[string][]string {
	hs := map[string][]string{}
	for k, v := range backend {
		hs[strings.ToLower(k)] = append([]string(nil), v...)
	}
	applyHeaderMutations(u.responseMutations, hs)
	return hs
}

// applyHeaderMutations applies ms to the headers hs in place and returns the names it
// touched.
func applyHeaderMutations(ms []mutation, hs map[string][]string) map[string]bool {
	touched := map[string]bool{}
	for _, m := range ms {
		for _, r := range m.remove {
			r = strings.ToLower(r)
			delete(hs, r)
			touched[r] = true
		}
		for _, o := range m.add {
			k := strings.ToLower(o.GetHeader().GetKey())
			v := o.GetHeader().GetValue() + string(o.GetHeader().GetRawValue())
			touched[k] = true
			_, exists := hs[k]
			act := o.GetAppendAction()
			if o.GetAppend() != nil {
				if o.GetAppend().GetValue() {
					act = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
				} else {
					act = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
				}
			}
			switch act {
			case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
				hs[k] = append(hs[k], v)
			case corev3.HeaderValueOption_ADD_IF_ABSENT:
				if !exists {
					hs[k] = []string{v}
				}
			case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
				hs[k] = []string{v}
			case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
				if exists {
					hs[k] = []string{v}
				}
			}
		}
	}
	return touched
}
