package gatewayapi

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

// backend resolves a backendRef of a route of namespace ns to a
// destination; nil with the ResolvedRefs reason and message when it is
// not usable.
func (t *translator) backend(s *ruleState, ns string, ref gw.BackendObjectReference) (*networking.Destination, string, string) {
	group, kind := string(ptrOr(ref.Group, "")), string(ptrOr(ref.Kind, "Service"))
	if group != "" || kind != "Service" {
		return nil, string(gw.RouteReasonInvalidKind), fmt.Sprintf("backendRef %s/%s %s: only Services are supported", group, kind, ref.Name)
	}
	to := string(ptrOr(ref.Namespace, gw.Namespace(ns)))
	if !s.mesh && !t.grants.allowed(gw.GroupName, s.ri.ref.Kind, ns, "", "Service", to, string(ref.Name)) {
		return nil, string(gw.RouteReasonRefNotPermitted),
			fmt.Sprintf("backendRef Service %s/%s is not permitted to a %s of namespace %s (no ReferenceGrant)", to, ref.Name, s.ri.ref.Kind, ns)
	}
	if ref.Port == nil {
		return nil, string(gw.RouteReasonUnsupportedValue), fmt.Sprintf("backendRef Service %s/%s: port is required", to, ref.Name)
	}
	if _, ok := t.in.Service(to, string(ref.Name)); !ok {
		return nil, string(gw.RouteReasonBackendNotFound), fmt.Sprintf("backend Service %s/%s not found", to, ref.Name)
	}
	return &networking.Destination{
		Host: string(ref.Name) + "." + to + ".svc." + t.in.DomainSuffix,
		Port: &networking.PortSelector{Number: uint32(*ref.Port)},
	}, "", ""
}

// unresolvedHost is the destination host of a backendRef that is denied
// (no ReferenceGrant) or of a kind discovery does not route to. Its
// underscore makes it no DNS name, so no Service or valid ServiceEntry
// can ever own it: its cluster never exists, and Envoy answers 500 for
// the backend's share (the generator sets cluster_not_found_response_code
// on the routes of Gateway API VirtualServices, as istiod on routes of
// gateway semantics). istiod writes an empty destination there, which
// its route builder names UnknownService, with the same 500.
const unresolvedHost = "unresolved_backend.gateway-api.invalid"

// unresolved is the destination of a backendRef that backend did not
// resolve (reason is its ResolvedRefs reason): as istiod keeps it in the
// weighted set, so that its share of requests fails instead of moving to
// the other backends. A Service that is not found keeps its own host (as
// istiod's); its cluster does not exist until the Service does.
func (t *translator) unresolved(ns string, ref gw.BackendObjectReference, reason string) *networking.Destination {
	d := &networking.Destination{Host: unresolvedHost}
	if reason == string(gw.RouteReasonBackendNotFound) {
		d.Host = string(ref.Name) + "." + string(ptrOr(ref.Namespace, gw.Namespace(ns))) + ".svc." + t.in.DomainSuffix
	}
	if ref.Port != nil {
		d.Port = &networking.PortSelector{Number: uint32(*ref.Port)}
	}
	return d
}

// httpDestinations converts weighted backendRefs. Weight 0 is left out;
// one backend gets weight 0 (all of it), as istiod writes. A backend that
// cannot be resolved keeps its share, routed where no cluster is (Envoy
// answers 500 for it, as for istiod's: unresolved); a denied reference
// is reported as Denied.
func (t *translator) httpDestinations(s *ruleState, ns string, refs []gw.HTTPBackendRef) (out []*networking.HTTPRouteDestination, unsupported, denied []string) {
	for i, b := range refs {
		w := ptrOr(b.Weight, 1)
		if w == 0 {
			continue
		}
		dst, reason, msg := t.backend(s, ns, b.BackendObjectReference)
		if dst == nil {
			s.unresolved(reason, msg)
			if reason == string(gw.RouteReasonRefNotPermitted) {
				denied = append(denied, fmt.Sprintf("%s.backendRefs[%d]: %s", s.field, i, msg))
			}
			dst = t.unresolved(ns, b.BackendObjectReference, reason)
		}
		rd := &networking.HTTPRouteDestination{Destination: dst, Weight: w}
		for j, f := range b.Filters {
			switch f.Type {
			case gw.HTTPRouteFilterRequestHeaderModifier:
				if rd.Headers == nil {
					rd.Headers = &networking.Headers{}
				}
				rd.Headers.Request = headerOps(f.RequestHeaderModifier)
			case gw.HTTPRouteFilterResponseHeaderModifier:
				if rd.Headers == nil {
					rd.Headers = &networking.Headers{}
				}
				rd.Headers.Response = headerOps(f.ResponseHeaderModifier)
			default:
				// Fail closed: this backend gets no traffic.
				d := fmt.Sprintf("%s.backendRefs[%d].filters[%d]: filter %s is not supported on a backend by discovery; the backend is left out", s.field, i, j, f.Type)
				unsupported, denied = append(unsupported, d), append(denied, d)
				rd = nil
			}
			if rd == nil {
				break
			}
		}
		if rd != nil {
			out = append(out, rd)
		}
	}
	if len(out) == 1 {
		out[0].Weight = 0
	}
	return out, unsupported, denied
}

// grpcDestinations is httpDestinations for a GRPCRoute.
func (t *translator) grpcDestinations(s *ruleState, ns string, refs []gw.GRPCBackendRef) ([]*networking.HTTPRouteDestination, []string, []string) {
	conv := make([]gw.HTTPBackendRef, 0, len(refs))
	var unsupported, denied []string
	for i, b := range refs {
		hb := gw.HTTPBackendRef{BackendRef: b.BackendRef}
		for j, f := range b.Filters {
			switch f.Type {
			case gw.GRPCRouteFilterRequestHeaderModifier:
				hb.Filters = append(hb.Filters, gw.HTTPRouteFilter{Type: gw.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: f.RequestHeaderModifier})
			case gw.GRPCRouteFilterResponseHeaderModifier:
				hb.Filters = append(hb.Filters, gw.HTTPRouteFilter{Type: gw.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: f.ResponseHeaderModifier})
			default:
				d := fmt.Sprintf("%s.backendRefs[%d].filters[%d]: filter %s is not supported on a backend by discovery; the backend is left out", s.field, i, j, f.Type)
				unsupported, denied = append(unsupported, d), append(denied, d)
				hb.Weight = new(int32) // weight 0: left out
			}
		}
		conv = append(conv, hb)
	}
	out, u, d := t.httpDestinations(s, ns, conv)
	return out, append(unsupported, u...), append(denied, d...)
}

// mirror converts RequestMirror; an unusable backend mirrors nothing.
func (t *translator) mirror(s *ruleState, ns string, f *gw.HTTPRequestMirrorFilter) *networking.HTTPMirrorPolicy {
	if f == nil {
		return nil
	}
	dst, reason, msg := t.backend(s, ns, f.BackendRef)
	if dst == nil {
		s.unresolved(reason, msg)
		return nil
	}
	out := &networking.HTTPMirrorPolicy{Destination: dst}
	switch {
	case f.Fraction != nil:
		out.Percentage = &networking.Percent{Value: 100 * float64(f.Fraction.Numerator) / float64(ptrOr(f.Fraction.Denominator, 100))}
	case f.Percent != nil:
		out.Percentage = &networking.Percent{Value: float64(*f.Percent)}
	}
	return out
}
