package file

import (
	"strings"
	"testing"

	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// A config directory carries Telemetry (v1 and v1alpha1, judged as
// /validate judges it) and the mesh's ConfigMap.
func TestParseTelemetryAndTheMeshConfigMap(t *testing.T) {
	objs, errs := Parse("t.yaml", []byte(`apiVersion: telemetry.istio.io/v1alpha1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  metrics:
  - providers: [{name: prometheus}]
    reportingInterval: 30s
---
apiVersion: v1
kind: ConfigMap
metadata: {name: istio, namespace: istio-system}
data:
  mesh: "accessLogFile: /dev/stdout"
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: bad, namespace: default}
spec:
  accessLogging:
  - filter: {expression: "response.code >="}
`))
	if len(objs) != 2 {
		t.Fatalf("objects %v, errors %v", objs, errs)
	}
	if objs[0].Key != (model.Key{Kind: model.KindTelemetry, Namespace: "istio-system", Name: "mesh-default"}) {
		t.Errorf("key %v", objs[0].Key)
	}
	tel := objs[0].Object.(*telemetryv1.Telemetry)
	if tel.Spec.GetMetrics()[0].GetReportingInterval().AsDuration().Seconds() != 30 {
		t.Errorf("telemetry %v", &tel.Spec)
	}
	if cm := objs[1].Object.(*corev1.ConfigMap); objs[1].Key.Kind != model.KindConfigMap || cm.Data["mesh"] == "" {
		t.Errorf("ConfigMap %v", objs[1])
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "CEL") {
		t.Errorf("errors %v, want the invalid filter", errs)
	}
}
