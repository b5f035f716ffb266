package gen

import (
	"testing"

	security "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// FuzzAuthorizationPolicy: whatever strings a policy holds (validation of
// the API server aside), generation never panics and the listeners that
// carry its RBAC pass Envoy's validation: a sidecar's virtualInbound and,
// the policy being in the root namespace, every listener of a gateway
// (HTTP, HTTPS, TCP, PASSTHROUGH and AUTO_PASSTHROUGH servers).
func FuzzAuthorizationPolicy(f *testing.F) {
	f.Add("cluster.local/ns/a/sa/b", "a*", "/x*", "10.0.0.0/8", "80", "request.headers[X-A]", "v", uint8(0))
	f.Add("*", "*", "*", "::1", "0", "request.headers[]", "*", uint8(1))
	f.Add("", "", "", "bad", "99999", "source.ip", "1.2.3.4/33", uint8(2))
	f.Add("*x", "*-prod", "*.js", "fe80::/10", "443", "connection.sni", "*.example", uint8(3))
	f.Add("https://issuer/sub", "b", "/y", "203.0.113.0/24", "80", "request.auth.claims[iss]", "x", uint8(1))
	f.Add("iss/sub", "b", "/y", "10.0.0.1", "80", "request.auth.principal", "x", uint8(0))
	f.Fuzz(func(t *testing.T, principal, ns, path, ip, port, key, value string, action uint8) {
		ap := &securityv1.AuthorizationPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "istio-system", ResourceVersion: "1"},
		}
		ap.Spec.Action = []security.AuthorizationPolicy_Action{
			security.AuthorizationPolicy_ALLOW, security.AuthorizationPolicy_DENY,
			security.AuthorizationPolicy_AUDIT, security.AuthorizationPolicy_CUSTOM,
		}[action%4]
		ap.Spec.Rules = []*security.Rule{{
			From: []*security.Rule_From{{Source: &security.Source{
				Principals: []string{principal}, NotNamespaces: []string{ns}, IpBlocks: []string{ip}, RemoteIpBlocks: []string{ip},
			}}, {Source: &security.Source{RequestPrincipals: []string{principal}, NotRemoteIpBlocks: []string{ip}}}},
			To: []*security.Rule_To{{Operation: &security.Operation{
				Paths: []string{path}, NotPorts: []string{port}, Hosts: []string{value}, Methods: []string{value},
			}}},
			When: []*security.Condition{{Key: key, Values: []string{value}, NotValues: []string{ip}}},
		}}
		evs, err := worldtest.Decode([]byte(ratingsWorld + "---\n" + gatewayAuthzWorld(t)))
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindAuthorizationPolicy, Namespace: "istio-system", Name: "p"}, Object: ap})
		store := model.NewStore(model.StoreOptions{})
		if _, err := store.Apply(evs...); err != nil {
			t.Fatal(err)
		}
		p, err := model.ParseProxy("sidecar~10.1.0.30~ratings-v1-a.default~default.svc.cluster.local",
			map[string]any{"NAMESPACE": "default", "LABELS": map[string]any{"app": "ratings"}})
		if err != nil {
			t.Fatal(err)
		}
		pc := generate(t, store.World(), p)
		if pc.Get(ListenerType, VirtualInbound) == nil {
			t.Fatalf("virtualInbound left out for %+v", ap.Spec.Rules[0])
		}
		gw := generate(t, store.World(), ingressGateway(t))
		for _, l := range []string{"0.0.0.0_80", "0.0.0.0_443", "0.0.0.0_9000", "0.0.0.0_8443", "0.0.0.0_15443"} {
			if gw.Get(ListenerType, l) == nil {
				t.Fatalf("gateway listener %s left out for %+v", l, ap.Spec.Rules[0])
			}
		}
	})
}
