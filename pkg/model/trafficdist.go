package model

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// TrafficDistribution is a service's preference for endpoints near the
// client: Kubernetes' Service spec.trafficDistribution, or Istio's
// networking.istio.io/traffic-distribution annotation on the Service (or
// ServiceEntry) or its Namespace. istiod turns a preference into locality
// load balancing with a fixed failoverPriority (GetEffectiveLbSetting),
// below a DestinationRule's localityLbSetting and above the MeshConfig's.
type TrafficDistribution string

const (
	// TrafficDistributionUnset: the object says nothing; the namespace
	// decides (a Service's and a Namespace's field only).
	TrafficDistributionUnset TrafficDistribution = ""
	// TrafficDistributionAny: no preference, or a value Istio does not
	// know (istiod logs a warning and treats it so).
	TrafficDistributionAny TrafficDistribution = "Any"
	// TrafficDistributionPreferSameZone: PreferSameZone, or its older name
	// PreferClose.
	TrafficDistributionPreferSameZone TrafficDistribution = "PreferSameZone"
	// TrafficDistributionPreferSameNode: PreferSameNode.
	TrafficDistributionPreferSameNode TrafficDistribution = "PreferSameNode"
)

// AnnotationTrafficDistribution is Istio's annotation for a traffic
// distribution, on a Service, a ServiceEntry or a Namespace.
const AnnotationTrafficDistribution = "networking.istio.io/traffic-distribution"

// trafficDistribution is what an object says of its traffic distribution,
// in istiod's order: a known spec value, else the annotation (compared
// without case; an unknown value is Any, not unset), else unset.
func trafficDistribution(spec *string, annotations map[string]string) TrafficDistribution {
	if spec != nil {
		switch *spec {
		case corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferClose:
			return TrafficDistributionPreferSameZone
		case corev1.ServiceTrafficDistributionPreferSameNode:
			return TrafficDistributionPreferSameNode
		}
		// Another spec value (one a newer Kubernetes adds) is passed
		// over, as istiod does: the annotations decide.
	}
	v := annotations[AnnotationTrafficDistribution]
	if v == "" {
		return TrafficDistributionUnset
	}
	switch {
	case strings.EqualFold(v, corev1.ServiceTrafficDistributionPreferClose), strings.EqualFold(v, corev1.ServiceTrafficDistributionPreferSameZone):
		return TrafficDistributionPreferSameZone
	case strings.EqualFold(v, corev1.ServiceTrafficDistributionPreferSameNode):
		return TrafficDistributionPreferSameNode
	}
	return TrafficDistributionAny
}

// TrafficDistribution is the traffic distribution in force for s: its
// own, else its namespace's, else Any.
func (w *World) TrafficDistribution(s *Service) TrafficDistribution {
	if s == nil {
		return TrafficDistributionAny
	}
	if s.TrafficDistribution != TrafficDistributionUnset {
		return s.TrafficDistribution
	}
	if ns := w.Namespace(s.Namespace); ns != nil && ns.TrafficDistribution != TrafficDistributionUnset {
		return ns.TrafficDistribution
	}
	return TrafficDistributionAny
}

// TrafficDistributionsInUse reports which preferences some service of w
// has in force (its own or its namespace's): what generation must tell
// proxies apart by. It visits every service once, allocating nothing.
func (w *World) TrafficDistributionsInUse() (sameZone, sameNode bool) {
	nsTD := false
	for _, ns := range w.namespaces {
		if ns.TrafficDistribution != TrafficDistributionUnset {
			nsTD = true
			break
		}
	}
	for _, s := range w.services {
		td := s.TrafficDistribution
		if td == TrafficDistributionUnset && nsTD {
			td = w.TrafficDistribution(s)
		}
		switch td {
		case TrafficDistributionPreferSameZone:
			sameZone = true
		case TrafficDistributionPreferSameNode:
			sameNode = true
		}
		if sameZone && sameNode {
			return
		}
	}
	return
}
