package status

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// ErrEvent is wrapped by a Write error when the condition was written but
// the Event was not.
var ErrEvent = errors.New("could not create Event")

// FieldManager is the field manager of the Reporter's writes.
const FieldManager = "discovery-status"

// KubeWriter writes conditions through the status subresource of Istio
// resources and Events through core/v1.
type KubeWriter struct {
	dyn      dynamic.Interface
	events   kubernetes.Interface
	instance string
}

// NewKubeWriter returns a Writer using dyn for Istio resources and client
// for Events.
func NewKubeWriter(dyn dynamic.Interface, client kubernetes.Interface) *KubeWriter {
	host, _ := os.Hostname()
	return &KubeWriter{dyn: dyn, events: client, instance: host}
}

// Write sets the ProxyRejected condition in ref's status.conditions,
// keeping every other condition and status field, and creates a Warning
// Event when event is not empty. status.conditions is a plain list in
// Istio's CRDs (no list-map keys), so the condition is replaced by a read,
// modify and status update, retried on conflict, rather than by a patch
// that would replace the whole list.
func (k *KubeWriter) Write(ctx context.Context, ref gen.ConfigRef, c Condition, event string) error {
	res := k.dyn.Resource(ref.Key.Kind.GroupVersionResource()).Namespace(ref.Key.Namespace)
	var obj *unstructured.Unstructured
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		obj, err = res.Get(ctx, ref.Key.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
		if err != nil {
			conds = nil // not a list: replaced by ours
		}
		next, changed := setCondition(conds, ConditionType, c)
		if !changed {
			return nil
		}
		if err := unstructured.SetNestedSlice(obj.Object, next, "status", "conditions"); err != nil {
			return err
		}
		obj, err = res.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("status of %s: %w", ref.Key, err)
	}
	if event == "" {
		return nil
	}
	if err := k.event(ctx, obj, ref, c.Time, event); err != nil {
		return fmt.Errorf("%w on %s: %w", ErrEvent, ref.Key, err)
	}
	return nil
}

// setCondition returns conds with c in place of the condition of type typ
// (and of any duplicate of it); changed is false when that condition is
// there once and already says the same.
func setCondition(conds []any, typ string, c Condition) (next []any, changed bool) {
	want := map[string]any{
		"type": typ, "status": c.Status, "reason": c.Reason, "message": c.Message,
		"observedGeneration": c.ObservedGeneration,
		"lastTransitionTime": c.Time.UTC().Format(time.RFC3339),
	}
	next = make([]any, 0, len(conds)+1)
	var found []map[string]any
	at := -1 // where ours goes: where the first one was, else last
	for _, x := range conds {
		m, ok := x.(map[string]any)
		if !ok || m["type"] != typ {
			next = append(next, x)
			continue
		}
		if at < 0 {
			at = len(next)
		}
		found = append(found, m)
	}
	if len(found) == 1 {
		m := found[0]
		if m["status"] == c.Status && m["reason"] == c.Reason && m["message"] == c.Message &&
			fmt.Sprint(m["observedGeneration"]) == fmt.Sprint(c.ObservedGeneration) {
			return conds, false
		}
	}
	if len(found) > 0 && found[0]["status"] == c.Status && found[0]["lastTransitionTime"] != nil {
		want["lastTransitionTime"] = found[0]["lastTransitionTime"]
	}
	if at < 0 {
		return append(next, want), true
	}
	return append(next[:at], append([]any{want}, next[at:]...)...), true
}

func (k *KubeWriter) event(ctx context.Context, obj *unstructured.Unstructured, ref gen.ConfigRef, at time.Time, msg string) error {
	gvk := ref.Key.Kind.GroupVersionKind()
	ts := metav1.NewTime(at)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: ref.Key.Name + ".", Namespace: ref.Key.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: ref.Key.Namespace, Name: ref.Key.Name,
			UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		},
		Reason: EventReason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "discovery"},
		FirstTimestamp: ts, LastTimestamp: ts, Count: 1,
		ReportingController: "discovery.meshplane.io/status", ReportingInstance: k.instance,
	}
	_, err := k.events.CoreV1().Events(ref.Key.Namespace).Create(ctx, ev, metav1.CreateOptions{FieldManager: FieldManager})
	return err
}

// Outcomes of SetCondition, as counted in
// discovery_status_unsupported_writes_total.
const (
	OutcomeSet       = "set"       // the condition was added or changed
	OutcomeCleared   = "cleared"   // the condition was removed
	OutcomeUnchanged = "unchanged" // it already said that: nothing written
	OutcomeStale     = "stale"     // the resource's generation moved on: nothing written
	OutcomeGone      = "gone"      // the resource no longer exists
)

// SetCondition makes the condition of type typ in key's status.conditions
// say c, or removes it when c is nil, keeping every other condition and
// status field (read, modify, update of the status subresource, retried on
// conflict, as Write does). Nothing is written when the condition already
// says c, nor when the resource's generation is no longer generation: its
// newer spec gets its own judgement.
func (k *KubeWriter) SetCondition(ctx context.Context, key model.Key, generation int64, typ string, c *Condition) (string, error) {
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
		conds, _, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
		if err != nil {
			conds = nil // not a list: replaced
		}
		var next []any
		changed := false
		if c == nil {
			next, changed = removeCondition(conds, typ)
			outcome = OutcomeCleared
		} else {
			next, changed = setCondition(conds, typ, *c)
			outcome = OutcomeSet
		}
		if !changed {
			outcome = OutcomeUnchanged
			return nil
		}
		if err := unstructured.SetNestedSlice(obj.Object, next, "status", "conditions"); err != nil {
			return err
		}
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

// removeCondition returns conds without the conditions of type typ.
func removeCondition(conds []any, typ string) (next []any, changed bool) {
	next = make([]any, 0, len(conds))
	for _, x := range conds {
		if m, ok := x.(map[string]any); ok && m["type"] == typ {
			changed = true
			continue
		}
		next = append(next, x)
	}
	return next, changed
}
