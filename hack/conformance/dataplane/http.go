package dataplane

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// http runs an HTTP connection manager: virtual host, route, the HTTP
// filters (RBAC, ext_authz, JWT, fault, CORS) and the route's action.
func (e *evaluator) http(h *hcmv3.HttpConnectionManager) Decision {
	if !e.req.IsHTTP() {
		return e.reset("protocol error: TCP bytes to an HTTP connection manager")
	}
	switch h.GetCodecType() {
	case hcmv3.HttpConnectionManager_HTTP1:
		if e.req.Protocol == HTTP2 {
			return e.reset("protocol error: h2 to an HTTP/1 codec")
		}
	case hcmv3.HttpConnectionManager_HTTP2:
		if e.req.Protocol == HTTP1 {
			return e.reset("protocol error: HTTP/1 to an h2 codec")
		}
	}
	conn := hcmFacts(h)
	local := func(status int, reason string) Decision {
		return e.done(Decision{Outcome: Local, Status: status, Reason: reason, Connection: conn})
	}
	filters := h.GetHttpFilters()
	if len(filters) == 0 || !isRouter(filters[len(filters)-1]) {
		return e.reset("http filters do not end with the router")
	}
	rc := e.routeConfig(h)
	if rc == nil {
		return local(404, "route configuration missing")
	}
	vh := e.virtualHost(rc, h)
	if vh == nil {
		return local(404, "no virtual host")
	}
	e.note("virtual host %s", vh.GetName())
	if rt := vh.GetRequireTls(); rt != routev3.VirtualHost_NONE && e.req.TLS == Plaintext {
		d := local(301, "tls required")
		d.Location = "https://" + e.req.Authority + e.req.Path
		return d
	}
	r := e.route(vh)
	if r == nil {
		return local(404, "no route")
	}
	e.note("route %q", r.GetName())
	levels := perFilter{route: r, vhost: vh, rc: rc}
	var wasm []string
	for _, f := range filters {
		if f.GetConfigDiscovery() != nil {
			wasm = append(wasm, f.GetName())
		}
	}
	policy := wasmFacts("http", wasm)
	for _, f := range filters[:len(filters)-1] {
		pol, deny := e.httpFilter(f, levels)
		if deny != "" {
			d := local(403, deny)
			d.Policy = policy
			return d
		}
		policy = append(policy, pol...)
	}
	d := e.action(r, vh, rc, h)
	d.Connection = conn
	d.Policy = append(policy, d.Policy...)
	return e.done(d)
}

func isRouter(f *hcmv3.HttpFilter) bool {
	_, ok := unmarshalAny[routerv3.Router](f.GetTypedConfig())
	return ok || (f.GetTypedConfig() == nil && f.GetName() == "envoy.filters.http.router")
}

// hcmFacts lists the connection manager's settings that change how a
// request is read.
func hcmFacts(h *hcmv3.HttpConnectionManager) []string {
	normalize := h.GetNormalizePath().GetValue()
	escaped := h.GetPathWithEscapedSlashesAction()
	if escaped == hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT {
		// Envoy's implementation default is to keep escaped slashes.
		escaped = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
	}
	out := []string{fmt.Sprintf("http codec=%s normalize_path=%v merge_slashes=%v escaped_slashes=%s use_remote_address=%v xff_trusted_hops=%d",
		strings.ToLower(h.GetCodecType().String()), normalize, h.GetMergeSlashes(), escaped,
		h.GetUseRemoteAddress().GetValue(), h.GetXffNumTrustedHops())}
	return out
}

func (e *evaluator) routeConfig(h *hcmv3.HttpConnectionManager) *routev3.RouteConfiguration {
	if rc := h.GetRouteConfig(); rc != nil {
		return rc
	}
	name := h.GetRds().GetRouteConfigName()
	e.note("rds %s", name)
	return e.cfg.Route(name)
}

// virtualHost picks the virtual host for the request's authority in
// Envoy's order (exact, longest suffix wildcard, longest prefix
// wildcard, "*"), after the port stripping the connection manager and
// route configuration ask for.
func (e *evaluator) virtualHost(rc *routev3.RouteConfiguration, h *hcmv3.HttpConnectionManager) *routev3.VirtualHost {
	host := e.req.Authority
	if hp, port, err := net.SplitHostPort(host); err == nil {
		strip := rc.GetIgnorePortInHostMatching() || h.GetStripAnyHostPort()
		if !strip && h.GetStripMatchingHostPort() {
			strip = port == strconv.Itoa(int(e.req.DstPort))
		}
		if strip {
			host = hp
		}
	}
	return pickVirtualHost(rc.GetVirtualHosts(), host)
}

