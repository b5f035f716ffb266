package model

import "testing"

// istiod's GetTrafficDistribution: a known spec value, else the
// Service's annotation (an unknown one is Any, which the namespace does
// not override), else the namespace's.
func TestTrafficDistributionPrecedence(t *testing.T) {
	str := func(s string) *string { return &s }
	ann := func(v string) map[string]string { return map[string]string{AnnotationTrafficDistribution: v} }
	for name, tc := range map[string]struct {
		spec    *string
		svc, ns map[string]string
		want    TrafficDistribution
	}{
		"nothing":                         {want: TrafficDistributionAny},
		"PreferClose":                     {spec: str("PreferClose"), want: TrafficDistributionPreferSameZone},
		"PreferSameNode over annotations": {spec: str("PreferSameNode"), svc: ann("PreferClose"), want: TrafficDistributionPreferSameNode},
		"an unknown spec value: the annotation decides": {spec: str("PreferSameRack"), svc: ann("preferclose"), want: TrafficDistributionPreferSameZone},
		"an unknown annotation is Any":                  {svc: ann("nearby"), ns: ann("PreferSameNode"), want: TrafficDistributionAny},
		"the namespace's":                               {ns: ann("PREFERSAMENODE"), want: TrafficDistributionPreferSameNode},
	} {
		t.Run(name, func(t *testing.T) {
			w := &World{namespaces: map[string]*Namespace{"ns": {Name: "ns", TrafficDistribution: trafficDistribution(nil, tc.ns)}}}
			s := &Service{Name: "s", Namespace: "ns", TrafficDistribution: trafficDistribution(tc.spec, tc.svc)}
			if got := w.TrafficDistribution(s); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			w.services = map[NamespacedName]*Service{s.Key(): s}
			zone, node := w.TrafficDistributionsInUse()
			if zone != (tc.want == TrafficDistributionPreferSameZone) || node != (tc.want == TrafficDistributionPreferSameNode) {
				t.Errorf("in use: zone %v node %v, want %q", zone, node, tc.want)
			}
		})
	}
}
