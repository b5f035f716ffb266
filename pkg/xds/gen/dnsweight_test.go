package gen

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// The conformance suite found DNS cluster endpoints without the
// ServiceEntry endpoint's weight, which istiod carries (conformance D3).
func TestDNSAssignmentCarriesEndpointWeights(t *testing.T) {
	svc := &model.Service{Hostname: "backend.example.com"}
	port := model.Port{Name: "http", Port: 8080, TargetPort: "8080"}
	eps := &model.ServiceEndpoints{Endpoints: []*model.Endpoint{
		{Address: "eu.backend.example.com", Weight: 3},
		{Address: "us.backend.example.com"},
	}}
	cla := dnsAssignment("outbound|8080||backend.example.com", svc, port, eps, nil, false)
	lbs := cla.Endpoints[0].LbEndpoints
	if len(lbs) != 2 {
		t.Fatalf("%d endpoints, want 2", len(lbs))
	}
	if w := lbs[0].GetLoadBalancingWeight().GetValue(); w != 3 {
		t.Errorf("eu endpoint weight %d, want 3", w)
	}
	// Unset is 1 to Envoy; discovery leaves it unset.
	if w := lbs[1].GetLoadBalancingWeight(); w != nil && w.GetValue() != 1 {
		t.Errorf("us endpoint weight %d, want 1 or unset", w.GetValue())
	}
}
