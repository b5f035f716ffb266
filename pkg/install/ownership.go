package install

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Who owns what. Every object the installer makes carries its labels
// (LabelManagedBy, LabelComponent, LabelRevision), and the revision label
// names the object's one owner:
//
//   - The discovery component is per revision: its objects are named and
//     labelled for their revision, and only that revision's bootstrap,
//     prune and uninstall touch them.
//   - The base component (CRDs, the shared cluster roles) and gateways are
//     shared: the revision that first made them owns them. Another
//     revision's bootstrap leaves them as they are (a base object whose
//     owner has no control plane left is adopted), and only the last
//     uninstall deletes them (the CRDs only with --purge).
//   - An object that the installer did not make (Istio's, Helm's, anyone's)
//     is never changed or deleted: a bootstrap that would write one is
//     refused before anything is applied. With TakeOver (a migration from
//     Istio) base objects made by another installer are left to it.

// SharedComponent reports whether a component's objects are shared by
// every revision: base and the gateways.
func SharedComponent(component string) bool {
	return component == ComponentBase || strings.HasPrefix(component, gatewayPrefix)
}

// Owner is who made a live object.
type Owner struct {
	// Discovery: the installer made it, for Revision.
	Discovery bool
	Revision  string
	// Other names another installer, when the labels say which: "Helm
	// release istio-base", "istioctl (component Pilot)".
	Other string
}

// Labels and annotations of Istio's installers (istioctl's
// operator/pkg/manifest, and Helm's).
const (
	istioctlComponentLabel = "operator.istio.io/component"
	istioctlOwnerLabel     = "install.operator.istio.io/owning-resource"
	helmReleaseAnnotation  = "meta.helm.sh/release-name"
	helmNamespaceAnnot     = "meta.helm.sh/release-namespace"
	helmManagedBy          = "Helm"
)

// OwnerOf reads the owner of a live object from its labels.
func OwnerOf(u *unstructured.Unstructured) Owner {
	l := u.GetLabels()
	if l[LabelManagedBy] == ManagedByValue {
		return Owner{Discovery: true, Revision: l[LabelRevision]}
	}
	if l[LabelManagedBy] == helmManagedBy {
		if rel := u.GetAnnotations()[helmReleaseAnnotation]; rel != "" {
			return Owner{Other: "Helm release " + rel}
		}
		return Owner{Other: "Helm"}
	}
	if c := l[istioctlComponentLabel]; c != "" {
		return Owner{Other: "istioctl (component " + c + ")"}
	}
	if l[istioctlOwnerLabel] != "" {
		return Owner{Other: "istioctl"}
	}
	if m := l[LabelManagedBy]; m != "" {
		return Owner{Other: m}
	}
	return Owner{}
}

func (o Owner) String() string {
	switch {
	case o.Discovery:
		return "revision " + o.Revision
	case o.Other != "":
		return o.Other
	}
	return "no installer's labels"
}

// action is what Apply does with one rendered object.
type action int

const (
	// actApply: absent, or owned by the revision being applied.
	actApply action = iota
	// actAdopt: a base object of a revision that is no longer installed.
	actAdopt
	// actSkip: a shared object with another owner, left as it is.
	actSkip
	// actConflict: Apply would write an object it may not.
	actConflict
)

// decision is what Apply does with one rendered object, and why.
type decision struct {
	obj, live *unstructured.Unstructured
	action    action
	why       string
}

// plan is the decision for every rendered object, by objectKey.
type plan struct {
	decisions map[string]*decision
	// revisions are the revisions whose control plane is installed.
	revisions map[string]bool
}

// OwnershipError lists the objects a bootstrap would have to take from
// their owner. Nothing is applied when it is returned.
type OwnershipError struct {
	Conflicts []string
}

func (e *OwnershipError) Error() string {
	return fmt.Sprintf("%s to someone else (discovery changes only what it made, for the revision it installs): %s",
		countOf(len(e.Conflicts), "object belongs", "objects belong"), strings.Join(e.Conflicts, "; "))
}

// countOf is "n one" or "n many", as n asks.
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// conflicts returns the plan's conflicts, sorted, or nil.
func (p *plan) conflicts() error {
	var out []string
	for k, d := range p.decisions {
		if d.action == actConflict {
			out = append(out, k+": "+d.why)
		}
	}
	if len(out) == 0 {
		return nil
	}
	sort.Strings(out)
	return &OwnershipError{Conflicts: out}
}

