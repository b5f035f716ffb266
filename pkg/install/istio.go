package install

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// IstioInstall is an installation of Istio found in the cluster: istiod
// Deployments, Istio's CRDs and webhook configurations that discovery did
// not make.
type IstioInstall struct {
	// Findings say what was found and who made it, one line each.
	Findings []string
	// Revisions are istiod's revisions ("default" for istiod without a
	// revision name), sorted; Namespace is where istiod runs.
	Revisions []string
	Namespace string
	// Remove are the commands that remove Istio's control plane with its
	// own tools: the last step of a migration, run by the user.
	Remove []string
	// ControlPlane: an istiod Deployment or Istio's webhooks were found
	// (not only CRDs, which Istio's uninstall leaves).
	ControlPlane bool
}

// Found reports whether anything of Istio's is installed.
func (i *IstioInstall) Found() bool { return i != nil && len(i.Findings) > 0 }

// HasRevision reports whether istiod runs as revision rev ("" is default).
func (i *IstioInstall) HasRevision(rev string) bool {
	for _, r := range i.Revisions {
		if r == RevisionName(rev) {
			return true
		}
	}
	return false
}

var (
	deploymentGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	mutatingGVR   = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
	validatingGVR = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
)

// DetectIstio looks for an installation of Istio, made by istioctl (its
// objects carry operator.istio.io/component and
// install.operator.istio.io/owning-resource), by Helm
// (app.kubernetes.io/managed-by: Helm, meta.helm.sh/release-name), or by
// hand: Deployments labelled app=istiod, CRDs of *.istio.io groups that
// discovery did not make, and webhook configurations labelled by istioctl
// or Helm. Revision tags (istio.io/tag) are not an installation.
func (c *Client) DetectIstio(ctx context.Context) (*IstioInstall, error) {
	out := &IstioInstall{}
	deps, err := c.Dynamic.Resource(deploymentGVR).List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
	if err != nil {
		return nil, fmt.Errorf("list istiod Deployments: %w", err)
	}
	removal := map[string]bool{}
	revs := map[string]bool{}
	for i := range deps.Items {
		d := &deps.Items[i]
		if OwnerOf(d).Discovery {
			continue
		}
		rev := RevisionName(d.GetLabels()["istio.io/rev"])
		revs[rev] = true
		if out.Namespace == "" {
			out.Namespace = d.GetNamespace()
		}
		out.Findings = append(out.Findings, fmt.Sprintf("Deployment %s/%s (istiod, revision %s; made by %s)", d.GetNamespace(), d.GetName(), rev, OwnerOf(d)))
		removal[removeCommand(d, rev)] = true
	}
	crds, err := c.istioCRDs(ctx)
	if err != nil {
		return nil, err
	}
	out.Findings = append(out.Findings, crds...)
	hooks, remove, err := c.istioWebhooks(ctx)
	if err != nil {
		return nil, err
	}
	out.Findings = append(out.Findings, hooks...)
	for _, r := range remove {
		removal[r] = true
	}
	out.ControlPlane = len(revs) > 0 || len(hooks) > 0
	out.Revisions = sortedKeys(revs)
	out.Remove = sortedKeys(removal)
	return out, nil
}

// removeCommand is how the installer of an istiod Deployment removes it,
// leaving the CRDs (and with them the user's configuration).
func removeCommand(d *unstructured.Unstructured, rev string) string {
	if d.GetLabels()[LabelManagedBy] == helmManagedBy {
		rel, ns := d.GetAnnotations()[helmReleaseAnnotation], d.GetAnnotations()[helmNamespaceAnnot]
		if ns == "" {
			ns = d.GetNamespace()
		}
		return fmt.Sprintf("helm uninstall %s -n %s", rel, ns)
	}
	if OwnerOf(d).Other != "" {
		return "istioctl uninstall --revision " + rev + " (without --purge, which would remove the CRDs)"
	}
	return fmt.Sprintf("kubectl -n %s delete deployment %s (and the rest of that istiod's objects, with the tool that made them)", d.GetNamespace(), d.GetName())
}

