package gatewayapi

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// suiteDir is the Gateway API conformance suite whose status expectations
// TestSuiteStatus checks (manifests read from the module cache, not
// copied).
const suiteModule = "sigs.k8s.io/gateway-api/conformance@v1.6.3"

// suiteSecrets are the Secrets the suite creates itself (suite.go), all
// valid certificates.
var suiteSecrets = [][2]string{
	{"gateway-conformance-web-backend", "certificate"},
	{"gateway-conformance-infra", "tls-validity-checks-certificate"},
	{"gateway-conformance-infra", "tls-checks-certificate"},
	{"gateway-conformance-infra", "tls-passthrough-checks-certificate"},
	{"gateway-conformance-app-backend", "tls-passthrough-checks-certificate"},
	{"gateway-conformance-infra", "tls-terminate-checks-certificate"},
}

// suiteInput translates the suite's base manifests and one test's, with
// the suite's Secrets, as the suite would apply them for class istio.
func suiteInput(t *testing.T, test string) Input {
	t.Helper()
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			t.Fatalf("go env GOMODCACHE: %v", err)
		}
		cache = strings.TrimSpace(string(out))
	}
	dir := filepath.Join(cache, suiteModule)
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("DISCOVERY_REQUIRE_SUITE") != "" {
			t.Fatalf("conformance suite not in the module cache: %v", err)
		}
		t.Skipf("%s not in the module cache (go mod download %s)", suiteModule, suiteModule)
	}
	var data []byte
	for _, f := range []string{"base/manifests.yaml", "tests/" + test + ".yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		data = append(append(data, b...), []byte("\n---\n")...)
	}
	data = bytes.ReplaceAll(data, []byte("{GATEWAY_CLASS_NAME}"), []byte("istio"))
	secrets := map[[2]string]CertificateState{}
	for _, s := range suiteSecrets {
		secrets[s] = CertificateValid
	}
	return decodeInput(t, data, secrets, true)
}

// suiteCond is one condition the suite asserts: "" reason is any.
type suiteCond struct{ typ, status, reason string }

func hasConds(t *testing.T, what string, got []metav1.Condition, want ...suiteCond) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, c := range got {
			if c.Type == w.typ && string(c.Status) == w.status && (w.reason == "" || c.Reason == w.reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no condition %v in %+v", what, w, got)
		}
	}
}

