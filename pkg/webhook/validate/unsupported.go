package validate

import (
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
)

// unsupported lists the fields of spec that Istio accepts but discovery
// does not act on yet, as AdmissionReview warnings. Keep this list in step
// with the xDS generators: a field leaves it when its generator lands.
func unsupported(kind string, spec proto.Message) []string {
	var w []string
	warn := func(cond bool, field, what string) {
		if cond {
			w = append(w, kind+" "+field+": "+what+" is not supported by discovery yet and has no effect")
		}
	}
	switch s := spec.(type) {
	case *networking.VirtualService:
		for _, r := range s.Http {
			warn(r.Delegate != nil, "spec.http[].delegate", "delegation")
			warn(r.Mirror != nil || len(r.Mirrors) > 0, "spec.http[].mirror", "traffic mirroring")
			warn(r.Fault != nil, "spec.http[].fault", "fault injection")
			warn(r.CorsPolicy != nil, "spec.http[].corsPolicy", "CORS")
		}
	case *networking.DestinationRule:
		tp := s.TrafficPolicy
		warn(tp.GetTunnel() != nil, "spec.trafficPolicy.tunnel", "tunnelling")
		warn(tp.GetProxyProtocol() != nil, "spec.trafficPolicy.proxyProtocol", "PROXY protocol")
		warn(tp.GetRetryBudget() != nil, "spec.trafficPolicy.retryBudget", "a retry budget")
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
