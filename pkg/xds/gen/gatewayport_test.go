package gen

import (
	"slices"
	"testing"
)

// The conformance suite found gateways listening on a Gateway server's
// port where istiod listens on the gateway Service's targetPort for it.
func TestGatewayListensOnTheServiceTargetPort(t *testing.T) {
	const gateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*"]
---
`
	tests := map[string]struct {
		labels, ports string // the gateway Service's
		want          string
	}{
		"a Service port 80 -> 8080 puts the server's listener on 8080": {
			ports: "[{name: http, port: 80, targetPort: 8080}]", want: "0.0.0.0_8080",
		},
		"without a Service port of the server's number the number itself is used": {
			ports: "[{name: http, port: 81, targetPort: 8081}]", want: "0.0.0.0_80",
		},
		"the opt-out label keeps the server's number": {
			labels: "{experimental.istio.io/disable-gateway-port-translation: \"true\"}",
			ports:  "[{name: http, port: 80, targetPort: 8080}]", want: "0.0.0.0_80",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			labels := tc.labels
			if labels == "" {
				labels = "{}"
			}
			svc := "apiVersion: v1\nkind: Service\nmetadata: {name: ingress, namespace: istio-system, labels: " + labels +
				"}\nspec:\n  selector: {istio: ingressgateway}\n  ports: " + tc.ports + "\n"
			w := loadWorld(t, gateway+svc).World()
			p := labelled(t, "router", "istio-system", map[string]string{"istio": "ingressgateway"})
			cc, err := newForTest(quietLog()).Class(w, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if names := cc.Sets[ListenerType].Names; !slices.Contains(names, tc.want) {
				t.Errorf("listeners %v, want %s", names, tc.want)
			}
		})
	}
}
