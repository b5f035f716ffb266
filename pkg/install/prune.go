package install

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
)

// managedResource is a kind the charts render: the only kinds prune and
// uninstall look at. They are listed in delete order: webhooks first (so
// nothing calls a server being removed), CRDs last.
type managedResource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

var managedResources = []managedResource{
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, "MutatingWebhookConfiguration", false},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, "ValidatingWebhookConfiguration", false},
	{schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}, "HorizontalPodAutoscaler", true},
	{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, "PodDisruptionBudget", true},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment", true},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "Service", true},
	{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "Secret", true},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, "RoleBinding", true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, "Role", true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, "ClusterRoleBinding", false},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "ClusterRole", false},
	{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, "ServiceAccount", true},
	{crdGVR, "CustomResourceDefinition", false},
}

// selector selects the installer's objects: of one revision, or of every
// revision when revision is "".
func selector(revision string) labels.Selector {
	sel := labels.NewSelector()
	r, _ := labels.NewRequirement(LabelManagedBy, selection.Equals, []string{ManagedByValue})
	sel = sel.Add(*r)
	if revision != "" {
		r, _ := labels.NewRequirement(LabelRevision, selection.Equals, []string{revision})
		sel = sel.Add(*r)
	}
	return sel
}

// listManaged lists the installer's objects that match sel, in delete
// order.
func (c *Client) listManaged(ctx context.Context, sel labels.Selector, withCRDs bool) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, mr := range managedResources {
		if mr.kind == "CustomResourceDefinition" && !withCRDs {
			continue
		}
		list, err := c.Dynamic.Resource(mr.gvr).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", mr.gvr.Resource, err)
		}
		items := list.Items
		sort.Slice(items, func(i, j int) bool { return objectKey(&items[i]) < objectKey(&items[j]) })
		for i := range items {
			out = append(out, &items[i])
		}
	}
	return out, nil
}

// prune deletes the objects of m's revision that m no longer renders, of
// the components m answers for (Manifest.Governs). CRDs are never pruned:
// every Istio object of their kinds would go with them. Only uninstall
// --purge removes CRDs.
func (c *Client) prune(ctx context.Context, m *Manifest, dryRun bool) ([]string, error) {
	rendered := map[string]bool{}
	for _, comp := range m.Components {
		for _, o := range comp.Objects {
			rendered[objectKey(o)] = true
		}
	}
	live, err := c.listManaged(ctx, selector(m.Revision), false)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	var stale []*unstructured.Unstructured
	for _, o := range live {
		if !rendered[objectKey(o)] && m.Governs(o.GetLabels()[LabelComponent]) {
			stale = append(stale, o)
		}
	}
	if len(stale) == 0 {
		return nil, nil
	}
	c.progress("prune", "%d objects no longer rendered", len(stale))
	return c.deleteAll(ctx, stale, dryRun)
}

func (c *Client) deleteAll(ctx context.Context, objs []*unstructured.Unstructured, dryRun bool) ([]string, error) {
	var done []string
	policy := metav1.DeletePropagationBackground
	for _, o := range objs {
		ri, err := c.resourceFor(o)
		if err != nil {
			return done, err
		}
		err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{DryRun: dryRunOpt(dryRun), PropagationPolicy: &policy})
		if err != nil && !apierrors.IsNotFound(err) {
			return done, fmt.Errorf("delete %s: %w", objectKey(o), err)
		}
		done = append(done, objectKey(o))
		c.progress(o.GetLabels()[LabelComponent], "deleted %s", objectKey(o))
	}
	return done, nil
}

// UninstallOptions say what Uninstall removes.
type UninstallOptions struct {
	// Revision removes that revision's objects ("" means default).
	Revision string
	// Purge removes the objects of every revision, and the CRDs.
	Purge  bool
	DryRun bool
}

// UninstallResult lists what Uninstall deleted (or would delete) and the
// revision's shared objects it kept, each with why.
type UninstallResult struct {
	Deleted, Kept []string
}

// Uninstall deletes the installer's objects (only those with its labels)
// of one revision: its control plane, and, when no other revision's
// control plane is left, every shared object (base and gateways; the CRDs
// only with Purge, which removes every revision). Shared objects the
// revision owns while another revision is installed are kept, and listed.
// Namespaces are left.
func (c *Client) Uninstall(ctx context.Context, opts UninstallOptions) (*UninstallResult, error) {
	c.start = time.Now()
	res := &UninstallResult{}
	objs, err := c.listManaged(ctx, selector(""), opts.Purge)
	if err != nil {
		return res, err
	}
	rev := RevisionName(opts.Revision)
	others := map[string]bool{}
	for _, o := range objs {
		if l := o.GetLabels(); l[LabelComponent] == ComponentDiscovery && l[LabelRevision] != rev {
			others[l[LabelRevision]] = true
		}
	}
	var doomed []*unstructured.Unstructured
	for _, o := range objs {
		l := o.GetLabels()
		switch {
		case opts.Purge, l[LabelRevision] == rev && !SharedComponent(l[LabelComponent]):
			doomed = append(doomed, o)
		case !SharedComponent(l[LabelComponent]):
		case len(others) == 0:
			doomed = append(doomed, o)
		case l[LabelRevision] == rev:
			res.Kept = append(res.Kept, fmt.Sprintf("%s (shared: revision %s is still installed; shared objects go with the last uninstall)",
				objectKey(o), strings.Join(sortedKeys(others), ", ")))
		}
	}
	if len(doomed) == 0 {
		c.progress("uninstall", "nothing installed matches")
		return res, nil
	}
	res.Deleted, err = c.deleteAll(ctx, doomed, opts.DryRun)
	return res, err
}