func pickVirtualHost(vhs []*routev3.VirtualHost, host string) *routev3.VirtualHost {
	var best *routev3.VirtualHost
	bestRank, bestLen := 0, 0
	for _, vh := range vhs {
		for _, d := range vh.GetDomains() {
			rank, n := DomainRank(d, host)
			if rank > bestRank || (rank == bestRank && rank > 0 && n > bestLen) {
				best, bestRank, bestLen = vh, rank, n
			}
		}
	}
	return best
}

// route returns the first route of the virtual host that matches.
func (e *evaluator) route(vh *routev3.VirtualHost) *routev3.Route {
	for _, r := range vh.GetRoutes() {
		if e.routeMatches(r.GetMatch()) {
			return r
		}
	}
	return nil
}

func (e *evaluator) routeMatches(m *routev3.RouteMatch) bool {
	cs := m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	fold := func(s string) string {
		if cs {
			return s
		}
		return strings.ToLower(s)
	}
	path := e.req.pathOnly()
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		if !strings.HasPrefix(fold(e.req.Path), fold(p.Prefix)) {
			return false
		}
	case *routev3.RouteMatch_Path:
		if fold(path) != fold(p.Path) {
			return false
		}
	case *routev3.RouteMatch_SafeRegex:
		re := fullRegex(p.SafeRegex.GetRegex())
		if re == nil || !re.MatchString(path) {
			return false
		}
	case *routev3.RouteMatch_PathSeparatedPrefix:
		pp := fold(p.PathSeparatedPrefix)
		if fp := fold(path); fp != pp && !strings.HasPrefix(fp, pp+"/") {
			return false
		}
	case *routev3.RouteMatch_PathMatchPolicy:
		if !matchURITemplate(p.PathMatchPolicy, path) {
			return false
		}
	case *routev3.RouteMatch_ConnectMatcher_:
		if e.req.Method != "CONNECT" {
			return false
		}
	default:
		return false
	}
	for _, h := range m.GetHeaders() {
		if !matchHeader(h, e.req) {
			return false
		}
	}
	q := e.req.query()
	for _, qp := range m.GetQueryParameters() {
		if !matchQuery(qp, q) {
			return false
		}
	}
	if m.GetGrpc() != nil {
		ct, _ := e.req.header("content-type")
		if !strings.HasPrefix(ct, "application/grpc") {
			return false
		}
	}
	for _, dm := range m.GetDynamicMetadata() {
		// No request carries dynamic metadata (no JWT was validated):
		// only an inverted matcher (withoutHeaders on a claim) holds.
		if !dm.GetInvert() {
			return false
		}
	}
	return true
}

// perFilter is where a route's per-filter configuration is looked up,
// most specific first.
type perFilter struct {
	route *routev3.Route
	vhost *routev3.VirtualHost
	rc    *routev3.RouteConfiguration
}

// lookup returns the most specific per-filter config for a filter name,
// unwrapping FilterConfig; disabled reports a FilterConfig that turns
// the filter off for the route.
func (p perFilter) lookup(name string) (cfg *anypb.Any, disabled bool) {
	for _, m := range []map[string]*anypb.Any{p.route.GetTypedPerFilterConfig(), p.vhost.GetTypedPerFilterConfig(), p.rc.GetTypedPerFilterConfig()} {
		a, ok := m[name]
		if !ok {
			continue
		}
		if fc, ok := unmarshalAny[routev3.FilterConfig](a); ok {
			return fc.GetConfig(), fc.GetDisabled()
		}
		return a, false
	}
	return nil, false
}

