package install

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// waitComponent waits until the component's CRDs are Established and its
// Deployments available, printing what it waits for.
func (c *Client) waitComponent(ctx context.Context, comp Component, timeout time.Duration) error {
	var crds, deployments []*unstructured.Unstructured
	for _, o := range comp.Objects {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			crds = append(crds, o)
		case "Deployment":
			deployments = append(deployments, o)
		}
	}
	if len(crds) > 0 {
		c.progress(comp.Name, "waiting for %d CRDs to be Established", len(crds))
		if err := c.waitAll(ctx, comp.Name, timeout, crds, c.crdEstablished); err != nil {
			return fmt.Errorf("CRDs: %w", err)
		}
	}
	if len(deployments) > 0 {
		c.progress(comp.Name, "waiting for Deployment %s to be available", names(deployments))
		if err := c.waitAll(ctx, comp.Name, timeout, deployments, c.deploymentAvailable); err != nil {
			return fmt.Errorf("Deployments: %w", err)
		}
	}
	if len(crds)+len(deployments) > 0 {
		c.progress(comp.Name, "ready")
	}
	return nil
}

func names(objs []*unstructured.Unstructured) string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.GetNamespace() + "/" + o.GetName()
	}
	return strings.Join(out, ", ")
}

// readyFunc reports whether o is ready, and if not, why.
type readyFunc func(ctx context.Context, o *unstructured.Unstructured) (bool, string, error)

// waitAll polls until every object is ready, or timeout. Every Heartbeat
// it prints what it still waits for; the error names those still not
// ready and why, as found by a last look after the timeout (a request cut
// short by the deadline, or by the client's rate limiter, is not a
// reason).
func (c *Client) waitAll(ctx context.Context, component string, timeout time.Duration, objs []*unstructured.Unstructured, ready readyFunc) error {
	start, beat := time.Now(), time.Now()
	var pending []*unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, c.PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		pending = pending[:0]
		for _, o := range objs {
			if ok, _, err := ready(ctx, o); !ok || err != nil {
				pending = append(pending, o)
			}
		}
		if len(pending) > 0 && c.Heartbeat > 0 && time.Since(beat) >= c.Heartbeat {
			beat = time.Now()
			c.progress(component, "still waiting (%s of %s) for %s", time.Since(start).Round(time.Second), timeout, c.reasons(ctx, pending, ready))
		}
		return len(pending) == 0, nil
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(pending) == 0 {
		pending = objs
	}
	look, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return fmt.Errorf("%w after %s waiting for %s", errTimeout, timeout, c.reasons(look, pending, ready))
}

// reasons asks again why each object is not ready: "key (why); ...".
func (c *Client) reasons(ctx context.Context, objs []*unstructured.Unstructured, ready readyFunc) string {
	var out []string
	for _, o := range objs {
		ok, why, err := ready(ctx, o)
		switch {
		case err != nil:
			why = err.Error()
		case ok:
			why = "ready now"
		}
		out = append(out, objectKey(o)+" ("+why+")")
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func (c *Client) crdEstablished(ctx context.Context, o *unstructured.Unstructured) (bool, string, error) {
	u, err := c.Dynamic.Resource(crdGVR).Get(ctx, o.GetName(), metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	var crd apiextv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
		return false, "", err
	}
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
			return true, "", nil
		}
	}
	return false, "not Established yet", nil
}

func (c *Client) deploymentAvailable(ctx context.Context, o *unstructured.Unstructured) (bool, string, error) {
	d, err := c.Kube.AppsV1().Deployments(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	ok, why := DeploymentAvailable(d)
	return ok, why, nil
}

// DeploymentAvailable reports whether the Deployment's controller has seen
// its latest spec, every replica is updated, and it is Available.
func DeploymentAvailable(d *appsv1.Deployment) (bool, string) {
	if d.Status.ObservedGeneration < d.Generation {
		return false, "the controller has not seen the latest spec"
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.UpdatedReplicas < want {
		return false, fmt.Sprintf("%d of %d replicas updated", d.Status.UpdatedReplicas, want)
	}
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, want)
}
