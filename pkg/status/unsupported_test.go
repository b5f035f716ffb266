package status

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingapi "istio.io/api/networking/v1alpha3"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshplane/discovery/pkg/model"
)

// ignoredField is a VirtualService field the generator does not act on
// (retries across localities); the test of Unsupported checks that it is.
const ignoredField = "spec.http[].retries.retryRemoteLocalities"

// virtualService returns a VirtualService ns/name at generation gen;
// ignored sets ignoredField; conds become its status.conditions.
func virtualService(name string, gen int64, ignored bool, conds ...*metav1alpha1.IstioCondition) *networkingv1.VirtualService {
	route := &networkingapi.HTTPRoute{
		Route:   []*networkingapi.HTTPRouteDestination{{Destination: &networkingapi.Destination{Host: "reviews"}}},
		Retries: &networkingapi.HTTPRetry{Attempts: 2},
	}
	if ignored {
		route.Retries.RetryRemoteLocalities = wrapperspb.Bool(true)
	}
	vs := &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Generation: gen, ResourceVersion: fmt.Sprint(gen * 100)},
		Spec:       networkingapi.VirtualService{Hosts: []string{"reviews"}, Http: []*networkingapi.HTTPRoute{route}},
	}
	vs.Status.Conditions = conds
	return vs
}

// unreadKind is a config of a kind discovery reads but does not act on
// (a TrafficExtension).
func unreadKind(name string) *extensionsv1alpha1.TrafficExtension {
	return &extensionsv1alpha1.TrafficExtension{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Generation: 1, ResourceVersion: "1"}}
}

func config(obj runtime.Object) *model.Config {
	m, _ := obj.(metav1.Object)
	kind := model.KindVirtualService
	switch obj.(type) {
	case *extensionsv1alpha1.WasmPlugin:
		kind = model.KindWasmPlugin
	case *networkingv1alpha3.EnvoyFilter:
		kind = model.KindEnvoyFilter
	case *extensionsv1alpha1.TrafficExtension:
		kind = model.KindTrafficExtension
	case *corev1.Service:
		kind = model.KindService
	}
	return &model.Config{Key: model.Key{Kind: kind, Namespace: m.GetNamespace(), Name: m.GetName()}, Object: obj}
}

func TestUnsupported(t *testing.T) {
	cases := map[string]struct {
		obj  runtime.Object
		want Finding
	}{
		"a VirtualService field the generator ignores is named from spec, with [] for list indexes": {
			obj: virtualService("vs", 1, true), want: Finding{Fields: []string{ignoredField}},
		},
		"a VirtualService whose fields are all acted on has nothing ignored": {
			obj: virtualService("vs", 1, false),
		},
		"a TrafficExtension is ignored as a whole kind": {
			obj: unreadKind("jwt"), want: Finding{Kind: true},
		},
		"a Service is not an Istio config": {
			obj: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "shop"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Unsupported(config(tc.obj))
			if got.Kind != tc.want.Kind || strings.Join(got.Fields, ",") != strings.Join(tc.want.Fields, ",") {
				t.Errorf("Unsupported = %+v, want %+v", got, tc.want)
			}
			if got.Empty() != tc.want.Empty() {
				t.Errorf("Empty = %v", got.Empty())
			}
		})
	}
}

func TestFindingMessage(t *testing.T) {
	if got := (Finding{Kind: true}).Message(model.KindTrafficExtension); got != "TrafficExtension is not supported by discovery: its extensions are not applied to any proxy" {
		t.Errorf("kind message = %q", got)
	}
	got := Finding{Fields: []string{"spec.a", "spec.b"}}.Message(model.KindVirtualService)
	if !strings.HasSuffix(got, "have no effect: spec.a, spec.b") {
		t.Errorf("fields message = %q", got)
	}
	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprintf("spec.http[].field%03d", i))
	}
	got = Finding{Fields: many}.Message(model.KindVirtualService)
	if len(got) > maxMessage || !strings.Contains(got, "spec.http[].field000") || !strings.HasSuffix(got, " more") {
		t.Errorf("long message: %d bytes, ends %q", len(got), got[len(got)-20:])
	}
	// The count left out is right.
	var n int
	if _, err := fmt.Sscanf(got[strings.LastIndex(got, ", and ")+len(", and "):], "%d more", &n); err != nil {
		t.Fatal(err)
	}
	if listed := strings.Count(got, "spec."); listed+n != len(many) {
		t.Errorf("%d listed + %d more != %d fields", listed, n, len(many))
	}
}

func cond(typ, status, reason, msg string, gen int64) *metav1alpha1.IstioCondition {
	return &metav1alpha1.IstioCondition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen}
}

