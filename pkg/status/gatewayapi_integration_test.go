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

// TestIntegrationGatewayAPIStatus runs the Auditor's leader against a real
// API server with the Gateway API's own CRDs (whose schemas validate the
// status written): the GatewayClass and the Gateway are Accepted at their
// generation, the listener counts the one route it admits, a route from a
// namespace the listener does not allow gets Accepted=False
// NotAllowedByListeners, and another controller's parent entry on a route
// stays; and what was written reads back as in step.
func TestIntegrationGatewayAPIStatus(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallGatewayAPICRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config))
	gc := gatewayclient.NewForConfigOrDie(env.Config)
	for _, ns := range []string{"shop", "other"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := gc.GatewayV1().GatewayClasses().Create(ctx, &gw.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "istio"},
		Spec:       gw.GatewayClassSpec{ControllerName: gatewayapi.ControllerName},
	}, metav1.CreateOptions{})
	create(err)
	_, err = gc.GatewayV1().Gateways("shop").Create(ctx, &gw.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "shop"},
		Spec:       gw.GatewaySpec{GatewayClassName: "istio", Listeners: []gw.Listener{{Name: "http", Port: 80, Protocol: gw.HTTPProtocolType}}},
	},
		metav1.CreateOptions{})
	create(err)
	route := func(ns string) *gw.HTTPRoute {
		gwNS := gw.Namespace("shop")
		return &gw.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec:       gw.HTTPRouteSpec{CommonRouteSpec: gw.CommonRouteSpec{ParentRefs: []gw.ParentReference{{Name: "gw", Namespace: &gwNS}}}},
		}
	}
	_, err = gc.GatewayV1().HTTPRoutes("shop").Create(ctx, route("shop"), metav1.CreateOptions{})
	create(err)
	foreign, err := gc.GatewayV1().HTTPRoutes("other").Create(ctx, route("other"), metav1.CreateOptions{})
	create(err)
	// Another controller's entry, written before ours.
	foreign.Status.Parents = []gw.RouteParentStatus{{
		ParentRef: gw.ParentReference{Name: "theirs"}, ControllerName: "example.com/other",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now()}},
	}}
	_, err = gc.GatewayV1().HTTPRoutes("other").UpdateStatus(ctx, foreign, metav1.UpdateOptions{})
	create(err)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuditor(DefaultOptions(), store.World, NewKubeWriter(dynamic.NewForConfigOrDie(env.Config), env.Client), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store.Subscribe(a.Observe)
	background(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	background(t, a.Start)
	background(t, a.Lead)

	cond := func(conds []metav1.Condition, typ string) string {
		for _, c := range conds {
			if c.Type == typ {
				return fmt.Sprintf("%s/%s/g%d", c.Status, c.Reason, c.ObservedGeneration)
			}
		}
		return "none"
	}
	poll(t, "the GatewayClass Accepted", 30*time.Second, func() (bool, string) {
		c, err := gc.GatewayV1().GatewayClasses().Get(ctx, "istio", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := cond(c.Status.Conditions, "Accepted")
		return got == fmt.Sprintf("True/Accepted/g%d", c.Generation), got
	})
	poll(t, "the Gateway Accepted at its generation, its listener with one route", 30*time.Second, func() (bool, string) {
		g, err := gc.GatewayV1().Gateways("shop").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := cond(g.Status.Conditions, "Accepted")
		if len(g.Status.Listeners) != 1 {
			return false, got + fmt.Sprintf(", %d listeners", len(g.Status.Listeners))
		}
		l := g.Status.Listeners[0]
		return got == fmt.Sprintf("True/Accepted/g%d", g.Generation) && l.Name == "http" && l.AttachedRoutes == 1,
			fmt.Sprintf("%s, listener %s attachedRoutes %d", got, l.Name, l.AttachedRoutes)
	})
	poll(t, "the route of the Gateway's namespace Accepted", 30*time.Second, func() (bool, string) {
		r, err := gc.GatewayV1().HTTPRoutes("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(r.Status.Parents) != 1 {
			return false, fmt.Sprint(err, r.Status.Parents)
		}
		p := r.Status.Parents[0]
		got := cond(p.Conditions, "Accepted")
		return p.ControllerName == gatewayapi.ControllerName && got == "True/Accepted/g1", got
	})
	poll(t, "the route of another namespace NotAllowedByListeners, the other controller's entry kept", 30*time.Second, func() (bool, string) {
		r, err := gc.GatewayV1().HTTPRoutes("other").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var ours, theirs string
		for _, p := range r.Status.Parents {
			switch p.ControllerName {
			case gatewayapi.ControllerName:
				ours = cond(p.Conditions, "Accepted")
			case "example.com/other":
				theirs = cond(p.Conditions, "Accepted")
			}
		}
		return ours == "False/NotAllowedByListeners/g1" && theirs == "True/Accepted/g0", ours + " " + theirs
	})
	// What the API server stored (with its schema's defaults) reads back
	// as in step, so the leader's own writes do not queue more writes.
	poll(t, "every Gateway API object of the World in step with its report", 30*time.Second, func() (bool, string) {
		w := store.World()
		n := 0
		for _, kind := range model.GatewayAPIKinds {
			for _, c := range w.Configs(kind) {
				if w.GatewayAPIReport(c.Key) != nil {
					n++
				}
				if !gatewayInStep(c, w.GatewayAPIReport(c.Key)) {
					return false, c.Key.String() + " not in step"
				}
			}
		}
		return n == 4, fmt.Sprintf("%d objects with a report, want 4 (class, gateway, two routes)", n)
	})
}