// TestSuiteStatus checks the status the conformance suite's tests assert
// (their .go files, read for v1.6.3) against the translation of their
// manifests: the route parents' and listeners' conditions, supportedKinds
// and attachedRoutes.
func TestSuiteStatus(t *testing.T) {
	type route struct {
		kind, name, gateway string // gateway: ns/name of the parent whose entry is checked
		conds               []suiteCond
	}
	type lst struct {
		gateway, listener string
		kinds             []string // exactly these supportedKinds, nil: not checked
		attached          int32    // -1: not checked
		conds             []suiteCond
	}
	const infra = "gateway-conformance-infra"
	type gwc struct {
		gateway string
		conds   []suiteCond
	}
	cases := map[string]struct {
		test      string
		routes    []route
		listeners []lst
		gateways  []gwc
	}{
		"HTTPRouteInvalidCrossNamespaceParentRef": {
			test: "httproute-invalid-cross-namespace-parent-ref", routes: []route{{
				KindHTTPRoute,
				"gateway-conformance-web-backend/invalid-cross-namespace-parent-ref", infra + "/same-namespace",
				[]suiteCond{{"Accepted", "False", "NotAllowedByListeners"}, {"ResolvedRefs", "True", ""}},
			}},
			listeners: []lst{{infra + "/same-namespace", "http", nil, 0, nil}},
		},
		"HTTPRouteInvalidParentRefNotMatchingSectionName": {
			test: "httproute-invalid-parentref-not-matching-section-name", routes: []route{{
				KindHTTPRoute,
				infra + "/httproute-listener-not-matching-section-name", infra + "/same-namespace",
				[]suiteCond{{"Accepted", "False", "NoMatchingParent"}},
			}},
			listeners: []lst{{infra + "/same-namespace", "http", nil, 0, nil}},
		},
		"HTTPRouteInvalidParentRefNotMatchingListenerPort": {
			test: "httproute-invalid-parentref-not-matching-listener-port", routes: []route{{
				KindHTTPRoute,
				infra + "/httproute-listener-not-matching-route-port", infra + "/same-namespace",
				[]suiteCond{{"Accepted", "False", "NoMatchingParent"}, {"ResolvedRefs", "True", ""}},
			}},
			listeners: []lst{{infra + "/same-namespace", "http", nil, 0, nil}},
		},
		"HTTPRouteInvalidParentRefSectionNameNotMatchingPort": {test: "httproute-invalid-parentref-section-name-not-matching-port", routes: []route{{
			KindHTTPRoute,
			infra + "/httproute-listener-section-name-not-matching-port", infra + "/gateway-with-one-not-matching-port-and-section-name-route",
			[]suiteCond{{"Accepted", "False", "NoMatchingParent"}},
		}}},
		"HTTPRouteInvalidBackendRefUnknownKind": {test: "httproute-invalid-backendref-unknown-kind", routes: []route{{
			KindHTTPRoute,
			infra + "/invalid-backend-ref-unknown-kind", infra + "/same-namespace",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "InvalidKind"}},
		}}},
		"HTTPRouteInvalidNonExistentBackendRef": {test: "httproute-invalid-nonexistent-backendref", routes: []route{{
			KindHTTPRoute,
			infra + "/invalid-nonexistent-backend-ref", infra + "/same-namespace",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "BackendNotFound"}},
		}}},
		"HTTPRouteInvalidCrossNamespaceBackendRef": {test: "httproute-invalid-cross-namespace-backend-ref", routes: []route{{
			KindHTTPRoute,
			infra + "/invalid-cross-namespace-backend-ref", infra + "/same-namespace",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "RefNotPermitted"}},
		}}},
		"HTTPRouteInvalidReferenceGrant": {test: "httproute-invalid-reference-grant", routes: []route{{
			KindHTTPRoute,
			infra + "/reference-grant", infra + "/same-namespace",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "RefNotPermitted"}},
		}}},
		"HTTPRoutePartiallyInvalidViaInvalidReferenceGrant": {test: "httproute-partially-invalid-via-invalid-reference-grant", routes: []route{{
			KindHTTPRoute,
			infra + "/invalid-reference-grant", infra + "/same-namespace",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "RefNotPermitted"}},
		}}},
		"HTTPRouteDisallowedKind": {
			test: "httproute-disallowed-kind", routes: []route{{
				KindHTTPRoute,
				infra + "/disallowed-kind", infra + "/tlsroutes-only",
				[]suiteCond{{"Accepted", "False", "NotAllowedByListeners"}, {"ResolvedRefs", "True", ""}},
			}},
			listeners: []lst{{infra + "/tlsroutes-only", "tls", nil, 0, nil}},
		},
		"GatewaySecretInvalidReferenceGrant": {test: "gateway-secret-invalid-reference-grant", listeners: []lst{{
			infra + "/gateway-secret-invalid-reference-grant", "https",
			[]string{"HTTPRoute", "GRPCRoute"},
			0,
			[]suiteCond{{"ResolvedRefs", "False", "RefNotPermitted"}},
		}}},
		"GatewaySecretMissingReferenceGrant": {test: "gateway-secret-missing-reference-grant", listeners: []lst{{
			infra + "/gateway-secret-missing-reference-grant", "https",
			[]string{"HTTPRoute", "GRPCRoute"},
			0,
			[]suiteCond{{"ResolvedRefs", "False", "RefNotPermitted"}},
		}}},
		"GatewaySecretReferenceGrantAllInNamespace": {test: "gateway-secret-reference-grant-all-in-namespace", listeners: []lst{{
			infra + "/gateway-secret-reference-grant-all-in-namespace", "https",
			[]string{"HTTPRoute", "GRPCRoute"},
			0,
			[]suiteCond{{"Programmed", "True", "Programmed"}, {"ResolvedRefs", "True", ""}},
		}}},
		"GatewaySecretReferenceGrantSpecific": {test: "gateway-secret-reference-grant-specific", listeners: []lst{{
			infra + "/gateway-secret-reference-grant-specific", "https",
			[]string{"HTTPRoute", "GRPCRoute"},
			0,
			[]suiteCond{{"Programmed", "True", "Programmed"}, {"ResolvedRefs", "True", ""}},
		}}},
		"GatewayInvalidTLSConfiguration": {test: "gateway-invalid-tls-configuration", listeners: []lst{
			{infra + "/gateway-certificate-nonexistent-secret", "https", []string{"HTTPRoute", "GRPCRoute"}, 0, []suiteCond{{"ResolvedRefs", "False", "InvalidCertificateRef"}}},
			{infra + "/gateway-certificate-unsupported-group", "https", []string{"HTTPRoute", "GRPCRoute"}, 0, []suiteCond{{"ResolvedRefs", "False", "InvalidCertificateRef"}}},
			{infra + "/gateway-certificate-unsupported-kind", "https", []string{"HTTPRoute", "GRPCRoute"}, 0, []suiteCond{{"ResolvedRefs", "False", "InvalidCertificateRef"}}},
			{infra + "/gateway-certificate-malformed-secret", "https", []string{"HTTPRoute", "GRPCRoute"}, 0, []suiteCond{{"ResolvedRefs", "False", "InvalidCertificateRef"}}},
		}},
		"GatewayInvalidRouteKind": {test: "gateway-invalid-route-kind", listeners: []lst{
			{infra + "/gateway-only-invalid-route-kind", "http", []string{}, 0, []suiteCond{{"ResolvedRefs", "False", "InvalidRouteKinds"}}},
			{infra + "/gateway-supported-and-invalid-route-kind", "http", []string{"HTTPRoute"}, 0, []suiteCond{{"ResolvedRefs", "False", "InvalidRouteKinds"}}},
		}},
		"GatewayListenerUnsupportedProtocol": {test: "gateway-invalid-listeners-unsupported-protocol", listeners: []lst{
			{infra + "/gateway-only-unsupported-protocols", "invalid", []string{}, 0, []suiteCond{{"Accepted", "False", "UnsupportedProtocol"}}},
			{infra + "/gateway-supported-and-unsupported-protocols", "http", []string{"HTTPRoute", "GRPCRoute"}, 0, []suiteCond{{"Accepted", "True", "Accepted"}}},
		}},
		"GatewayWithAttachedRoutes": {test: "gateway-with-attached-routes", listeners: []lst{
			{infra + "/gateway-with-one-attached-route", "http", []string{"HTTPRoute"}, 1, []suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "True", ""}}},
			{infra + "/gateway-with-two-attached-routes", "http", []string{"HTTPRoute"}, 2, []suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "True", ""}}},
			{infra + "/unresolved-gateway-with-one-attached-unresolved-route", "tls", []string{"HTTPRoute"}, 1, []suiteCond{{"Programmed", "False", ""}, {"ResolvedRefs", "False", ""}}},
		}, routes: []route{
			{KindHTTPRoute, infra + "/http-route-not-accepted", infra + "/gateway-with-two-attached-routes", []suiteCond{{"Accepted", "False", "NoMatchingListenerHostname"}}},
			{KindHTTPRoute, infra + "/http-route-4", infra + "/unresolved-gateway-with-one-attached-unresolved-route", []suiteCond{{"ResolvedRefs", "False", ""}}},
		}},
		"GatewayWithAttachedRoutesWithPort8080": {test: "gateway-with-attached-routes-with-port-8080", listeners: []lst{
			{infra + "/gateway-with-two-listeners-and-one-attached-route", "http-unattached", []string{"HTTPRoute"}, 0, []suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "True", ""}}},
			{infra + "/gateway-with-two-listeners-and-one-attached-route", "http", []string{"HTTPRoute"}, 1, []suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "True", ""}}},
		}},
		"TCPRouteInvalidBackendRefNonexistent": {test: "tcproute-invalid-backendref-nonexistent", routes: []route{{
			KindTCPRoute,
			infra + "/tcp-route-invalid-backend-ref-nonexistent", infra + "/tcp-gateway-invalid-backend",
			[]suiteCond{{"ResolvedRefs", "False", "BackendNotFound"}},
		}}},
		"TCPRouteInvalidCrossNamespaceBackendRef": {test: "tcproute-invalid-cross-namespace-backend-ref", routes: []route{{
			KindTCPRoute,
			infra + "/tcp-invalid-cross-namespace-backend-ref", infra + "/tcp-invalid-cross-namespace-backend-ref-gateway",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "RefNotPermitted"}},
		}}},
		"TCPRouteInvalidNonTCPListener": {test: "tcproute-invalid-non-tcp-listener", routes: []route{{
			KindTCPRoute,
			infra + "/tcp-route", infra + "/tcp-mixed-protocol-gateway",
			[]suiteCond{{"Accepted", "False", "NotAllowedByListeners"}},
		}}},
		"TLSRouteInvalidBackendRefNonexistent": {test: "tlsroute-invalid-backendref-nonexistent", routes: []route{{
			KindTLSRoute,
			infra + "/invalid-backend-ref-nonexistent", infra + "/gateway-tlsroute-invalid-backend-ref-nonexistent",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "BackendNotFound"}},
		}}},
		"TLSRouteInvalidBackendRefUnknownKind": {test: "tlsroute-invalid-backendref-unknown-kind", routes: []route{{
			KindTLSRoute,
			infra + "/invalid-backend-ref-unknown-kind", infra + "/gateway-tlsroute-invalid-backend-ref-unknown-kind",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "InvalidKind"}},
		}}},
		"TLSRouteInvalidNoMatchingListenerHostname": {test: "tlsroute-invalid-no-matching-listener-hostname", routes: []route{
			{KindTLSRoute, infra + "/tlsroute-hostname-mismatch-1", infra + "/gateway-tls-exact-hostname", []suiteCond{{"Accepted", "False", "NoMatchingListenerHostname"}}},
			{KindTLSRoute, infra + "/tlsroute-hostname-mismatch-2", infra + "/gateway-tls-wildcard-hostname", []suiteCond{{"Accepted", "False", "NoMatchingListenerHostname"}}},
		}},
		"TLSRouteInvalidNoMatchingListener": {test: "tlsroute-invalid-no-matching-listener", routes: []route{
			{KindTLSRoute, infra + "/tlsroute-not-allowed-protocol-http", infra + "/gateway-tlsroute-http-only", []suiteCond{{"Accepted", "False", "NotAllowedByListeners"}}},
			{KindTLSRoute, infra + "/tlsroute-not-allowed-protocol-https", infra + "/gateway-tlsroute-https-only", []suiteCond{{"Accepted", "False", "NotAllowedByListeners"}}},
			{KindTLSRoute, infra + "/tlsroute-no-matching-section-name", infra + "/gateway-tlsroute-tls-passthrough-only", []suiteCond{{"Accepted", "False", "NoMatchingParent"}}},
		}},
		"TLSRouteInvalidReferenceGrant": {test: "tlsroute-invalid-reference-grant", routes: []route{{
			KindTLSRoute,
			infra + "/gateway-conformance-infra-test", infra + "/gateway-tlsroute-referencegrant",
			[]suiteCond{{"Accepted", "True", ""}, {"ResolvedRefs", "False", "RefNotPermitted"}},
		}}},
		"TLSRouteListenerTerminateNotSupported": {test: "tlsroute-listener-terminate-not-supported", listeners: []lst{
			{infra + "/gateway-tlsroute-terminate-unsupported", "tls-terminate", nil, 0, []suiteCond{{"Accepted", "False", "UnsupportedValue"}}},
		}},
		"GatewayInvalidParametersRef": {test: "gateway-invalid-parameters-ref", gateways: []gwc{
			{infra + "/gateway-invalid-parameters-ref", []suiteCond{{"Accepted", "False", "InvalidParameters"}}},
		}},
		"TLSRoutePassthroughSupportedKinds": {test: "tlsroute-listener-passthrough-supported-kinds", listeners: []lst{
			{infra + "/gateway-tlsroute-passthrough-supported-kind", "tls-passthrough", []string{"TLSRoute"}, 0, []suiteCond{{"ResolvedRefs", "False", "InvalidRouteKinds"}}},
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			out := Translate(suiteInput(t, c.test))
			for _, r := range c.routes {
				ns, n, _ := cut(r.name)
				rep := out.Reports[Ref{Kind: r.kind, Namespace: ns, Name: n}]
				if rep == nil {
					t.Errorf("%s %s: no report", r.kind, r.name)
					continue
				}
				gns, gname, _ := cut(r.gateway)
				found := false
				for _, p := range rep.Parents {
					if string(p.ParentRef.Name) == gname && string(ptrOr(p.ParentRef.Namespace, "")) == gns || string(p.ParentRef.Name) == gname && p.ParentRef.Namespace == nil && gns == ns {
						found = true
						hasConds(t, r.name, p.Conditions, r.conds...)
					}
				}
				if !found {
					t.Errorf("%s %s: no parent %s in %+v", r.kind, r.name, r.gateway, rep.Parents)
				}
			}
			for _, w := range c.gateways {
				ns, n, _ := cut(w.gateway)
				rep := out.Reports[Ref{Kind: KindGateway, Namespace: ns, Name: n}]
				if rep == nil {
					t.Errorf("gateway %s: no report", w.gateway)
					continue
				}
				hasConds(t, w.gateway, rep.Conditions, w.conds...)
			}
			for _, w := range c.listeners {
				ns, n, _ := cut(w.gateway)
				rep := out.Reports[Ref{Kind: KindGateway, Namespace: ns, Name: n}]
				if rep == nil {
					t.Errorf("gateway %s: no report", w.gateway)
					continue
				}
				found := false
				for _, l := range rep.Listeners {
					if string(l.Name) != w.listener {
						continue
					}
					found = true
					what := w.gateway + " listener " + w.listener
					if w.kinds != nil {
						var got []string
						for _, k := range l.SupportedKinds {
							got = append(got, string(k.Kind))
						}
						if strings.Join(got, ",") != strings.Join(w.kinds, ",") {
							t.Errorf("%s: supportedKinds %v, want %v", what, got, w.kinds)
						}
					}
					if w.attached >= 0 && l.AttachedRoutes != w.attached {
						t.Errorf("%s: attachedRoutes %d, want %d", what, l.AttachedRoutes, w.attached)
					}
					hasConds(t, what, l.Conditions, w.conds...)
				}
				if !found {
					t.Errorf("gateway %s: no listener %s", w.gateway, w.listener)
				}
			}
		})
	}
}
