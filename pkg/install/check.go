package install

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// MinKubernetesVersion is the oldest API server the installer supports.
const MinKubernetesVersion = "1.28.0"

// CheckResult is the outcome of one check.
type CheckResult struct {
	Name string
	OK   bool
	// Detail says what was found; Hint what to do when it failed.
	Detail, Hint string
}

func (r CheckResult) String() string {
	if r.OK {
		return fmt.Sprintf("ok    %s: %s", r.Name, r.Detail)
	}
	s := fmt.Sprintf("FAIL  %s: %s", r.Name, r.Detail)
	if r.Hint != "" {
		s += "\n      hint: " + r.Hint
	}
	return s
}

// Failed returns the failed results.
func Failed(rs []CheckResult) []CheckResult {
	var out []CheckResult
	for _, r := range rs {
		if !r.OK {
			out = append(out, r)
		}
	}
	return out
}

// PreCheck runs the checks before an install of m: the cluster answers,
// its version is supported, the caller may do everything the install
// does, and any other installation is reported.
func (c *Client) PreCheck(ctx context.Context, m *Manifest) []CheckResult {
	var out []CheckResult
	v, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		return append(out, CheckResult{Name: "cluster reachable", Detail: err.Error(),
			Hint: "check --kubeconfig and that the API server answers (kubectl version)"})
	}
	out = append(out, CheckResult{Name: "cluster reachable", OK: true, Detail: "Kubernetes " + v.GitVersion})
	out = append(out, versionCheck(v.GitVersion))
	out = append(out, c.permissionCheck(ctx, m))
	out = append(out, c.otherInstallations(ctx, m))
	return out
}

func versionCheck(git string) CheckResult {
	r := CheckResult{Name: "Kubernetes version"}
	have, err := version.ParseGeneric(git)
	if err != nil {
		r.Detail = fmt.Sprintf("cannot parse %q: %v", git, err)
		return r
	}
	r.OK = have.AtLeast(version.MustParseGeneric(MinKubernetesVersion))
	r.Detail = fmt.Sprintf("%s (at least %s is supported)", git, MinKubernetesVersion)
	if !r.OK {
		r.Hint = "upgrade the cluster"
	}
	return r
}

// permissionCheck asks the API server (SelfSubjectAccessReview) whether
// the caller may create, patch and delete every kind the install writes,
// where it writes it.
func (c *Client) permissionCheck(ctx context.Context, m *Manifest) CheckResult {
	r := CheckResult{Name: "permissions"}
	type target struct{ group, resource, namespace string }
	targets := map[target]bool{}
	for _, o := range m.Objects() {
		gvk := o.GroupVersionKind()
		mapping, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			r.Detail = fmt.Sprintf("kind %s is not served: %v", gvk, err)
			return r
		}
		targets[target{gvk.Group, mapping.Resource.Resource, o.GetNamespace()}] = true
	}
	var denied []string
	for t := range targets {
		for _, verb := range []string{"get", "create", "patch", "delete"} {
			review, err := c.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Group: t.group, Resource: t.resource, Namespace: t.namespace, Verb: verb,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				r.Detail = fmt.Sprintf("SelfSubjectAccessReview: %v", err)
				return r
			}
			if !review.Status.Allowed {
				where := t.namespace
				if where == "" {
					where = "cluster-wide"
				}
				denied = append(denied, fmt.Sprintf("%s %s.%s (%s)", verb, t.resource, t.group, where))
			}
		}
	}
	sort.Strings(denied)
	if len(denied) > 0 {
		r.Detail = "not allowed: " + strings.Join(denied, ", ")
		r.Hint = "run as a cluster administrator (the install creates cluster roles, CRDs and webhook configurations)"
		return r
	}
	r.OK, r.Detail = true, fmt.Sprintf("allowed to write %d kinds where the install writes them", len(targets))
	return r
}

// otherInstallations reports control planes other than the one m
// installs: another revision or image of ours, or Istio's istiod.
func (c *Client) otherInstallations(ctx context.Context, m *Manifest) CheckResult {
	r := CheckResult{Name: "other installations", OK: true}
	deps, err := c.Kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedByValue + "," + LabelComponent + "=" + ComponentDiscovery})
	if err != nil {
		r.OK, r.Detail = false, err.Error()
		return r
	}
	var notes []string
	want := ""
	for _, o := range m.Objects() {
		if o.GetKind() == "Deployment" && o.GetLabels()[LabelComponent] == ComponentDiscovery {
			want = firstImage(o.Object)
		}
	}
	for _, d := range deps.Items {
		rev := d.Labels[LabelRevision]
		img := ""
		if len(d.Spec.Template.Spec.Containers) > 0 {
			img = d.Spec.Template.Spec.Containers[0].Image
		}
		switch {
		case rev != m.Revision:
			notes = append(notes, fmt.Sprintf("revision %s is installed (%s/%s, %s)", rev, d.Namespace, d.Name, img))
		case want != "" && img != want:
			notes = append(notes, fmt.Sprintf("revision %s runs %s; this install changes it to %s", rev, img, want))
		}
	}
	istiod, err := c.Kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
	if err == nil && len(istiod.Items) > 0 {
		notes = append(notes, fmt.Sprintf("Istio's istiod runs in %s: its webhooks may also inject pods", istiod.Items[0].Namespace))
	}
	if len(notes) == 0 {
		r.Detail = "none"
		return r
	}
	r.Detail = strings.Join(notes, "; ")
	return r
}

// firstImage returns the first container's image of a Deployment object.
func firstImage(obj map[string]any) string {
	var cur any = obj
	for _, f := range []string{"spec", "template", "spec", "containers"} {
		m, _ := cur.(map[string]any)
		cur = m[f]
	}
	cs, _ := cur.([]any)
	if len(cs) == 0 {
		return ""
	}
	c, _ := cs[0].(map[string]any)
	img, _ := c["image"].(string)
	return img
}

// rootCert reads the mesh root the control plane publishes.
func (c *Client) rootCert(ctx context.Context, namespace string) ([]byte, error) {
	cm, err := c.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return []byte(cm.Data["root-cert.pem"]), nil
}

func caBundleMatches(bundle, root []byte) bool {
	return len(root) > 0 && bytes.Equal(bytes.TrimSpace(bundle), bytes.TrimSpace(root))
}

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