// httpFilter applies one HTTP filter: the policies it adds to the
// decision, or the reason it denies the request.
func (e *evaluator) httpFilter(f *hcmv3.HttpFilter, levels perFilter) (policy []string, deny string) {
	override, off := levels.lookup(f.GetName())
	if off || f.GetDisabled() && override == nil {
		return nil, ""
	}
	tc := f.GetTypedConfig()
	if r, ok := unmarshalAny[rbachttpv3.RBAC](tc); ok {
		rules := r.GetRules()
		if pr, ok := unmarshalAny[rbachttpv3.RBACPerRoute](override); ok {
			rules = pr.GetRbac().GetRules()
		}
		e.shadowRules(r.GetShadowRules(), r.GetShadowRulesStatPrefix(), true) // extauthz.go
		if rules != nil && !e.rbacAllows(rules, true) {
			return nil, "rbac: denied"
		}
		return nil, ""
	}
	if a, ok := unmarshalAny[extauthzv3.ExtAuthz](tc); ok {
		if pr, ok := unmarshalAny[extauthzv3.ExtAuthzPerRoute](override); ok && pr.GetDisabled() {
			return nil, ""
		}
		return e.httpExtAuthz(a), ""
	}
	if j, ok := unmarshalAny[jwtv3.JwtAuthentication](tc); ok {
		return jwtFacts(j), ""
	}
	if fault, ok := unmarshalAny[faultv3.HTTPFault](tc); ok {
		if pr, ok := unmarshalAny[faultv3.HTTPFault](override); ok {
			fault = pr
		}
		if s := faultSummary(fault); s != "" {
			return []string{s}, ""
		}
		return nil, ""
	}
	if _, ok := unmarshalAny[corsv3.Cors](tc); ok {
		if pr, ok := unmarshalAny[corsv3.CorsPolicy](override); ok {
			return []string{corsSummary(pr)}, ""
		}
		if c := levels.route.GetRoute().GetCors(); c != nil {
			return []string{legacyCors(c)}, ""
		}
		if c := levels.vhost.GetCors(); c != nil {
			return []string{legacyCors(c)}, ""
		}
	}
	return nil, ""
}

func (c Cluster) brief() string { return Upstream{Weight: 1000000, Cluster: c}.brief() }

// ppm turns a FractionalPercent into parts per million.
func ppm(p *typev3.FractionalPercent) uint32 {
	if p == nil {
		return 0
	}
	switch p.GetDenominator() {
	case typev3.FractionalPercent_HUNDRED:
		return p.GetNumerator() * 10000
	case typev3.FractionalPercent_TEN_THOUSAND:
		return p.GetNumerator() * 100
	}
	return p.GetNumerator()
}

func faultSummary(f *faultv3.HTTPFault) string {
	var parts []string
	if d := f.GetDelay(); d != nil {
		v := "header"
		if fd := d.GetFixedDelay(); fd != nil {
			v = fd.AsDuration().String()
		}
		parts = append(parts, fmt.Sprintf("delay=%s@%dppm", v, ppm(d.GetPercentage())))
	}
	if a := f.GetAbort(); a != nil {
		v := "header"
		switch s := a.GetErrorType().(type) {
		case *faultv3.FaultAbort_HttpStatus:
			v = strconv.Itoa(int(s.HttpStatus))
		case *faultv3.FaultAbort_GrpcStatus:
			v = "grpc:" + strconv.Itoa(int(s.GrpcStatus))
		}
		parts = append(parts, fmt.Sprintf("abort=%s@%dppm", v, ppm(a.GetPercentage())))
	}
	if len(parts) == 0 {
		return ""
	}
	if len(f.GetHeaders()) > 0 {
		parts = append(parts, fmt.Sprintf("when %d header matchers", len(f.GetHeaders())))
	}
	return "fault " + strings.Join(parts, " ")
}

func corsSummary(c *corsv3.CorsPolicy) string {
	var origins []string
	for _, o := range c.GetAllowOriginStringMatch() {
		origins = append(origins, stringMatcher(o))
	}
	sort.Strings(origins)
	return fmt.Sprintf("cors origins=[%s] methods=%s headers=%s expose=%s max_age=%s credentials=%v",
		strings.Join(origins, " "), c.GetAllowMethods(), c.GetAllowHeaders(), c.GetExposeHeaders(), c.GetMaxAge(),
		c.GetAllowCredentials().GetValue())
}

func legacyCors(c *routev3.CorsPolicy) string {
	var origins []string
	for _, o := range c.GetAllowOriginStringMatch() {
		origins = append(origins, stringMatcher(o))
	}
	sort.Strings(origins)
	return fmt.Sprintf("cors origins=[%s] methods=%s headers=%s expose=%s max_age=%s credentials=%v",
		strings.Join(origins, " "), c.GetAllowMethods(), c.GetAllowHeaders(), c.GetExposeHeaders(), c.GetMaxAge(),
		c.GetAllowCredentials().GetValue())
}
