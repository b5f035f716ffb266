package status

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

var routeKey = model.Key{Kind: model.KindHTTPRoute, Namespace: "ns", Name: "r"}

// routeObj is an HTTPRoute at generation 2 whose status has an entry of
// another controller and, when ours is set, one of Istio's controller.
func routeObj(ours map[string]any) *unstructured.Unstructured {
	parents := []any{map[string]any{
		"controllerName": "example.com/other",
		"parentRef":      map[string]any{"group": model.GroupGatewayAPI, "kind": "Gateway", "name": "theirs"},
		"conditions": []any{map[string]any{
			"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
			"lastTransitionTime": "2026-01-01T00:00:00Z",
		}},
	}}
	if ours != nil {
		parents = append(parents, ours)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"namespace": "ns", "name": "r", "generation": int64(2)},
		"status":   map[string]any{"parents": parents},
	}}
	return u
}

func routeReport(accepted bool, reason string) *gatewayapi.Report {
	st := metav1.ConditionTrue
	if !accepted {
		st = metav1.ConditionFalse
	}
	ns := gw.Namespace("ns")
	return &gatewayapi.Report{Generation: 2, Parents: []gw.RouteParentStatus{{
		ParentRef:      gw.ParentReference{Name: "gw", Namespace: &ns},
		ControllerName: gatewayapi.ControllerName,
		Conditions: []metav1.Condition{
			{Type: "Accepted", Status: st, Reason: reason, ObservedGeneration: 2},
			{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", ObservedGeneration: 2},
		},
	}}}
}

func newGatewayWriter(objs ...runtime.Object) (*KubeWriter, *dynfake.FakeDynamicClient) {
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme(), objs...)
	return NewKubeWriter(dyn, fake.NewSimpleClientset()), dyn
}

func parentsOf(t *testing.T, dyn *dynfake.FakeDynamicClient) []any {
	t.Helper()
	obj, err := dyn.Resource(model.KindHTTPRoute.GroupVersionResource()).Namespace("ns").Get(context.Background(), "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, _, _ := unstructured.NestedSlice(obj.Object, "status", "parents")
	return l
}

func countUpdates(dyn *dynfake.FakeDynamicClient) int {
	n := 0
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func TestSetGatewayStatusKeepsOtherControllersAndWritesOnlyChanges(t *testing.T) {
	ctx := context.Background()
	k, dyn := newGatewayWriter(routeObj(nil))

	out, err := k.SetGatewayStatus(ctx, routeKey, 2, routeReport(false, "NotAllowedByListeners"))
	if err != nil || out != OutcomeSet {
		t.Fatalf("first write: %q, %v", out, err)
	}
	parents := parentsOf(t, dyn)
	if len(parents) != 2 || parents[0].(map[string]any)["controllerName"] != "example.com/other" {
		t.Fatalf("the other controller's entry should stay first, got %v", parents)
	}
	ours := parents[1].(map[string]any)
	acc := list(ours["conditions"])[0].(map[string]any)
	if ours["controllerName"] != gatewayapi.ControllerName || acc["reason"] != "NotAllowedByListeners" ||
		acc["status"] != "False" || acc["observedGeneration"] != int64(2) || acc["lastTransitionTime"] == nil {
		t.Fatalf("our entry: %v", ours)
	}
	firstTime := acc["lastTransitionTime"]

	out, err = k.SetGatewayStatus(ctx, routeKey, 2, routeReport(false, "NotAllowedByListeners"))
	if err != nil || out != OutcomeUnchanged || countUpdates(dyn) != 1 {
		t.Fatalf("same report again: %q, %v, %d updates (want unchanged, 1)", out, err, countUpdates(dyn))
	}

	// Same status, another reason: the transition time stays.
	out, err = k.SetGatewayStatus(ctx, routeKey, 2, routeReport(false, "NoMatchingParent"))
	if err != nil || out != OutcomeSet {
		t.Fatalf("new reason: %q, %v", out, err)
	}
	acc = list(parentsOf(t, dyn)[1].(map[string]any)["conditions"])[0].(map[string]any)
	if acc["reason"] != "NoMatchingParent" || acc["lastTransitionTime"] != firstTime {
		t.Fatalf("after a new reason: %v (time was %v)", acc, firstTime)
	}

	// No parent of ours any more: our entry goes, theirs stays.
	if out, err = k.SetGatewayStatus(ctx, routeKey, 2, &gatewayapi.Report{Generation: 2}); err != nil || out != OutcomeSet {
		t.Fatalf("no parents: %q, %v", out, err)
	}
	if p := parentsOf(t, dyn); len(p) != 1 || p[0].(map[string]any)["controllerName"] != "example.com/other" {
		t.Fatalf("after our parents went: %v", p)
	}
}

func TestSetGatewayStatusLeavesANewerGenerationAndAGoneObject(t *testing.T) {
	ctx := context.Background()
	k, dyn := newGatewayWriter(routeObj(nil))
	if out, err := k.SetGatewayStatus(ctx, routeKey, 1, routeReport(true, "Accepted")); err != nil || out != OutcomeStale {
		t.Fatalf("older generation: %q, %v", out, err)
	}
	if countUpdates(dyn) != 0 {
		t.Fatal("a stale report was written")
	}
	gone := model.Key{Kind: model.KindHTTPRoute, Namespace: "ns", Name: "nope"}
	if out, err := k.SetGatewayStatus(ctx, gone, 1, routeReport(true, "Accepted")); err != nil || out != OutcomeGone {
		t.Fatalf("gone: %q, %v", out, err)
	}
}

func TestGatewayInStep(t *testing.T) {
	ns := gw.Namespace("ns")
	ltt := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	route := func(reason string, ctrl gw.GatewayController) *gw.HTTPRoute {
		return &gw.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Generation: 2},
			Status: gw.HTTPRouteStatus{RouteStatus: gw.RouteStatus{Parents: []gw.RouteParentStatus{{
				ParentRef: gw.ParentReference{Name: "gw", Namespace: &ns}, ControllerName: ctrl,
				Conditions: []metav1.Condition{
					{Type: "Accepted", Status: metav1.ConditionFalse, Reason: reason, ObservedGeneration: 2, LastTransitionTime: ltt},
					{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", ObservedGeneration: 2, LastTransitionTime: ltt},
				},
			}}}},
		}
	}
	rep := routeReport(false, "NotAllowedByListeners")
	for name, tc := range map[string]struct {
		obj  *gw.HTTPRoute
		want bool
	}{
		"a route whose status already says the report is in step":    {route("NotAllowedByListeners", gatewayapi.ControllerName), true},
		"a route whose condition has another reason is not":          {route("Accepted", gatewayapi.ControllerName), false},
		"a route with only another controller's entry for it is not": {route("NotAllowedByListeners", "example.com/other"), false},
	} {
		t.Run(name, func(t *testing.T) {
			c := &model.Config{Key: routeKey, Object: tc.obj}
			if got := gatewayInStep(c, rep); got != tc.want {
				t.Fatalf("gatewayInStep = %v, want %v", got, tc.want)
			}
		})
	}
	if !gatewayInStep(&model.Config{Key: routeKey, Object: route("x", "example.com/other")}, nil) {
		t.Fatal("a config without a report has nothing of ours to write")
	}
}
