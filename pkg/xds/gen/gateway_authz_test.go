package gen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshplane/discovery/pkg/model"
)

// gatewayAuthzWorld is testdata/gateway-authz without its
// AuthorizationPolicies: a gateway in namespace ingress with an HTTP,
// HTTPS, TCP, PASSTHROUGH and AUTO_PASSTHROUGH server.
func gatewayAuthzWorld(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "gateway-authz", "input.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	var keep []string
	for _, d := range docs {
		if !strings.Contains(d, "kind: AuthorizationPolicy") {
			keep = append(keep, d)
		}
	}
	return strings.Join(keep, "\n---\n") + "\n---\n"
}

func ingressGateway(t testing.TB) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy("router~10.1.0.100~istio-ingressgateway-1.ingress~ingress.svc.cluster.local",
		map[string]any{"LABELS": map[string]any{"istio": "ingressgateway", "app": "istio-ingressgateway"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The gateway's chains by what they carry. AUTO_PASSTHROUGH chains are
// not policed at the gateway, as in Istio.
var (
	gwHTTPChains = map[string]string{"0.0.0.0_80": "#0", "0.0.0.0_443": "https.443.https.public.ingress"}
	gwTCPChains  = map[string]string{"0.0.0.0_9000": "tcp.9000.tcp.public.ingress", "0.0.0.0_8443": "passthrough.8443.default.pass.tls.0.0"}
	gwAutoChain  = [2]string{"0.0.0.0_15443", "outbound_.9080_._.productpage.default.svc.cluster.local"}
)

// gatewayChain returns the chain named chain of the gateway's listener.
func gatewayChain(t *testing.T, cc *ClassConfig, name, chain string) policedChain {
	t.Helper()
	l := listener(t, cc, name)
	if l == nil {
		t.Fatalf("no listener %s", name)
	}
	for _, c := range listenerChains(t, l) {
		if c.name == chain {
			return c
		}
	}
	t.Fatalf("listener %s has no chain %s", name, chain)
	return policedChain{}
}

const (
	allowedClient = "203.0.113.7"
	otherClient   = "192.0.2.9"
	badPeer       = "198.51.100.4"
	loadBalancer  = "10.0.0.5"
)

func gwGet(peer, xff, path string) request {
	return request{ip: peer, xff: xff, method: "GET", path: path, host: "bookinfo.example.com", port: 80}
}

func TestGatewayAuthorizationPolicies(t *testing.T) {
	const allowList = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ingress-policy, namespace: istio-system}
spec:
  selector: {matchLabels: {app: istio-ingressgateway}}
  action: ALLOW
  rules:
  - from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]
`
	tests := map[string]struct {
		policies string
		http     map[string]request // allowed when the name starts with "allow"
		tcp      map[string]request
		// auto is expected on the AUTO_PASSTHROUGH chain: allowed, always.
	}{
		"without policies everything passes": {
			http: map[string]request{"allow any": gwGet(otherClient, "", "/")},
			tcp:  map[string]request{"allow any": {ip: otherClient, port: 9000}},
		},
		"the ingress task's IP allow-list (remoteIpBlocks) admits the listed client only": {
			policies: allowList,
			http: map[string]request{
				"allow the listed client": gwGet(allowedClient, "", "/"),
				"deny another client":     gwGet(otherClient, "", "/"),
				"deny a forged X-Forwarded-For (no trusted proxies: the peer counts)": gwGet(otherClient, allowedClient, "/"),
				"deny the listed client behind an untrusted proxy":                    gwGet(loadBalancer, allowedClient, "/"),
				"allow the listed client whatever X-Forwarded-For it sends":           gwGet(allowedClient, otherClient+", "+badPeer, "/"),
			},
			tcp: map[string]request{
				"allow the listed client": {ip: allowedClient, port: 9000},
				"deny another client":     {ip: otherClient, port: 9000},
			},
		},
		"ipBlocks match the direct peer and a gateway-namespace policy applies": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-bad-peers, namespace: ingress}
spec:
  action: DENY
  rules: [{from: [{source: {ipBlocks: [198.51.100.0/24]}}]}]
`,
			http: map[string]request{
				"deny the peer range":                          gwGet(badPeer, "", "/"),
				"deny the peer range whatever XFF it sends":    gwGet(badPeer, allowedClient, "/"),
				"allow a client claiming the range in its XFF": gwGet(otherClient, badPeer, "/"),
			},
			tcp: map[string]request{"deny the peer range": {ip: badPeer, port: 9000}, "allow others": {ip: otherClient, port: 9000}},
		},
		"a root-namespace policy without selector applies to gateways": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: istio-system}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
