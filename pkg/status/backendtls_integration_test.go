package status

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	gw "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

const testBackendCA = `-----BEGIN CERTIFICATE-----
MIIBkDCCATegAwIBAgIUbKjwV6pVnOmd1o4bEeEoYNZmx7AwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSYmFja2VuZHRscyB0ZXN0IENBMCAXDTI2MTIwMzE2MDIyNFoY
DzIxMjYxMTA5MTYwMjI0WjAdMRswGQYDVQQDDBJiYWNrZW5kdGxzIHRlc3QgQ0Ew
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAARbP5xC7ko/YLSHQEncdpDUOiZxMcAT
X/m4aq7HktKkwGaCCkpZfYt+4UTcQgq9565mX+f7vQ5tDotI7tAM9rJio1MwUTAd
BgNVHQ4EFgQUfMeeYfBZuCC8NrFsshue/SgCB6wwHwYDVR0jBBgwFoAUfMeeYfBZ
uCC8NrFsshue/SgCB6wwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBE
AiBSJb/53RPik3G2fbJIDh90uPur/k1bLeO7TzdhlFG9TwIgW5Vtds6y7e6vlwoK
jA/0AF54xpFxEEnW4ul0HEv1RNE=
-----END CERTIFICATE-----
`

// TestIntegrationBackendTLSPolicyStatus follows the conformance suite's
// BackendTLSPolicy reconcile case on a real API server (the Gateway API's
// CRDs validate the status written): a policy naming a ConfigMap that
// does not exist has, on its Gateway ancestor (controller
// istio.io/gateway-controller) and its Service ancestor (istio.io/mesh-
// controller), Accepted=False NoValidCACertificate and ResolvedRefs=False
// InvalidCACertificateRef at its generation; once the ConfigMap holds a
// CA, both are True; an older policy with the same target makes a newer
// one Conflicted; another controller's ancestor entry stays.
func TestIntegrationBackendTLSPolicyStatus(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallGatewayAPICRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config))
	gc := gatewayclient.NewForConfigOrDie(env.Config)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
	must(err)
	_, err = env.Client.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "secure", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = gc.GatewayV1().Gateways("shop").Create(ctx, &gw.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "shop"},
		Spec:       gw.GatewaySpec{GatewayClassName: "istio", Listeners: []gw.Listener{{Name: "http", Port: 80, Protocol: gw.HTTPProtocolType}}},
	},
		metav1.CreateOptions{})
	must(err)
	port := gw.PortNumber(443)
	_, err = gc.GatewayV1().HTTPRoutes("shop").Create(ctx, &gw.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: gw.HTTPRouteSpec{
			CommonRouteSpec: gw.CommonRouteSpec{ParentRefs: []gw.ParentReference{{Name: "gw"}}},
			Rules:           []gw.HTTPRouteRule{{BackendRefs: []gw.HTTPBackendRef{{BackendRef: gw.BackendRef{BackendObjectReference: gw.BackendObjectReference{Name: "secure", Port: &port}}}}}},
		},
	},
		metav1.CreateOptions{})
	must(err)
	policy := func(name string) *gw.BackendTLSPolicy {
		return &gw.BackendTLSPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
			Spec: gw.BackendTLSPolicySpec{
				TargetRefs: []gw.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gw.LocalPolicyTargetReference{Group: "", Kind: "Service", Name: "secure"}}},
				Validation: gw.BackendTLSPolicyValidation{
					Hostname:          "secure.example.com",
					CACertificateRefs: []gw.LocalObjectReference{{Group: "", Kind: "ConfigMap", Name: "backend-ca"}},
				},
			},
		}
	}
	p, err := gc.GatewayV1().BackendTLSPolicies("shop").Create(ctx, policy("first"), metav1.CreateOptions{})
	must(err)
	// Another controller's entry, written before ours.
	p.Status.Ancestors = []gw.PolicyAncestorStatus{{
		AncestorRef: gw.ParentReference{Name: "theirs"}, ControllerName: "example.com/other",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now()}},
	}}
	_, err = gc.GatewayV1().BackendTLSPolicies("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must(err)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	must(err)
	a, err := NewAuditor(DefaultOptions(), store.World, NewKubeWriter(dynamic.NewForConfigOrDie(env.Config), env.Client), log, prometheus.NewRegistry())
	must(err)
	store.Subscribe(a.Observe)
	background(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	background(t, a.Start)
	background(t, a.Lead)

	// ancestors reads name's ancestors as controller:kind/name=Accepted,ResolvedRefs.
	ancestors := func(name string) (map[string]string, error) {
		p, err := gc.GatewayV1().BackendTLSPolicies("shop").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, an := range p.Status.Ancestors {
			s := ""
			for _, c := range an.Conditions {
				if c.ObservedGeneration != p.Generation && an.ControllerName != "example.com/other" {
					s += "(stale)"
				}
				s += fmt.Sprintf("%s=%s/%s;", c.Type, c.Status, c.Reason)
			}
			out[string(an.ControllerName)+":"+string(*an.AncestorRef.Kind)+"/"+string(an.AncestorRef.Name)] = s
		}
		return out, nil
	}
	want := func(name string, wantGW, wantSvc string, theirs bool) func() (bool, string) {
		return func() (bool, string) {
			got, err := ancestors(name)
			if err != nil {
				return false, err.Error()
			}
			ok := got[gatewayapi.ControllerName+":Gateway/gw"] == wantGW && got[gatewayapi.MeshControllerName+":Service/secure"] == wantSvc
			if theirs {
				ok = ok && got["example.com/other:Gateway/theirs"] == "Accepted=True/Accepted;"
			}
			return ok, fmt.Sprint(got)
		}
	}
	invalid := "Accepted=False/NoValidCACertificate;ResolvedRefs=False/InvalidCACertificateRef;"
	valid := "Accepted=True/Accepted;ResolvedRefs=True/ResolvedRefs;"
	poll(t, "the policy without its ConfigMap: NoValidCACertificate, InvalidCACertificateRef", 30*time.Second, want("first", invalid, invalid, true))

	_, err = env.Client.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "backend-ca", Namespace: "shop"},
		Data:       map[string]string{"ca.crt": testBackendCA},
	}, metav1.CreateOptions{})
	must(err)
	poll(t, "the policy with its ConfigMap's CA: Accepted, ResolvedRefs", 30*time.Second, want("first", valid, valid, true))

	// Creation times have a resolution of a second: the second policy is
	// newer only once a second has passed.
	time.Sleep(1100 * time.Millisecond)
	_, err = gc.GatewayV1().BackendTLSPolicies("shop").Create(ctx, policy("second"), metav1.CreateOptions{})
	must(err)
	conflicted := "Accepted=False/Conflicted;ResolvedRefs=True/ResolvedRefs;"
	poll(t, "the newer policy of the same target Conflicted", 30*time.Second, want("second", conflicted, conflicted, false))
	poll(t, "the older policy still Accepted", 30*time.Second, want("first", valid, valid, true))
	poll(t, "both policies in step with their reports", 30*time.Second, func() (bool, string) {
		w := store.World()
		for _, c := range w.Configs(model.KindBackendTLSPolicy) {
			if !gatewayInStep(c, w.GatewayAPIReport(c.Key)) {
				return false, c.Key.String() + " not in step"
			}
		}
		return len(w.Configs(model.KindBackendTLSPolicy)) == 2, fmt.Sprint(len(w.Configs(model.KindBackendTLSPolicy)), " policies")
	})
}
