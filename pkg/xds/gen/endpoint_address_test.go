package gen

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// TestLoadAssignmentCarriesAddressesOnly: an endpoint named by a host name
// (a ServiceEntry's DNS endpoint, seen by a gateway through EDS) is left
// out of the ClusterLoadAssignment, which Envoy would otherwise reject;
// IPv4 and IPv6 addresses stay.
func TestLoadAssignmentCarriesAddressesOnly(t *testing.T) {
	ports := []model.EndpointPort{{Name: "tcp", Port: 9000}}
	eps := &model.ServiceEndpoints{Endpoints: []*model.Endpoint{
		{Address: "10.1.0.1", Ports: ports, Ready: true},
		{Address: "db.example.com", Ports: ports, Ready: true},
		{Address: "fd00::1", Ports: ports, Ready: true},
	}}
	cla := loadAssignment("outbound|9000||db", model.Port{Name: "tcp", Port: 9000}, eps, nil)
	var got []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			got = append(got, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	if len(got) != 2 || got[0] != "10.1.0.1" || got[1] != "fd00::1" {
		t.Fatalf("endpoints %v, want the two addresses only", got)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Fatal(err)
	}
}
