package gen

import (
	"testing"

	networking "istio.io/api/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// TestGatewayTCPRouteSourceMatches: a tcp route match's sourceLabels and
// sourceNamespace are the gateway pod's own, as on sidecars.
func TestGatewayTCPRouteSourceMatches(t *testing.T) {
	p, err := model.ParseProxy("router~10.1.0.9~gw-1.edge~edge.svc.cluster.local",
		map[string]any{"LABELS": map[string]any{"istio": "ingressgateway", "zone": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		match *networking.L4MatchAttributes
		want  bool
	}{
		{"no source", &networking.L4MatchAttributes{Port: 9000}, true},
		{"labels of the pod", &networking.L4MatchAttributes{Port: 9000, SourceLabels: map[string]string{"zone": "a"}}, true},
		{"other labels", &networking.L4MatchAttributes{Port: 9000, SourceLabels: map[string]string{"zone": "b"}}, false},
		{"its namespace", &networking.L4MatchAttributes{SourceNamespace: "edge"}, true},
		{"another namespace", &networking.L4MatchAttributes{SourceNamespace: "shop"}, false},
		{"another port", &networking.L4MatchAttributes{Port: 9001, SourceLabels: map[string]string{"zone": "a"}}, false},
	} {
		r := &networking.TCPRoute{Match: []*networking.L4MatchAttributes{tc.match}}
		if got := gatewayTCPRouteHolds(r, "edge", 9000, "edge/gw", p); got != tc.want {
			t.Errorf("%s: holds = %v, want %v", tc.name, got, tc.want)
		}
	}
}
