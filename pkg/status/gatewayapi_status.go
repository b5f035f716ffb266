package status

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// The status of Gateway API objects, written by the leader.
//
// The translation's Report (model.World.GatewayAPIReport) is the status
// the spec asks for: GatewayClass and Gateway conditions (Accepted,
// Programmed), per-listener status (conditions, supportedKinds,
// attachedRoutes) and a route's status.parents entries for the parents of
// Istio's controller (controllerName istio.io/gateway-controller). The
// leader brings each object's status in step with it, as istiod's
// leader-elected status writer does (pilot/pkg/config/kube/gateway and
// pilot/pkg/status), through the same queue, rate limit and back-off as
// the Auditor's conditions.
//
// What is kept of what is there: conditions of other types (another
// controller's, or discovery's own), and every status.parents entry of
// another controllerName, in place. A condition whose status does not
// change keeps its lastTransitionTime. Nothing is written when the status
// already says what the Report says (compared without the times), nor when
// the object's generation moved on.
//
// Chosen differently from istiod: discovery does not create the default
// GatewayClass "istio" (istiod's gatewayclass controller does, and
// re-creates it when deleted); discovery only reads the GatewayClasses
// that exist, so an installation that wants one applies it (the charts'
// job, not the control plane's). status.addresses and the Programmed
// condition of a Gateway that discovery deploys come from its Deployment
// and Service (SetGatewayInfra, gatewayinfra.go); otherwise addresses
// are left as they are.

// GatewayStatusSetter writes the status of one Gateway API object. KubeWriter
// is the real one.
type GatewayStatusSetter interface {
	// SetGatewayStatus makes key's status say rep (merged with what other
	// controllers wrote) if the object is still at generation, and returns
	// one of the Outcome names.
	SetGatewayStatus(ctx context.Context, key model.Key, generation int64, rep *gatewayapi.Report) (string, error)
}

var _ GatewayStatusSetter = (*KubeWriter)(nil)

// SetGatewayStatus is a read, modify and update of key's status
// subresource, retried on conflict (status.parents and the condition
// lists are merged by key, which a patch of Gateway API's list types
// could not do beside other controllers' entries).
func (k *KubeWriter) SetGatewayStatus(ctx context.Context, key model.Key, generation int64, rep *gatewayapi.Report) (string, error) {
	res := k.dyn.Resource(key.Kind.GroupVersionResource()).Namespace(key.Namespace)
	outcome := OutcomeUnchanged
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := res.Get(ctx, key.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if obj.GetGeneration() != generation {
			outcome = OutcomeStale
			return nil
		}
		cur, _, _ := unstructured.NestedMap(obj.Object, "status")
		next, changed, err := mergeGatewayStatus(key.Kind, cur, rep, time.Now())
		if err != nil {
			return err
		}
		if !changed {
			outcome = OutcomeUnchanged
			return nil
		}
		obj.Object["status"] = next
		outcome = OutcomeSet
		_, err = res.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return OutcomeGone, nil
	case err != nil:
		return "", fmt.Errorf("status of %s: %w", key, err)
	}
	return outcome, nil
}

// gatewayInStep reports whether the status c carries in the World is what
// rep asks for. A config without a report (a Gateway of another class, a
// ReferenceGrant) is in step: nothing of it is ours to write.
func gatewayInStep(c *model.Config, rep *gatewayapi.Report) bool {
	if rep == nil || c.Key.Kind == model.KindReferenceGrant {
		return true
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c.Object)
	if err != nil {
		return false
	}
	cur, _, _ := unstructured.NestedMap(m, "status")
	_, changed, err := mergeGatewayStatus(c.Key.Kind, cur, rep, time.Time{})
	return err == nil && !changed
}

// mergeGatewayStatus returns cur with rep's part in it; changed is false
// when cur already says it (times aside).
func mergeGatewayStatus(kind model.Kind, cur map[string]any, rep *gatewayapi.Report, now time.Time) (map[string]any, bool, error) {
	want, err := toUnstructured(rep)
	if err != nil {
		return nil, false, err
	}
	next := runtime.DeepCopyJSON(orEmpty(cur))
	switch kind {
	case model.KindGatewayClass, model.KindKubernetesGateway:
		if len(rep.Conditions) == 0 {
			return next, false, nil // not of Istio's controller
		}
		next["conditions"] = mergeConditions(list(next["conditions"]), list(want["conditions"]), now)
		if kind == model.KindKubernetesGateway {
			next["listeners"] = mergeListeners(list(next["listeners"]), list(want["listeners"]), now)
			if len(rep.Addresses) > 0 {
				next["addresses"] = want["addresses"]
			}
		}
	case model.KindHTTPRoute, model.KindGRPCRoute, model.KindTCPRoute, model.KindTLSRoute:
		next["parents"] = mergeParents(list(next["parents"]), list(want["parents"]), now)
	case model.KindBackendTLSPolicy:
		return mergePolicyStatus(cur, next, rep, now) // gatewayapi_ancestors.go
	default:
		return next, false, nil
	}
	return next, !sameJSON(orEmpty(cur), next), nil
}

