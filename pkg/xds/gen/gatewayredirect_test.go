package gen

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// The conformance suite found a gateway HTTP server with
// tls.httpsRedirect and no VirtualService answering 404 where istiod
// answers 301: istiod adds a TLS-requiring virtual host per server host
// that no VirtualService covered.
func TestGatewayHTTPSRedirectWithoutVirtualService(t *testing.T) {
	const base = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["a.example.com", "istio-system/b.example.com"]
    tls: {httpsRedirect: true}
`
	const vs = `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: istio-system}
spec:
  hosts: ["a.example.com"]
  gateways: ["gw"]
  http:
  - route:
    - destination: {host: a.default.svc.cluster.local}
`
	tests := map[string]struct {
		input string
		want  map[string]bool // virtual host name -> has routes
	}{
		"no VirtualService: a redirecting host each, no blackhole": {
			input: base, want: map[string]bool{"a.example.com": false, "b.example.com": false},
		},
		"a VirtualService for one host: its routes kept, the other host redirects": {
			input: base + vs, want: map[string]bool{"a.example.com": true, "b.example.com": false},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := loadWorld(t, tc.input).World()
			p := labelled(t, "router", "istio-system", map[string]string{"istio": "ingressgateway"})
			cc, err := newForTest(quietLog()).Class(w, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := cc.Sets[RouteType].Get("http.80")
			if r == nil {
				t.Fatalf("no route http.80: %v", cc.Sets[RouteType].Names)
			}
			var rc routev3.RouteConfiguration
			if err := r.Any.UnmarshalTo(&rc); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, vh := range rc.VirtualHosts {
				if vh.RequireTls != routev3.VirtualHost_ALL {
					t.Errorf("virtual host %s does not require TLS", vh.Name)
				}
				got[vh.Name] = len(vh.Routes) > 0
			}
			if len(got) != len(tc.want) {
				t.Errorf("virtual hosts %v, want %v", got, tc.want)
			}
			for h, routed := range tc.want {
				if r, ok := got[h]; !ok || r != routed {
					t.Errorf("virtual host %s: present %v, routed %v; want routed %v", h, ok, r, routed)
				}
			}
		})
	}
}
