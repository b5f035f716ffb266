package status

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

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
		next, changed := setCondition(conds, c)
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

// setCondition returns conds with c in place of the condition of its type;
// changed is false when that condition already says the same.
func setCondition(conds []any, c Condition) (next []any, changed bool) {
	want := map[string]any{
		"type": ConditionType, "status": c.Status, "reason": c.Reason, "message": c.Message,
		"observedGeneration": c.ObservedGeneration,
		"lastTransitionTime": c.Time.UTC().Format(time.RFC3339),
	}
	next = make([]any, 0, len(conds)+1)
	found := false
	for _, x := range conds {
		m, ok := x.(map[string]any)
		if !ok || m["type"] != ConditionType {
			next = append(next, x)
			continue
		}
		found = true
		if m["status"] == c.Status && m["reason"] == c.Reason && m["message"] == c.Message &&
			fmt.Sprint(m["observedGeneration"]) == fmt.Sprint(c.ObservedGeneration) {
			return conds, false
		}
		if m["status"] == c.Status && m["lastTransitionTime"] != nil {
			want["lastTransitionTime"] = m["lastTransitionTime"]
		}
		next = append(next, want)
	}
	if !found {
		next = append(next, want)
	}
	return next, true
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