`,
			http: map[string]request{"deny admin": gwGet(otherClient, "", "/admin/x"), "allow the rest": gwGet(otherClient, "", "/productpage")},
			// As in Istio: a DENY rule is enforced on TCP without its
			// HTTP-only fields.
			tcp: map[string]request{"deny TCP": {ip: otherClient, port: 9000}},
		},
		"DENY wins over ALLOW, AUDIT changes nothing": {
			policies: allowList + `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: ingress}
spec: {action: AUDIT, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: ingress}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
`,
			http: map[string]request{"allow the client": gwGet(allowedClient, "", "/"), "deny the client admin": gwGet(allowedClient, "", "/admin")},
		},
		"policies of other namespaces, other workloads and targetRefs do not apply": {
			policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-all, namespace: default}
spec: {action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: egress, namespace: istio-system}
spec: {selector: {matchLabels: {app: istio-egressgateway}}, action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: reviews, namespace: ingress}
spec: {selector: {matchLabels: {app: reviews}}, action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: waypoint, namespace: ingress}
spec:
  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: public}]
  action: DENY
  rules: [{}]
`,
			http: map[string]request{"allow any": gwGet(otherClient, "", "/")},
			tcp:  map[string]request{"allow any": {ip: otherClient, port: 9000}},
		},
	}
	ev := rbacEval{t}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cc, _ := classFromYAML(t, ingressGateway(t), gatewayAuthzWorld(t)+tc.policies)
			check := func(chains map[string]string, reqs map[string]request, tls bool) {
				for l, chain := range chains {
					c := gatewayChain(t, cc, l, chain)
					for what, rq := range reqs {
						if tls {
							rq.port = 443
						}
						if got, want := c.allowed(ev, rq), strings.HasPrefix(what, "allow"); got != want {
							t.Errorf("%s %s: %s: allowed %v, want %v", l, chain, what, got, want)
						}
					}
				}
			}
			check(map[string]string{"0.0.0.0_80": gwHTTPChains["0.0.0.0_80"]}, tc.http, false)
			check(map[string]string{"0.0.0.0_443": gwHTTPChains["0.0.0.0_443"]}, tc.http, true)
			check(gwTCPChains, tc.tcp, false)
			auto := gatewayChain(t, cc, gwAutoChain[0], gwAutoChain[1])
			if len(auto.rules) != 0 {
				t.Errorf("AUTO_PASSTHROUGH chain has RBAC %v; Istio leaves it to the destination's sidecar", auto.rules)
			}
		})
	}
}

// TestGatewayConnectionManagerXFF: a gateway's connection managers use the
// peer's address and trust Istio's default of no proxies in front
// (numTrustedProxies 0), so that remoteIpBlocks cannot be met with a
// forged X-Forwarded-For.
func TestGatewayConnectionManagerXFF(t *testing.T) {
	cc, _ := classFromYAML(t, ingressGateway(t), gatewayAuthzWorld(t))
	for l, chain := range gwHTTPChains {
		c := gatewayChain(t, cc, l, chain)
		if c.hcm == nil {
			t.Fatalf("%s %s: no HttpConnectionManager", l, chain)
		}
		if !c.hcm.GetUseRemoteAddress().GetValue() || c.hcm.GetXffNumTrustedHops() != 0 {
			t.Errorf("%s %s: use_remote_address %v, xff_num_trusted_hops %d; want true, 0 (Istio's gateway default)",
				l, chain, c.hcm.GetUseRemoteAddress(), c.hcm.GetXffNumTrustedHops())
		}
	}
}