// skipped lists the objects left to their owners, with why.
func (p *plan) skipped() []string {
	var out []string
	for k, d := range p.decisions {
		if d.action == actSkip {
			out = append(out, k+" ("+d.why+")")
		}
	}
	sort.Strings(out)
	return out
}

// planApply reads every rendered object from the cluster and decides what
// to do with it. takeOver leaves base objects made by another installer
// to it (a migration from Istio).
func (c *Client) planApply(ctx context.Context, m *Manifest, takeOver bool) (*plan, error) {
	revs, err := c.installedRevisions(ctx)
	if err != nil {
		return nil, err
	}
	p := &plan{decisions: map[string]*decision{}, revisions: revs}
	var mu sync.Mutex
	err = c.forEach(ctx, m.Objects(), func(ctx context.Context, o *unstructured.Unstructured) error {
		live, err := c.getLive(ctx, o)
		if err != nil {
			return fmt.Errorf("get %s: %w", objectKey(o), err)
		}
		d := decide(o, live, m.Revision, revs, takeOver)
		mu.Lock()
		p.decisions[objectKey(o)] = d
		mu.Unlock()
		return nil
	})
	return p, err
}

// getLive returns the object as stored, or nil when it does not exist.
func (c *Client) getLive(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := c.resourceFor(o)
	if err != nil {
		return nil, err
	}
	live, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

// gatewayKinds are the kinds of a gateway's objects, for kubectl.
const gatewayKinds = "serviceaccount,role,rolebinding,service,deployment,horizontalpodautoscaler,poddisruptionbudget"

// decide applies the ownership rules to one object.
func decide(o, live *unstructured.Unstructured, rev string, installed map[string]bool, takeOver bool) *decision {
	d := &decision{obj: o, live: live}
	if live == nil {
		return d
	}
	comp := o.GetLabels()[LabelComponent]
	owner := OwnerOf(live)
	switch {
	case owner.Discovery && owner.Revision == rev:
	case owner.Discovery && comp == ComponentBase && installed[owner.Revision]:
		d.action, d.why = actSkip, "shared; left to revision "+owner.Revision+", its owner"
	case owner.Discovery && comp == ComponentBase:
		d.action, d.why = actAdopt, "adopted from revision "+owner.Revision+", which is no longer installed"
	case owner.Discovery && SharedComponent(comp):
		d.action, d.why = actConflict, fmt.Sprintf("a gateway of revision %s: give this one another name, or, if it is this install's "+
			"(an older installer relabelled it), give it back: kubectl -n %s label %s -l %s=%s %s=%s --overwrite",
			owner.Revision, o.GetNamespace(), gatewayKinds, LabelComponent, comp, LabelRevision, rev)
	case owner.Discovery:
		d.action, d.why = actConflict, "owned by revision "+owner.Revision
	case takeOver && comp == ComponentBase:
		d.action, d.why = actSkip, "made by "+owner.String()+"; left to it"
	default:
		d.action, d.why = actConflict, "exists and was not made by discovery ("+owner.String()+")"
	}
	return d
}

// InstalledRevisions are the revisions of discovery whose control plane
// is installed.
func (c *Client) InstalledRevisions(ctx context.Context) ([]string, error) {
	revs, err := c.installedRevisions(ctx)
	return sortedKeys(revs), err
}

// installedRevisions are the revisions with a control plane installed:
// those labelling a discovery-component ConfigMap or injector webhook
// configuration (every revision renders both; the remote profile has no
// Deployment).
func (c *Client) installedRevisions(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	sel := selector("").String() + "," + LabelComponent + "=" + ComponentDiscovery
	for _, mr := range managedResources {
		if mr.kind != "ConfigMap" && mr.kind != "MutatingWebhookConfiguration" {
			continue
		}
		list, err := c.Dynamic.Resource(mr.gvr).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", mr.gvr.Resource, err)
		}
		for _, it := range list.Items {
			out[it.GetLabels()[LabelRevision]] = true
		}
	}
	return out, nil
}

// parallelism bounds the requests the installer has in flight.
const parallelism = 16

// forEach runs fn on every object, parallelism at a time, and returns the
// first error.
func (c *Client) forEach(ctx context.Context, objs []*unstructured.Unstructured, fn func(context.Context, *unstructured.Unstructured) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for _, o := range objs {
		g.Go(func() error { return fn(ctx, o) })
	}
	return g.Wait()
}