// istioCRDs reports the CRDs of Istio's groups that discovery did not
// make, grouped by who made them.
func (c *Client) istioCRDs(ctx context.Context) ([]string, error) {
	list, err := c.Dynamic.Resource(crdGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list CRDs: %w", err)
	}
	byOwner := map[string][]string{}
	for i := range list.Items {
		crd := &list.Items[i]
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		if !strings.HasSuffix(group, ".istio.io") {
			continue
		}
		if o := OwnerOf(crd); !o.Discovery {
			byOwner[o.String()] = append(byOwner[o.String()], crd.GetName())
		}
	}
	var out []string
	for _, owner := range sortedKeys(byOwner) {
		names := byOwner[owner]
		sort.Strings(names)
		out = append(out, fmt.Sprintf("%d CRDs of Istio's groups (%s; made by %s)", len(names), abbreviate(names, 3), owner))
	}
	return out, nil
}

// istioWebhooks reports webhook configurations made by istioctl or Helm
// that are not revision tags, and the commands that remove those not
// removed with istiod.
func (c *Client) istioWebhooks(ctx context.Context) (out, remove []string, err error) {
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		kind string
	}{{mutatingGVR, "MutatingWebhookConfiguration"}, {validatingGVR, "ValidatingWebhookConfiguration"}} {
		list, err := c.Dynamic.Resource(r.gvr).List(ctx, metav1.ListOptions{LabelSelector: "!istio.io/tag"})
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
		}
		for i := range list.Items {
			w := &list.Items[i]
			app := w.GetLabels()["app"]
			if o := OwnerOf(w); o.Other != "" && !o.Discovery && (app == "sidecar-injector" || app == "istiod") {
				out = append(out, fmt.Sprintf("%s %s (made by %s)", r.kind, w.GetName(), o))
				if w.GetName() == "istiod-default-validator" && w.GetLabels()[LabelManagedBy] == helmManagedBy {
					remove = append(remove, fmt.Sprintf("helm upgrade %s istio/base -n %s --reuse-values --set defaultRevision= "+
						"(keeps the CRDs; removes istiod-default-validator, which calls istiod)", w.GetAnnotations()[helmReleaseAnnotation], w.GetAnnotations()[helmNamespaceAnnot]))
				}
			}
		}
	}
	return out, remove, nil
}

// abbreviate lists the first n names and how many more there are.
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// istioCheck is the pre-check's verdict on an Istio installation: without
// takeOver the install is refused; with it the revision must be one of
// its own.
func istioCheck(found *IstioInstall, m *Manifest, takeOver bool) CheckResult {
	r := CheckResult{Name: "Istio"}
	if !found.Found() {
		r.OK, r.Detail = true, "not installed"
		if takeOver {
			r.Detail += " (--take-over changes nothing then)"
		}
		return r
	}
	what := strings.Join(found.Findings, "; ")
	if !takeOver {
		r.Detail = "Istio is installed: " + what
		r.Hint = "discovery does not install over Istio: istiod's Service, webhooks and ConfigMaps would be taken from it " +
			"(if this is discovery installed with Helm, keep managing it with Helm). " +
			"To migrate, install discovery as a revision of its own beside istiod: discovery bootstrap --take-over --revision discovery " +
			"(Istio's objects are left as they are; then move namespaces with discovery migrate --revision discovery)"
		return r
	}
	if found.HasRevision(m.Revision) || (m.Revision == defaultRevision && found.ControlPlane) {
		revs := strings.Join(found.Revisions, ", ")
		if revs == "" {
			revs = "none running"
		}
		r.Detail = fmt.Sprintf("--take-over installs discovery as a revision of its own beside Istio's control plane; revision %s is Istio's (istiod's revisions: %s; its webhooks select the default revision's pods)",
			m.Revision, revs)
		r.Hint = "name a revision of its own: --revision discovery"
		return r
	}
	r.OK = true
	r.Detail = fmt.Sprintf("Istio is installed (%s); installing revision %s beside it, leaving Istio's objects as they are", what, m.Revision)
	return r
}
