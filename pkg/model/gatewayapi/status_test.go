package gatewayapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConformanceStatus checks testdata/status against what the Gateway
// API conformance suite (v1.6.3) asserts of it: each listener's
// conditions (type, status, reason; "" any reason), supportedKinds count
// and attachedRoutes, and the routes' parent conditions.
func TestConformanceStatus(t *testing.T) {
	out := Translate(readInput(t, "testdata/status/input.yaml"))
	type cond struct{ typ, status, reason string }
	type lst struct {
		gateway, listener string
		kinds             int
		attached          int32
		conds             []cond
	}
	listeners := map[string]lst{
		"GatewayInvalidTLSConfiguration: a Secret that does not exist": {
			"infra/nonexistent-secret", "https", 2, 0,
			[]cond{{"ResolvedRefs", "False", "InvalidCertificateRef"}, {"Programmed", "False", ""}},
		},
		"GatewayInvalidTLSConfiguration: a malformed Secret": {
			"infra/malformed-secret", "https", 2, 0,
			[]cond{{"ResolvedRefs", "False", "InvalidCertificateRef"}},
		},
		"GatewayInvalidTLSConfiguration: an unsupported group": {
			"infra/unsupported-group", "https", 2, 0,
			[]cond{{"ResolvedRefs", "False", "InvalidCertificateRef"}},
		},
		"a valid Secret of the Gateway's namespace is programmed": {
			"infra/good-secret", "https", 2, 0,
			[]cond{{"ResolvedRefs", "True", "ResolvedRefs"}, {"Programmed", "True", "Programmed"}},
		},
		"GatewaySecretMissingReferenceGrant / InvalidReferenceGrant": {
			"infra/missing-grant", "https", 2, 0,
			[]cond{{"ResolvedRefs", "False", "RefNotPermitted"}},
		},
		"GatewaySecretReferenceGrantAllInNamespace": {
			"granted/granted", "https", 2, 0,
			[]cond{{"ResolvedRefs", "True", ""}, {"Programmed", "True", "Programmed"}},
		},
		"GatewayListenerUnsupportedProtocol: the only listener": {
			"infra/only-unsupported-protocol", "invalid", 0, 0,
			[]cond{{"Accepted", "False", "UnsupportedProtocol"}},
		},
		"GatewayListenerUnsupportedProtocol: beside a supported one": {
			"infra/some-unsupported-protocol", "http", 2, 0,
			[]cond{{"Accepted", "True", "Accepted"}},
		},
		"the first listener of a port and hostname keeps it": {
			"infra/conflicts", "http", 2, 0,
			[]cond{{"Accepted", "True", "Accepted"}, {"Conflicted", "False", "NoConflicts"}},
		},
		"a second listener with the same port and hostname is HostnameConflict": {
			"infra/conflicts", "http-same-host", 2, 0,
			[]cond{{"Accepted", "False", "HostnameConflict"}, {"Conflicted", "True", "HostnameConflict"}, {"Programmed", "False", "HostnameConflict"}},
		},
		"another hostname on the same port does not conflict": {
			"infra/conflicts", "http-other-host", 2, 0,
			[]cond{{"Conflicted", "False", "NoConflicts"}},
		},
		"TCP on an HTTP port is ProtocolConflict": {
			"infra/conflicts", "tcp-on-80", 1, 0,
			[]cond{{"Conflicted", "True", "ProtocolConflict"}},
		},
		"HTTPS with an HTTP listener's hostname on its port is ProtocolConflict": {
			"infra/conflicts", "tls-same-host", 2, 0,
			[]cond{{"Conflicted", "True", "ProtocolConflict"}},
		},
		"GatewayWithAttachedRoutes: two attached, the one of another hostname not counted": {
			"infra/two-attached", "http", 2, 2,
			[]cond{{"Accepted", "True", ""}, {"ResolvedRefs", "True", ""}},
		},
		"GatewayWithAttachedRoutes: a listener with unresolved refs counts its route": {
			"infra/unresolved", "tls", 2, 1,
			[]cond{{"Programmed", "False", ""}, {"ResolvedRefs", "False", ""}},
		},
	}
	has := func(t *testing.T, got []metav1.Condition, want []cond) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, c := range got {
				if c.Type == w.typ && string(c.Status) == w.status && (w.reason == "" || c.Reason == w.reason) {
					found = true
				}
			}
			if !found {
				t.Errorf("no condition %v in %+v", w, got)
			}
		}
	}
	for name, w := range listeners {
		t.Run(name, func(t *testing.T) {
			ns, gname, _ := cut(w.gateway)
			rep := out.Reports[Ref{Kind: KindGateway, Namespace: ns, Name: gname}]
			if rep == nil {
				t.Fatalf("no report for %s", w.gateway)
			}
			for _, l := range rep.Listeners {
				if string(l.Name) != w.listener {
					continue
				}
				if len(l.SupportedKinds) != w.kinds || l.AttachedRoutes != w.attached {
					t.Errorf("supportedKinds %v attachedRoutes %d, want %d kinds and %d routes", l.SupportedKinds, l.AttachedRoutes, w.kinds, w.attached)
				}
				has(t, l.Conditions, w.conds)
				return
			}
			t.Fatalf("no listener %s", w.listener)
		})
	}
	gateways := map[string]struct {
		gateway string
		conds   []cond
	}{
		"GatewayListenerUnsupportedProtocol: no listener accepted": {"infra/only-unsupported-protocol", []cond{{"Accepted", "False", "ListenersNotValid"}}},
		"GatewayListenerUnsupportedProtocol: one accepted":         {"infra/some-unsupported-protocol", []cond{{"Accepted", "True", "ListenersNotValid"}}},
	}
	for name, w := range gateways {
		t.Run(name, func(t *testing.T) {
			ns, gname, _ := cut(w.gateway)
			has(t, out.Reports[Ref{Kind: KindGateway, Namespace: ns, Name: gname}].Conditions, w.conds)
		})
	}
	routes := map[string]struct {
		route string
		conds []cond
	}{
		"GatewayWithAttachedRoutes: a route of another hostname":          {"infra/not-accepted", []cond{{"Accepted", "False", "NoMatchingListenerHostname"}}},
		"GatewayWithAttachedRoutes: the route of the unresolved listener": {"infra/route-4", []cond{{"ResolvedRefs", "False", ""}}},
	}
	for name, w := range routes {
		t.Run(name, func(t *testing.T) {
			ns, rname, _ := cut(w.route)
			rep := out.Reports[Ref{Kind: KindHTTPRoute, Namespace: ns, Name: rname}]
			if rep == nil || len(rep.Parents) != 1 {
				t.Fatalf("report %+v, want one parent", rep)
			}
			has(t, rep.Parents[0].Conditions, w.conds)
		})
	}
	// Served: only the listeners that are programmed become Istio Gateways.
	served := map[string]bool{}
	for _, g := range out.Gateways {
		served[g.Namespace+"/"+g.Name] = true
	}
	for name, want := range map[string]bool{
		"infra/good-secret-istio-autogenerated-k8s-gateway-https":        true,
		"infra/nonexistent-secret-istio-autogenerated-k8s-gateway-https": false,
		"infra/malformed-secret-istio-autogenerated-k8s-gateway-https":   false,
		"infra/conflicts-istio-autogenerated-k8s-gateway-http":           true,
		"infra/conflicts-istio-autogenerated-k8s-gateway-http-same-host": false,
		"infra/conflicts-istio-autogenerated-k8s-gateway-tcp-on-80":      false,
	} {
		if served[name] != want {
			t.Errorf("%s served %v, want %v", name, served[name], want)
		}
	}
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}
