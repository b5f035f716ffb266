package kube

import (
	"testing"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioscheme "istio.io/client-go/pkg/clientset/versioned/scheme"
)

// The kube source's typed informers decode what the API server sends with
// istio.io/client-go's codecs, whose specs use Istio's own JSON decoder:
// Go-style durations (3m) are read there as istiod reads them (issue 14).
func TestTheTypedClientsDecodeGoDurations(t *testing.T) {
	body := []byte(`{"apiVersion":"networking.istio.io/v1","kind":"DestinationRule",
		"metadata":{"name":"d","namespace":"default"},
		"spec":{"host":"r","trafficPolicy":{"outlierDetection":{"baseEjectionTime":"3m","interval":"500ms"},
		"connectionPool":{"tcp":{"connectTimeout":"1m30s"}}}}}`)
	obj, _, err := istioscheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	dr, ok := obj.(*networkingv1.DestinationRule)
	if !ok {
		t.Fatalf("decoded a %T", obj)
	}
	od := dr.Spec.GetTrafficPolicy().GetOutlierDetection()
	if got := od.GetBaseEjectionTime().AsDuration(); got != 3*time.Minute {
		t.Errorf("baseEjectionTime = %s, want 3m", got)
	}
	if got := od.GetInterval().AsDuration(); got != 500*time.Millisecond {
		t.Errorf("interval = %s, want 500ms", got)
	}
	if got := dr.Spec.GetTrafficPolicy().GetConnectionPool().GetTcp().GetConnectTimeout().AsDuration(); got != 90*time.Second {
		t.Errorf("connectTimeout = %s, want 1m30s", got)
	}
}
