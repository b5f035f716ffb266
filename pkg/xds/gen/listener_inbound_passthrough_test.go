package gen

import (
	"slices"
	"strings"
	"testing"
)

// passthroughWorld: a workload with one HTTP port (9080), in mode MODE,
// whose PeerAuthentication also names port 7777, which no service
// declares, and an ALLOW policy.
const passthroughWorld = `apiVersion: v1
kind: Service
metadata: {name: legacy, namespace: default, resourceVersion: "1"}
spec:
  clusterIP: 10.96.0.30
  selector: {app: legacy}
  ports: [{port: 9080, name: http}]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: legacy, namespace: default}
spec:
  selector: {matchLabels: {app: legacy}}
  mtls: {mode: MODE}
  portLevelMtls: {7777: {mode: DISABLE}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: legacy, namespace: default}
spec:
  selector: {matchLabels: {app: legacy}}
  rules: [{from: [{source: {namespaces: [default]}}]}]
`

// TestInboundPassthroughChains: traffic to a port no chain declares takes
// istiod's passthrough chains (buildInboundPassthroughChains): sniffed in
// the workload's mode, HTTP through an HttpConnectionManager with the HTTP
// RBAC filters and TCP with the network ones, to InboundPassthroughCluster;
// a port-level mode of an undeclared port gets its own; 15006 itself goes
// to the black hole. Before, the passthrough was one TCP default chain, so
// that PERMISSIVE passed Istio mTLS to an undeclared port through to the
// application undecrypted (conformance: sidecar-without-service).
func TestInboundPassthroughChains(t *testing.T) {
	const (
		mtlsHTTP = "alpn=istio-http/1.0,istio-http/1.1,istio-h2"
		mtlsTCP  = "alpn=istio-peer-exchange,istio"
		http     = "virtualInbound-catchall-http"
		tcp      = "virtualInbound"
		hcm      = "hcm inline InboundPassthroughCluster"
		proxy    = "tcp InboundPassthroughCluster"
	)
	perPort := []string{
		http + " [port=7777 raw_buffer alpn=http/1.1,h2c] " + hcm,
		tcp + " [port=7777 raw_buffer] " + proxy,
	}
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"PERMISSIVE", []string{
			http + " [tls " + mtlsHTTP + "] " + hcm + " +tls",
			http + " [raw_buffer alpn=http/1.1,h2c] " + hcm,
			tcp + " [tls " + mtlsTCP + "] " + proxy + " +tls",
			tcp + " [raw_buffer] " + proxy,
			tcp + " [tls] " + proxy,
		}},
		{"STRICT", []string{
			http + " [tls " + mtlsHTTP + "] " + hcm + " +tls",
			tcp + " [tls] " + proxy + " +tls",
		}},
		{"DISABLE", []string{
			http + " [raw_buffer alpn=http/1.1,h2c] " + hcm,
			tcp + " [raw_buffer] " + proxy,
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			w := loadWorld(t, strings.ReplaceAll(passthroughWorld, "MODE", tc.mode)).World()
			p := legacyProxy(t)
			g := newForTest(quietLog())
			cc, err := g.Class(w, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			l := classListener(t, g.Proxy(w, p, cc).Own[ListenerType], VirtualInbound)
			if l.GetDefaultFilterChain() != nil {
				t.Errorf("virtualInbound has a default chain %s; istiod's passthrough is its chains", l.GetDefaultFilterChain().GetName())
			}
			var got []string
			for _, fc := range l.GetFilterChains() {
				if fc.GetName() == inboundBlackholeChainName {
					if s := chainShape(t, fc); s != inboundBlackholeChainName+" [port=15006] tcp BlackHoleCluster" {
						t.Errorf("blackhole chain %s", s)
					}
					continue
				}
				if !strings.HasPrefix(fc.GetName(), VirtualInbound) {
					continue
				}
				got = append(got, chainShape(t, fc))
				rbac := chainRBACKind(t, fc)
				if strings.HasPrefix(chainTarget(t, fc), "hcm") != (rbac == "http") || rbac == "" {
					t.Errorf("chain %s has RBAC %q", chainShape(t, fc), rbac)
				}
			}
			if want := append(slices.Clone(tc.want), perPort...); !slices.Equal(got, want) {
				t.Errorf("passthrough chains\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}