// mergeConditions returns want's conditions, each keeping the
// lastTransitionTime of cur's condition of its type when its status is the
// same, followed by cur's conditions of other types.
func mergeConditions(cur, want []any, now time.Time) []any {
	byType := map[any]map[string]any{}
	for _, x := range cur {
		if m, ok := x.(map[string]any); ok {
			byType[m["type"]] = m
		}
	}
	out := make([]any, 0, len(want)+len(cur))
	mine := map[any]bool{}
	for _, x := range want {
		w := x.(map[string]any)
		mine[w["type"]] = true
		w["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
		if old := byType[w["type"]]; old != nil && old["status"] == w["status"] && old["lastTransitionTime"] != nil {
			w["lastTransitionTime"] = old["lastTransitionTime"]
		}
		out = append(out, w)
	}
	for _, x := range cur {
		if m, ok := x.(map[string]any); !ok || !mine[m["type"]] {
			out = append(out, x)
		}
	}
	return out
}

// mergeListeners returns want's listeners, their conditions merged with
// those of cur's listener of the same name. A Gateway's listeners are all
// its controller's: cur's others are dropped.
func mergeListeners(cur, want []any, now time.Time) []any {
	byName := map[any]map[string]any{}
	for _, x := range cur {
		if m, ok := x.(map[string]any); ok {
			byName[m["name"]] = m
		}
	}
	out := make([]any, 0, len(want))
	for _, x := range want {
		w := x.(map[string]any)
		var old []any
		if o := byName[w["name"]]; o != nil {
			old = list(o["conditions"])
		}
		w["conditions"] = mergeConditions(old, list(w["conditions"]), now)
		out = append(out, w)
	}
	return out
}

// mergeParents returns cur's status.parents with the entries of Istio's
// controller replaced by want's: other controllers' entries stay where
// they are, ours that want no longer names go.
func mergeParents(cur, want []any, now time.Time) []any {
	ours := map[string]map[string]any{}
	for _, x := range cur {
		if m, ok := x.(map[string]any); ok && m["controllerName"] == gatewayapi.ControllerName {
			ours[parentKey(m["parentRef"])] = m
		}
	}
	out := make([]any, 0, len(cur)+len(want))
	for _, x := range cur {
		if m, ok := x.(map[string]any); !ok || m["controllerName"] != gatewayapi.ControllerName {
			out = append(out, x)
		}
	}
	for _, x := range want {
		w := x.(map[string]any)
		var old []any
		if o := ours[parentKey(w["parentRef"])]; o != nil {
			old = list(o["conditions"])
			w["parentRef"] = o["parentRef"] // as the API server defaulted it
		}
		w["conditions"] = mergeConditions(old, list(w["conditions"]), now)
		out = append(out, w)
	}
	return out
}

// parentKey names a parentRef with the API server's defaults filled in
// (group gateway.networking.k8s.io, kind Gateway), so that a stored
// entry and the Report's match.
func parentKey(x any) string {
	m, _ := x.(map[string]any)
	get := func(k, def string) string {
		if v, ok := m[k]; ok && v != nil && fmt.Sprint(v) != "" {
			return fmt.Sprint(v)
		}
		return def
	}
	return get("group", model.GroupGatewayAPI) + "/" + get("kind", "Gateway") + "/" + get("namespace", "") + "/" +
		get("name", "") + "/" + get("sectionName", "") + "/" + get("port", "")
}

// toUnstructured is rep's status in the API server's unstructured form
// (integers as int64).
func toUnstructured(rep *gatewayapi.Report) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&gatewayStatus{rep.Addresses, rep.Conditions, rep.Listeners, rep.Parents})
	if err != nil {
		return nil, fmt.Errorf("gateway status: %w", err)
	}
	return m, nil
}

// gatewayStatus is what of a Report goes into a status.
type gatewayStatus struct {
	Addresses  []gw.GatewayStatusAddress `json:"addresses,omitempty"`
	Conditions []metav1.Condition        `json:"conditions,omitempty"`
	Listeners  []gw.ListenerStatus       `json:"listeners,omitempty"`
	Parents    []gw.RouteParentStatus    `json:"parents,omitempty"`
}

func list(x any) []any {
	l, _ := x.([]any)
	return l
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// sameJSON compares a and b as JSON, so that int64 and float64 of the same
// number, and a missing list and an empty one, are the same.
func sameJSON(a, b map[string]any) bool {
	clean := func(m map[string]any) string {
		c := map[string]any{}
		for k, v := range m {
			if l, ok := v.([]any); ok && len(l) == 0 {
				continue
			}
			c[k] = v
		}
		js, _ := json.Marshal(c)
		return string(js)
	}
	return clean(a) == clean(b)
}

// gatewayWriter is the Auditor's writer of Gateway API status, nil when it
// has none (no cluster, or a ConditionSetter that writes only conditions).
func (a *Auditor) gatewayWriter() GatewayStatusSetter {
	g, _ := a.w.(GatewayStatusSetter)
	return g
}

// reconcileGateway brings the status of the Gateway API object key in
// step with its Report in the current World.
func (a *Auditor) reconcileGateway(ctx context.Context, key model.Key, limit *rate.Limiter) error {
	g := a.gatewayWriter()
	w := a.world()
	c := w.Config(key.Kind, key.Namespace, key.Name)
	if g == nil || c == nil {
		return nil
	}
	rep := a.gatewayReport(w, key)
	if gatewayInStep(c, rep) {
		return nil
	}
	if err := limit.Wait(ctx); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, a.opts.WriteTimeout)
	outcome, err := g.SetGatewayStatus(wctx, key, generation(c.Object), rep)
	cancel()
	if err != nil {
		return err
	}
	a.m.writes.WithLabelValues(outcome).Inc()
	if outcome == OutcomeSet {
		a.log.Info("updated the status of a Gateway API resource", "resource", key.String(), "result", outcome)
	}
	return nil
}
