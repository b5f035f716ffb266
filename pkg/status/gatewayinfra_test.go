package status

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

func gatewayReport() *gatewayapi.Report {
	return &gatewayapi.Report{Generation: 3, Conditions: []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 3},
		{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed", Message: "translation", ObservedGeneration: 3},
	}}
}

func TestWithInfraReplacesProgrammedAndAddsAddresses(t *testing.T) {
	host := gw.HostnameAddressType
	rep := gatewayReport()
	out := withInfra(rep, GatewayInfra{
		Addresses:  []gw.GatewayStatusAddress{{Type: &host, Value: "web-istio.shop.svc.cluster.local"}},
		Programmed: metav1.Condition{Status: metav1.ConditionFalse, Reason: "AddressNotAssigned", Message: "no instances"},
	})
	p := out.Conditions[1]
	if p.Type != "Programmed" || p.Status != metav1.ConditionFalse || p.Reason != "AddressNotAssigned" || p.ObservedGeneration != 3 {
		t.Errorf("Programmed %+v", p)
	}
	if out.Conditions[0].Reason != "Accepted" || len(out.Addresses) != 1 {
		t.Errorf("conditions %+v addresses %+v", out.Conditions, out.Addresses)
	}
	if rep.Conditions[1].Reason != "Programmed" || rep.Addresses != nil {
		t.Error("the World's report was changed")
	}
}

func TestMergeGatewayStatusAddresses(t *testing.T) {
	cur := map[string]any{"addresses": []any{map[string]any{"type": "IPAddress", "value": "10.0.0.1"}}}
	// Without addresses in the report, what is there stays.
	next, _, err := mergeGatewayStatus(model.KindKubernetesGateway, cur, gatewayReport(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if a := list(next["addresses"]); len(a) != 1 || a[0].(map[string]any)["value"] != "10.0.0.1" {
		t.Errorf("addresses %v, want the existing ones kept", next["addresses"])
	}
	ip := gw.IPAddressType
	rep := gatewayReport()
	rep.Addresses = []gw.GatewayStatusAddress{{Type: &ip, Value: "203.0.113.7"}}
	next, changed, err := mergeGatewayStatus(model.KindKubernetesGateway, cur, rep, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if a := list(next["addresses"]); !changed || len(a) != 1 || a[0].(map[string]any)["value"] != "203.0.113.7" {
		t.Errorf("changed %v addresses %v, want the report's", changed, next["addresses"])
	}
	if _, changed, _ := mergeGatewayStatus(model.KindKubernetesGateway, next, rep, time.Time{}); changed {
		t.Error("a status that says the report's addresses is not in step")
	}
}