func TestInSync(t *testing.T) {
	want := &Condition{Status: "True", Reason: ReasonFieldsNotSupported, Message: "m", ObservedGeneration: 2}
	ours := func(msg string, gen int64) *metav1alpha1.IstioCondition {
		return cond(UnsupportedConditionType, "True", ReasonFieldsNotSupported, msg, gen)
	}
	other := cond(ConditionType, "True", ReasonRejected, "proxy", 2)
	cases := map[string]struct {
		conds []*metav1alpha1.IstioCondition
		want  *Condition
		sync  bool
	}{
		"no condition wanted, none there":           {conds: []*metav1alpha1.IstioCondition{other}, sync: true},
		"no condition wanted, ours still there":     {conds: []*metav1alpha1.IstioCondition{other, ours("m", 2)}},
		"the same condition is there":               {conds: []*metav1alpha1.IstioCondition{ours("m", 2), other}, want: want, sync: true},
		"ours is missing":                           {conds: []*metav1alpha1.IstioCondition{other}, want: want},
		"ours names other fields":                   {conds: []*metav1alpha1.IstioCondition{ours("x", 2)}, want: want},
		"ours was written for an older generation":  {conds: []*metav1alpha1.IstioCondition{ours("m", 1)}, want: want},
		"ours is there twice (one must go)":         {conds: []*metav1alpha1.IstioCondition{ours("m", 2), ours("m", 2)}, want: want},
		"a condition of another type says the same": {conds: []*metav1alpha1.IstioCondition{cond("Other", "True", ReasonFieldsNotSupported, "m", 2)}, want: want},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := inSync(tc.conds, UnsupportedConditionType, tc.want); got != tc.sync {
				t.Errorf("inSync = %v, want %v", got, tc.sync)
			}
		})
	}
}

func TestWantConditionAndStatusOf(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	vs := virtualService("vs", 3, true, cond("Other", "True", "R", "m", 3))
	c := config(vs)
	w := wantCondition(c, Unsupported(c), now)
	if w == nil || w.Status != "True" || w.Reason != ReasonFieldsNotSupported || w.ObservedGeneration != 3 ||
		!strings.Contains(w.Message, ignoredField) || !w.Time.Equal(now) {
		t.Errorf("wantCondition = %+v", w)
	}
	if w := wantCondition(config(unreadKind("jwt")), Finding{Kind: true}, now); w == nil || w.Reason != ReasonKindNotSupported {
		t.Errorf("kind: wantCondition = %+v", w)
	}
	if w := wantCondition(c, Finding{}, now); w != nil {
		t.Errorf("nothing ignored: wantCondition = %+v, want nil", w)
	}
	if got := conditionsOf(vs); len(got) != 1 || got[0].GetType() != "Other" {
		t.Errorf("conditionsOf = %v", got)
	}
	if version(c) != "g3" {
		t.Errorf("version = %q, want the generation", version(c))
	}
	vs.Generation = 0
	if version(c) != "rv300" {
		t.Errorf("version without generation = %q, want the resourceVersion", version(c))
	}
}

func TestConditionMerge(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0).UTC()
	theirs := map[string]any{"type": "Reconciled", "status": "True", "message": "written by someone else"}
	ours := map[string]any{
		"type": UnsupportedConditionType, "status": "True", "reason": ReasonFieldsNotSupported,
		"message": "old", "observedGeneration": int64(1), "lastTransitionTime": "2020-01-01T00:00:00Z",
	}
	c := Condition{Status: "True", Reason: ReasonFieldsNotSupported, Message: "new", ObservedGeneration: 2, Time: t0}

	next, changed := setCondition([]any{theirs, ours}, UnsupportedConditionType, c)
	if !changed || len(next) != 2 || next[0].(map[string]any)["message"] != "written by someone else" {
		t.Fatalf("set: changed %v, %v", changed, next)
	}
	got := next[1].(map[string]any)
	if got["message"] != "new" || got["observedGeneration"] != int64(2) || got["lastTransitionTime"] != "2020-01-01T00:00:00Z" {
		t.Errorf("set kept the wrong things: %v (the transition time stays while the status does not change)", got)
	}
	if _, changed := setCondition(next, UnsupportedConditionType, c); changed {
		t.Error("setting the same condition again changes something")
	}
	next, changed = setCondition([]any{theirs}, UnsupportedConditionType, c)
	if !changed || len(next) != 2 || next[1].(map[string]any)["lastTransitionTime"] != t0.Format(time.RFC3339) {
		t.Errorf("add: %v", next)
	}

	next, changed = removeCondition([]any{theirs, ours, ours}, UnsupportedConditionType)
	if !changed || len(next) != 1 || next[0].(map[string]any)["type"] != "Reconciled" {
		t.Errorf("remove: changed %v, %v", changed, next)
	}
	if _, changed := removeCondition([]any{theirs}, UnsupportedConditionType); changed {
		t.Error("removing an absent condition changes something")
	}
	// ProxyRejected is another type: neither touches it.
	rejected := map[string]any{"type": ConditionType, "status": "True"}
	next, _ = removeCondition([]any{rejected, ours}, UnsupportedConditionType)
	if len(next) != 1 || next[0].(map[string]any)["type"] != ConditionType {
		t.Errorf("remove touched ProxyRejected: %v", next)
	}
}

func TestConditionMergeDuplicates(t *testing.T) {
	a := map[string]any{"type": "A"}
	b := map[string]any{"type": "B"}
	dup := map[string]any{"type": UnsupportedConditionType, "status": "True", "reason": "R", "message": "m", "observedGeneration": int64(1)}
	c := Condition{Status: "True", Reason: "R", Message: "m", ObservedGeneration: 1}
	next, changed := setCondition([]any{a, dup, b, dup}, UnsupportedConditionType, c)
	if !changed || len(next) != 3 {
		t.Fatalf("duplicates: changed %v, %v", changed, next)
	}
	if next[0].(map[string]any)["type"] != "A" || next[1].(map[string]any)["type"] != UnsupportedConditionType || next[2].(map[string]any)["type"] != "B" {
		t.Errorf("order not kept: %v", next)
	}
}