// TestGatewayTrustedProxies evaluates the allow-list behind one trusted
// proxy (numTrustedProxies 1, Istio's gatewayTopology): the address that
// proxy appended to X-Forwarded-For is the client's; what the client wrote
// before it is not.
func TestGatewayTrustedProxies(t *testing.T) {
	cc, _ := classFromYAML(t, ingressGateway(t), gatewayAuthzWorld(t)+`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ingress-policy, namespace: istio-system}
spec:
  selector: {matchLabels: {app: istio-ingressgateway}}
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
`)
	c := gatewayChain(t, cc, "0.0.0.0_80", "#0")
	c.hcm = gatewayManager("http.80", "http.80", gatewayAuthz{trustedHops: 1})
	if c.hcm.GetXffNumTrustedHops() != 1 || !c.hcm.GetUseRemoteAddress().GetValue() {
		t.Fatalf("gatewayManager with one trusted hop: %v", c.hcm)
	}
	ev := rbacEval{t}
	for what, rq := range map[string]request{
		"allow the client the proxy saw":                    gwGet(loadBalancer, allowedClient, "/"),
		"allow it behind a forged first hop":                gwGet(loadBalancer, otherClient+","+allowedClient, "/"),
		"deny a client forging the listed address first":    gwGet(loadBalancer, allowedClient+", "+otherClient, "/"),
		"deny without X-Forwarded-For (the peer is the LB)": gwGet(loadBalancer, "", "/"),
	} {
		if got, want := c.allowed(ev, rq), strings.HasPrefix(what, "allow"); got != want {
			t.Errorf("%s: allowed %v, want %v", what, got, want)
		}
	}
}

func TestThroughHCM(t *testing.T) {
	hcm := func(remote bool, hops uint32) *hcmv3.HttpConnectionManager {
		return &hcmv3.HttpConnectionManager{UseRemoteAddress: wrapperspb.Bool(remote), XffNumTrustedHops: hops}
	}
	tests := map[string]struct {
		m    *hcmv3.HttpConnectionManager
		xff  string
		want string
	}{
		"use_remote_address, no trusted hops: the peer":         {m: hcm(true, 0), xff: "1.1.1.1", want: "9.9.9.9"},
		"use_remote_address, one hop: the rightmost XFF":        {m: hcm(true, 1), xff: "1.1.1.1, 2.2.2.2", want: "2.2.2.2"},
		"use_remote_address, two hops: the second from right":   {m: hcm(true, 2), xff: "1.1.1.1, 2.2.2.2", want: "1.1.1.1"},
		"use_remote_address, fewer entries than hops: the peer": {m: hcm(true, 2), xff: "1.1.1.1", want: "9.9.9.9"},
		"without use_remote_address: the rightmost XFF":         {m: hcm(false, 0), xff: "1.1.1.1, 2.2.2.2", want: "2.2.2.2"},
		"an unparsable entry: the peer":                         {m: hcm(true, 1), xff: "nope", want: "9.9.9.9"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := throughHCM(tc.m, request{ip: "9.9.9.9", xff: tc.xff}).remoteIP(); got != tc.want {
				t.Errorf("remote %s, want %s", got, tc.want)
			}
		})
	}
}

// TestGatewayTargetRefs: a policy with targetRefs attaches, as in Istio,
// to the pods of the Gateway API gateway it names (label
// gateway.networking.k8s.io/gateway-name), in its own namespace only;
// selector-based policies still apply to them.
func TestGatewayTargetRefs(t *testing.T) {
	p, err := model.ParseProxy("router~10.1.0.100~public-istio-1.ingress~ingress.svc.cluster.local",
		map[string]any{"LABELS": map[string]any{"istio": "ingressgateway", gatewayNameLabel: "public"}})
	if err != nil {
		t.Fatal(err)
	}
	policy := func(ns, name, target, targetNS, path string) string {
		return "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" +
			"  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: " + target + ", namespace: '" + targetNS + "'}]\n" +
			"  action: DENY\n  rules: [{to: [{operation: {paths: [\"" + path + "\"]}}]}]\n---\n"
	}
	cc, _ := classFromYAML(t, p, gatewayAuthzWorld(t)+
		policy("ingress", "mine", "public", "", "/mine")+
		policy("ingress", "mine-explicit", "public", "ingress", "/explicit")+
		policy("ingress", "another-gateway", "private", "", "/private")+
		policy("default", "another-namespace", "public", "", "/default")+
		policy("istio-system", "root", "public", "", "/root")+
		`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: selector, namespace: ingress}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{to: [{operation: {paths: ["/selected"]}}]}]
`)
	c := gatewayChain(t, cc, "0.0.0.0_80", "#0")
	ev := rbacEval{t}
	for path, want := range map[string]bool{
		"/mine": false, "/explicit": false, "/selected": false,
		"/private": true, "/default": true, "/root": true, "/": true,
	} {
		if got := c.allowed(ev, gwGet(otherClient, "", path)); got != want {
			t.Errorf("%s: allowed %v, want %v", path, got, want)
		}
	}
}
