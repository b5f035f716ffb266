package validate

import (
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// unsupported lists the fields of spec that Istio accepts but discovery
// does not act on yet, as AdmissionReview warnings. VirtualService and
// DestinationRule fields come from the xDS generator itself
// (gen.UnsupportedFields); keep the rest in step with the generators: a
// field leaves the list when its generator lands.
func unsupported(kind string, spec proto.Message) []string {
	var w []string
	warn := func(cond bool, field, what string) {
		if cond {
			w = append(w, kind+" "+field+": "+what+" is not supported by discovery yet and has no effect")
		}
	}
	switch s := spec.(type) {
	case *networking.VirtualService, *networking.DestinationRule:
		// The xDS generator's own list of the fields it acts on decides.
		for _, f := range gen.UnsupportedFields(model.Kind(kind), s) {
			warn(true, "spec."+f, "this field")
		}
	case *networking.Sidecar:
		warn(s.GetOutboundTrafficPolicy().GetEgressProxy() != nil, "spec.outboundTrafficPolicy.egressProxy", "an egress proxy")
		warn(s.InboundConnectionPool != nil, "spec.inboundConnectionPool", "an inbound connection pool")
	case *networking.ServiceEntry:
		warn(s.WorkloadSelector != nil, "spec.workloadSelector", "selecting workloads")
	case *security.AuthorizationPolicy:
		warn(s.Action == security.AuthorizationPolicy_CUSTOM, "spec.action", "CUSTOM (external authorization)")
		warn(s.TargetRef != nil || len(s.TargetRefs) > 0, "spec.targetRef", "attaching to a gateway or waypoint")
	case *security.RequestAuthentication:
		for _, r := range s.JwtRules {
			warn(len(r.OutputClaimToHeaders) > 0, "spec.jwtRules[].outputClaimToHeaders", "copying claims to headers")
		}
		warn(s.TargetRef != nil || len(s.TargetRefs) > 0, "spec.targetRef", "attaching to a gateway or waypoint")
	}
	return dedupe(w)
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
