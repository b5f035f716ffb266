package validate

import (
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

func checkVirtualService(m proto.Message, md *meta, p *problems) {
	vs := m.(*networking.VirtualService)
	delegate := len(vs.Hosts) == 0
	if delegate {
		checkDelegate(p, vs)
	}
	checkVirtualServiceHosts(p, vs)
	checkExportTo(p, md.namespace(), vs.ExportTo, false, false)
	checkUnreachableRules(p, vs)
	checkGatewayNames(p, vs.Gateways)
	// What generation could not turn into configuration Envoy accepts
	// (header names and values, string matches, regexes): the same rules
	// the generator's containment and the status Auditor apply.
	p.list = append(p.list, gen.EnvoyRefusals(model.KindVirtualService, vs)...)
	if len(vs.Http)+len(vs.Tcp)+len(vs.Tls) == 0 {
		p.add("spec", "a VirtualService must have at least one http, tcp or tls route")
	}
	for i, r := range vs.Http {
		checkHTTPRoute(p, at("spec.http", i), r)
		if delegate && r.Delegate != nil {
			p.add(at("spec.http", i)+".delegate", "a delegate VirtualService (no hosts) cannot delegate again")
		}
	}
	for i, r := range vs.Tcp {
		checkRouteDestinations(p, at("spec.tcp", i)+".route", r.Route)
	}
	for i, r := range vs.Tls {
		path := at("spec.tls", i)
		if len(r.Match) == 0 {
			p.add(path+".match", "a tls route must match on sniHosts")
		}
		for j, m := range r.Match {
			if len(m.SniHosts) == 0 {
				p.add(at(path+".match", j)+".sniHosts", "must not be empty")
			}
			for k, h := range m.SniHosts {
				if msg := wildcardDomainProblem(h); msg != "" && !isIP(h) {
					p.add(at(at(path+".match", j)+".sniHosts", k), "%s", msg)
				}
			}
		}
		checkRouteDestinations(p, path+".route", r.Route)
	}
}

// checkDelegate applies Istio's rules for a VirtualService without hosts,
// which is a delegate: only http routes, bound through its root, so no
// gateways of its own.
func checkDelegate(p *problems, vs *networking.VirtualService) {
	if len(vs.Gateways) > 0 {
		p.add("spec.gateways", "a delegate VirtualService (no hosts) must have no gateways")
	}
	if len(vs.Tcp) > 0 {
		p.add("spec.tcp", "a delegate VirtualService (no hosts) must have no tcp routes")
	}
	if len(vs.Tls) > 0 {
		p.add("spec.tls", "a delegate VirtualService (no hosts) must have no tls routes")
	}
}

// checkGatewayNames: namespace/name of DNS labels, or the older name or
// name.namespace, which Istio accepts with a warning (and, as Istio does,
// stops looking at the rest after one).
func checkGatewayNames(p *problems, names []string) {
	for i, g := range names {
		path := at("spec.gateways", i)
		ns, name, ok := strings.Cut(g, "/")
		if !ok {
			if first, rest, dotted := strings.Cut(g, "."); dotted {
				second, _, _ := strings.Cut(rest, ".")
				p.warn(path, "using legacy gatewayName format %q; prefer the <namespace>/<name> format: %q", g, second+"/"+first)
			}
			if msg := fqdnProblem(g); msg != "" {
				p.add(path, "%s", msg)
			}
			return
		}
		if ns == "" || name == "" {
			p.add(path, "config namespace and gateway name cannot be empty")
		}
		if !isDNS1123Label(ns) {
			p.add(path, "invalid value for namespace: %q", ns)
		}
		if !isDNS1123Label(name) {
			p.add(path, "invalid value for gateway name: %q", name)
		}
	}
}

func checkHTTPRoute(p *problems, path string, r *networking.HTTPRoute) {
	checkRouteActions(p, path, r)
	for i, m := range r.Match {
		checkMatch(p, at(path+".match", i), m)
	}
	checkHTTPDestinations(p, path+".route", r.Route)
	if r.Rewrite != nil && r.Rewrite.Uri != "" && r.Rewrite.UriRegexRewrite != nil {
		p.add(path+".rewrite", "uri and uriRegexRewrite cannot both be set")
	}
	if d := r.DirectResponse; d != nil && (d.Status < 200 || d.Status > 599) {
		p.add(path+".directResponse.status", "%d is not an HTTP status (200-599)", d.Status)
	}
	checkDuration(p, path+".timeout", r.Timeout)
	if rt := r.Retries; rt != nil {
		if rt.Attempts < 0 {
			p.add(path+".retries.attempts", "must not be negative")
		}
		checkDuration(p, path+".retries.perTryTimeout", rt.PerTryTimeout)
	}
	checkFault(p, path+".fault", r.Fault)
	if r.MirrorPercentage != nil {
		checkPercent(p, path+".mirrorPercentage", r.MirrorPercentage.Value)
	}
}

// checkRouteActions applies Istio's rules for what an http route does: a
// route that delegates may not also route or redirect; otherwise one of
// route, redirect or directResponse, and fault or rewrite only with route.
func checkRouteActions(p *problems, path string, r *networking.HTTPRoute) {
	if r.Mirror != nil && len(r.Mirrors) > 0 {
		p.add(path, "HTTP route cannot contain both mirror and mirrors")
	}
	if r.Delegate != nil && len(r.Delegate.Name) == 0 {
		p.add(path+".delegate.name", "a delegate needs a name")
	}
	switch {
	case r.Delegate != nil:
		if r.Redirect != nil || r.Route != nil {
			p.add(path, "root HTTP route %s must not specify redirect or route", r.Name)
		}
	case r.Redirect != nil:
		if len(r.Route) > 0 || r.Fault != nil || r.Rewrite != nil || r.DirectResponse != nil {
			p.add(path, "HTTP route with a redirect cannot contain route, fault, rewrite or directResponse")
		}
	case r.DirectResponse != nil:
		if len(r.Route) > 0 || r.Fault != nil || r.Rewrite != nil {
			p.add(path, "HTTP route with a directResponse cannot contain route, fault or rewrite")
		}
	case len(r.Route) == 0:
		p.add(path, "HTTP route, redirect or direct_response is required")
	}
}

// checkMatch checks what Envoy's rules do not (gen.EnvoyRefusals checks
// the header names, string matches and regexes).
func checkMatch(p *problems, path string, m *networking.HTTPMatchRequest) {
	if m.Port != 0 {
		checkPort(p, path+".port", m.Port)
	}
}

func checkHTTPDestinations(p *problems, path string, ds []*networking.HTTPRouteDestination) {
	weights := make([]int32, len(ds))
	for i, d := range ds {
		checkDestination(p, at(path, i)+".destination", d.Destination)
		weights[i] = d.Weight
	}
	checkWeights(p, path, weights)
}

func checkRouteDestinations(p *problems, path string, ds []*networking.RouteDestination) {
	if len(ds) == 0 {
		p.add(path, "a route needs at least one destination")
	}
	weights := make([]int32, len(ds))
	for i, d := range ds {
		checkDestination(p, at(path, i)+".destination", d.Destination)
		weights[i] = d.Weight
	}
	checkWeights(p, path, weights)
}

// checkWeights: weights are not negative, and several destinations do not
// weigh 0 in all (they are relative: they need not add up to 100).
func checkWeights(p *problems, path string, weights []int32) {
	var total int64
	for i, w := range weights {
		if w < 0 {
			p.add(at(path, i)+".weight", "weight %d < 0", w)
		}
		total += int64(w)
	}
	if len(weights) > 1 && total == 0 {
		p.add(path, "total destination weight = 0")
	}
}

func checkDestination(p *problems, path string, d *networking.Destination) {
	if d == nil {
		p.add(path, "a destination is required")
		return
	}
	if d.Host == "" {
		p.add(path+".host", "destination must have a host")
	} else if msg := wildcardDomainProblem(d.Host); msg != "" {
		p.add(path+".host", "%s", msg)
	}
	if d.Subset != "" && !isDNS1123Label(d.Subset) {
		p.add(path+".subset", "subset name %q is not a DNS label", d.Subset)
	}
	if d.Port != nil {
		checkPort(p, path+".port.number", d.Port.Number)
	}
}

func checkFault(p *problems, path string, f *networking.HTTPFaultInjection) {
	if f == nil {
		return
	}
	if a := f.Abort; a != nil {
		if a.Percentage != nil {
			checkPercent(p, path+".abort.percentage", a.Percentage.Value)
		}
		if s, ok := a.ErrorType.(*networking.HTTPFaultInjection_Abort_HttpStatus); ok && (s.HttpStatus < 200 || s.HttpStatus > 599) {
			p.add(path+".abort.httpStatus", "%d is not an HTTP status (200-599)", s.HttpStatus)
		}
	}
	if d := f.Delay; d != nil {
		if d.Percentage != nil {
			checkPercent(p, path+".delay.percentage", d.Percentage.Value)
		}
		if fd, ok := d.HttpDelayType.(*networking.HTTPFaultInjection_Delay_FixedDelay); ok {
			checkDuration(p, path+".delay.fixedDelay", fd.FixedDelay)
		}
	}
}

// checkDuration: a set duration is valid, at least 1ms and in whole
// milliseconds, as Istio's CRDs and webhook require.
func checkDuration(p *problems, path string, d *durationpb.Duration) {
	if d == nil {
		return
	}
	if err := d.CheckValid(); err != nil {
		p.add(path, "invalid duration: %v", err)
		return
	}
	switch {
	case d.AsDuration() < time.Millisecond:
		p.add(path, "duration %s must be at least 1ms", d.AsDuration())
	case d.AsDuration()%time.Millisecond != 0:
		p.add(path, "duration %s: only durations to ms precision are supported", d.AsDuration())
	}
}
