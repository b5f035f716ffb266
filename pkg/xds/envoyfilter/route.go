package envoyfilter

import (
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// RouteMatches reports whether some ROUTE_CONFIGURATION, VIRTUAL_HOST or
// HTTP_ROUTE patch of ps for ctx may change the route configuration named
// name, so that a caller decodes only those. The match reads the name
// only.
func RouteMatches(ctx networking.EnvoyFilter_PatchContext, ps Patches, name string) bool {
	for _, k := range []networking.EnvoyFilter_ApplyTo{networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE} {
		for _, p := range ps[k] {
			if p.contextMatch(ctx) && routeConfigurationMatch(ctx, name, p) {
				return true
			}
		}
	}
	return false
}

// PatchRouteConfiguration applies ps's ROUTE_CONFIGURATION, VIRTUAL_HOST
// and HTTP_ROUTE patches for ctx to rc in place, as istiod's
// ApplyRouteConfigurationPatches (a route configuration is never removed
// or added by a patch, in istiod either).
func PatchRouteConfiguration(ctx networking.EnvoyFilter_PatchContext, ps Patches, rc *route.RouteConfiguration, applied Applied) {
	for _, p := range ps[networking.EnvoyFilter_ROUTE_CONFIGURATION] {
		if isMerge(p.Operation) && p.contextMatch(ctx) && routeConfigurationMatch(ctx, rc.GetName(), p) {
			mergeValue(p.Operation, rc, p.Value)
			applied.note(p)
		}
	}
	removed := map[*route.VirtualHost]bool{}
	for i := range rc.VirtualHosts {
		if !patchVirtualHost(ctx, ps, rc, i, applied) {
			removed[rc.VirtualHosts[i]] = true
		}
	}
	for _, p := range ps[networking.EnvoyFilter_VIRTUAL_HOST] {
		if p.Operation == networking.EnvoyFilter_Patch_ADD && p.contextMatch(ctx) && routeConfigurationMatch(ctx, rc.GetName(), p) {
			rc.VirtualHosts = append(rc.VirtualHosts, proto.Clone(p.Value).(*route.VirtualHost))
			applied.note(p)
		}
	}
	if len(removed) > 0 {
		rc.VirtualHosts = slices.DeleteFunc(rc.VirtualHosts, func(vh *route.VirtualHost) bool { return removed[vh] })
	}
}

// patchVirtualHost patches rc's virtual host i; false means REMOVE
// removed it.
func patchVirtualHost(ctx networking.EnvoyFilter_PatchContext, ps Patches, rc *route.RouteConfiguration, i int, applied Applied) bool {
	for _, p := range ps[networking.EnvoyFilter_VIRTUAL_HOST] {
		if !p.contextMatch(ctx) || !routeConfigurationMatch(ctx, rc.GetName(), p) || !virtualHostMatch(rc.VirtualHosts[i], p) {
			continue
		}
		switch {
		case p.Operation == networking.EnvoyFilter_Patch_REMOVE:
			applied.note(p)
			return false
		case isMerge(p.Operation):
			mergeValue(p.Operation, rc.VirtualHosts[i], p.Value)
			applied.note(p)
		case p.Operation == networking.EnvoyFilter_Patch_REPLACE:
			rc.VirtualHosts[i] = proto.Clone(p.Value).(*route.VirtualHost)
			applied.note(p)
		}
	}
	patchHTTPRoutes(ctx, ps, rc, rc.VirtualHosts[i], applied)
	return true
}

func patchHTTPRoutes(ctx networking.EnvoyFilter_PatchContext, ps Patches, rc *route.RouteConfiguration, vh *route.VirtualHost, applied Applied) {
	removed := map[*route.Route]bool{}
	for _, r := range vh.Routes {
		for _, p := range ps[networking.EnvoyFilter_HTTP_ROUTE] {
			if !p.contextMatch(ctx) || !routeConfigurationMatch(ctx, rc.GetName(), p) || !virtualHostMatch(vh, p) || !routeMatch(r, p) {
				continue
			}
			if p.Operation == networking.EnvoyFilter_Patch_REMOVE {
				removed[r] = true
				applied.note(p)
				break
			}
			if isMerge(p.Operation) {
				mergeValue(p.Operation, r, p.Value)
				applied.note(p)
			}
		}
	}
	for _, p := range ps[networking.EnvoyFilter_HTTP_ROUTE] {
		if !p.contextMatch(ctx) || !routeConfigurationMatch(ctx, rc.GetName(), p) || !virtualHostMatch(vh, p) {
			continue
		}
		hasMatch := p.Match.GetRouteConfiguration().GetVhost().GetRoute() != nil
		match := func(r *route.Route) bool { return !removed[r] && routeMatch(r, p) }
		value := func() *route.Route { return proto.Clone(p.Value).(*route.Route) }
		done := true
		switch p.Operation {
		case networking.EnvoyFilter_Patch_ADD:
			vh.Routes = append(vh.Routes, value())
		case networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_INSERT_BEFORE:
			vh.Routes, done = insertRelative(vh.Routes, p.Operation, hasMatch, match, value)
		case networking.EnvoyFilter_Patch_INSERT_FIRST:
			// istiod inserts first only if some route matches (or the
			// patch names none).
			if done = !hasMatch || index(vh.Routes, match) >= 0; done {
				vh.Routes = insertAt(vh.Routes, 0, value())
			}
		default:
			done = false
		}
		if done {
			applied.note(p)
		}
	}
	if len(removed) > 0 {
		vh.Routes = slices.DeleteFunc(vh.Routes, func(r *route.Route) bool { return removed[r] })
	}
}

// routeConfigurationMatch is istiod's, on discovery's names. Gateways'
// route names are istiod's (http.PORT, https.PORT.PORTNAME.GW.NS): name,
// port number, port name and gateway match as there (the port number
// against the route's own port: istiod's gateway port map, which also
// accepts the service port of a target port, is not kept). A sidecar's
// route configuration HOST:PORT (one per service port) stands for the
// virtual host HOST:PORT of istiod's PORT: a name match of "PORT" matches
// every HOST:PORT of that port (and discovery's own PORT, for hosts
// without an address), as does a name match of the exact HOST:PORT; the
// port number is PORT; inbound|PORT|... names carry their port.
func routeConfigurationMatch(ctx networking.EnvoyFilter_PatchContext, name string, p *Patch) bool {
	m := p.Match.GetRouteConfiguration()
	if m == nil {
		return true
	}
	if ctx == networking.EnvoyFilter_GATEWAY {
		if m.GetName() != "" && m.GetName() != name {
			return false
		}
		port, portName, gw := parseGatewayRoute(name)
		return (m.GetPortName() == "" || m.GetPortName() == portName) && (m.GetGateway() == "" || m.GetGateway() == gw) &&
			(m.GetPortNumber() == 0 || int(m.GetPortNumber()) == port)
	}
	port := sidecarRoutePort(name)
	if m.GetName() != "" && m.GetName() != name && (port == 0 || m.GetName() != strconv.Itoa(port)) {
		return false
	}
	return m.GetPortNumber() == 0 || int(m.GetPortNumber()) == port
}

// sidecarRoutePort is the port of a sidecar route configuration name:
// PORT, HOST:PORT or inbound|PORT|SUBSET|HOST (0 for another shape).
func sidecarRoutePort(name string) int {
	if strings.HasPrefix(name, "inbound|") {
		_, _, _, port := parseClusterName(name)
		return port
	}
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	port, _ := strconv.Atoi(name)
	return port
}

// parseGatewayRoute is istiod's ParseGatewayRDSRouteName.
func parseGatewayRoute(name string) (port int, portName, gateway string) {
	if rest, ok := strings.CutPrefix(name, "http."); ok {
		port, _ = strconv.Atoi(rest)
		return port, "", ""
	}
	rest, ok := strings.CutPrefix(name, "https.")
	if !ok || strings.Count(name, ".") != 4 {
		return 0, "", ""
	}
	parts := strings.SplitN(rest, ".", 4)
	port, _ = strconv.Atoi(parts[0])
	return port, parts[1], parts[3] + "/" + parts[2]
}

func virtualHostMatch(vh *route.VirtualHost, p *Patch) bool {
	m := p.Match.GetRouteConfiguration().GetVhost()
	if m == nil {
		return true
	}
	return (m.GetName() == "" || m.GetName() == vh.GetName()) && (m.GetDomainName() == "" || slices.Contains(vh.GetDomains(), m.GetDomainName()))
}

func routeMatch(r *route.Route, p *Patch) bool {
	m := p.Match.GetRouteConfiguration().GetVhost().GetRoute()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != r.GetName() {
		return false
	}
	if m.GetAction() == networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ANY {
		return true
	}
	switch r.GetAction().(type) {
	case *route.Route_Route:
		return m.GetAction() == networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE
	case *route.Route_Redirect:
		return m.GetAction() == networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_REDIRECT
	case *route.Route_DirectResponse:
		return m.GetAction() == networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_DIRECT_RESPONSE
	}
	return true
}
