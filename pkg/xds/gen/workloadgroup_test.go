package gen

import (
	"strings"
	"testing"

	apinetworking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

func TestWorkloadGroupFields(t *testing.T) {
	if !ReadsKind(model.KindWorkloadGroup) || UnreadKindNote(model.KindWorkloadGroup) != "" {
		t.Fatal("WorkloadGroup is reported as a kind without effect; auto-registration reads it")
	}
	spec := &apinetworking.WorkloadGroup{
		Metadata: &apinetworking.WorkloadGroup_ObjectMeta{Labels: map[string]string{"app": "a"}, Annotations: map[string]string{"x": "y"}},
		Template: &apinetworking.WorkloadEntry{
			Address: "10.0.0.1", Network: "vpc1", ServiceAccount: "vm", Ports: map[string]uint32{"http": 80},
			Labels: map[string]string{"v": "1"}, Locality: "r/z", Weight: 2,
		},
		Probe: &apinetworking.ReadinessProbe{PeriodSeconds: 5},
	}
	got := strings.Join(UnsupportedFields(model.KindWorkloadGroup, spec), ",")
	// The address is replaced by the proxy's, the network is what an
	// entry's generation ignores.
	if got != "template.address,template.network" {
		t.Errorf("UnsupportedFields = %q, want template.address,template.network", got)
	}
}
