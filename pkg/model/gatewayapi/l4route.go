package gatewayapi

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

// translateTCPRoute converts a TCPRoute bound to a Gateway's TCP (or TLS
// Terminate) listener: each rule one Istio TCP route to its weighted
// backends, as istiod's convertTCPRoute. Connections take the first rule
// (TCP has nothing to match), the oldest route's when several attach.
func (t *translator) translateTCPRoute(r *gw.TCPRoute) {
	ri := &routeInfo{
		ref:        Ref{Kind: KindTCPRoute, Namespace: r.Namespace, Name: r.Name},
		generation: r.Generation, parents: r.Spec.ParentRefs, resolvedOK: true,
	}
	var denied []string
	for n, rr := range r.Spec.Rules {
		s := &ruleState{ri: ri, field: fmt.Sprintf("spec.rules[%d]", n)}
		dst, d := t.l4Destinations(s, r.Namespace, rr.BackendRefs)
		denied = append(denied, d...)
		ri.tcp = append(ri.tcp, &networking.TCPRoute{Route: dst})
	}
	t.finishL4(ri, denied)
}

// translateTLSRoute converts a TLSRoute bound to a Gateway's TLS
// Passthrough listener: each rule one Istio TLS route to its weighted
// backends, matched on the SNI of each hostname it shares with the
// listener (one VirtualService per hostname, as istiod writes them).
func (t *translator) translateTLSRoute(r *gw.TLSRoute) {
	ri := &routeInfo{
		ref:        Ref{Kind: KindTLSRoute, Namespace: r.Namespace, Name: r.Name},
		generation: r.Generation, parents: r.Spec.ParentRefs, hostnames: r.Spec.Hostnames, resolvedOK: true,
	}
	var denied []string
	for n, rr := range r.Spec.Rules {
		s := &ruleState{ri: ri, field: fmt.Sprintf("spec.rules[%d]", n)}
		dst, d := t.l4Destinations(s, r.Namespace, rr.BackendRefs)
		denied = append(denied, d...)
		ri.tls = append(ri.tls, &networking.TLSRoute{Route: dst})
	}
	t.finishL4(ri, denied)
}

func (t *translator) finishL4(ri *routeInfo, denied []string) {
	t.attach(ri)
	if rep := t.out.Reports[ri.ref]; rep != nil {
		rep.Denied = append(rep.Denied, denied...)
	}
}

// zeroWeight is istiod's destination for a rule without a backend of
// weight above 0: a host no registry has, so the connection finds no
// cluster and is closed, as the spec asks.
var zeroWeight = []*networking.RouteDestination{{
	Destination: &networking.Destination{Host: "internal.cluster.local", Subset: "zero-weight", Port: &networking.PortSelector{Number: 65535}},
}}

// l4Destinations converts a TCP or TLS rule's weighted backendRefs.
// Weight 0 is left out. A backend that cannot be resolved keeps its
// share, routed where no cluster is (unresolved), so that its share of
// connections is closed instead of moving to the other backends, as the
// spec asks and istiod's buildTCPDestination does; a denied reference is
// reported. A rule left without any backend of weight closes its
// connections (zeroWeight).
func (t *translator) l4Destinations(s *ruleState, ns string, refs []gw.BackendRef) (out []*networking.RouteDestination, denied []string) {
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
		out = append(out, &networking.RouteDestination{Destination: dst, Weight: w})
	}
	if len(out) == 0 {
		return zeroWeight, denied
	}
	if len(out) == 1 {
		out[0].Weight = 0 // all of it, as istiod writes a single destination
	}
	return out, denied
}
