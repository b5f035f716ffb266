package install

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

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

// PreCheckOptions say how the install will be applied.
type PreCheckOptions struct {
	// TakeOver is ApplyOptions.TakeOver: a migration from Istio.
	TakeOver bool
}

// PreCheck runs the checks before an install of m: the cluster answers,
// its version is supported, the caller may do everything the install
// does, Istio is not installed (or, with TakeOver, the install goes beside
// it), no rendered object belongs to someone else, and other revisions are
// reported.
func (c *Client) PreCheck(ctx context.Context, m *Manifest, opts PreCheckOptions) []CheckResult {
	var out []CheckResult
	v, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		return append(out, CheckResult{
			Name: "cluster reachable", Detail: err.Error(),
			Hint: "check --kubeconfig and that the API server answers (kubectl version)",
		})
	}
	out = append(out, CheckResult{Name: "cluster reachable", OK: true, Detail: "Kubernetes " + v.GitVersion})
	out = append(out, versionCheck(v.GitVersion))
	out = append(out, c.permissionCheck(ctx, m))
	if found, err := c.DetectIstio(ctx); err != nil {
		out = append(out, CheckResult{Name: "Istio", Detail: err.Error()})
	} else {
		out = append(out, istioCheck(found, m, opts.TakeOver))
	}
	out = append(out, c.ownershipPreCheck(ctx, m, opts.TakeOver))
	out = append(out, c.otherInstallations(ctx, m))
	return out
}

// ownershipPreCheck fails when the install would write an object that
// someone else owns (Apply would refuse), and names the shared objects it
// leaves to their owners.
func (c *Client) ownershipPreCheck(ctx context.Context, m *Manifest, takeOver bool) CheckResult {
	r := CheckResult{Name: "ownership"}
	p, err := c.planApply(ctx, m, takeOver)
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	var oe *OwnershipError
	if err := p.conflicts(); errors.As(err, &oe) {
		r.Detail = fmt.Sprintf("%s to someone else: %s", countOf(len(oe.Conflicts), "rendered object belongs", "rendered objects belong"), strings.Join(oe.Conflicts, "; "))
		r.Hint = "discovery changes only what it made, for the revision it installs: install another revision (--revision), " +
			"rename the object in the input, or remove it with the tool that made it"
		return r
	}
	r.OK = true
	r.Detail = fmt.Sprintf("revision %s owns or may create every object it writes", m.Revision)
	if sk := p.skipped(); len(sk) > 0 {
		r.Detail += fmt.Sprintf("; %d shared objects are left to their owners: %s", len(sk), abbreviate(sk, 2))
	}
	return r
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

// permissionCheck asks the API server (SelfSubjectAccessReviews, in
// parallel) whether the caller may get, create, patch and delete every
// kind the install writes, where it writes it.
func (c *Client) permissionCheck(ctx context.Context, m *Manifest) CheckResult {
	r := CheckResult{Name: "permissions"}
	targets := map[accessTarget]bool{}
	for _, o := range m.Objects() {
		gvk := o.GroupVersionKind()
		mapping, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			r.Detail = fmt.Sprintf("kind %s is not served: %v", gvk, err)
			return r
		}
		targets[accessTarget{gvk.Group, mapping.Resource.Resource, o.GetNamespace()}] = true
	}
	denied, err := c.denied(ctx, targets, []string{"get", "create", "patch", "delete"})
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	if len(denied) > 0 {
		r.Detail = "not allowed: " + strings.Join(denied, ", ")
		r.Hint = "run as a cluster administrator (the install creates cluster roles, CRDs and webhook configurations)"
		return r
	}
	r.OK, r.Detail = true, fmt.Sprintf("allowed to write %d kinds where the install writes them", len(targets))
	return r
}

// accessTarget is a resource where the install writes it ("" namespace:
// cluster-wide).
type accessTarget struct{ group, resource, namespace string }

// denied asks the API server, parallelism reviews at a time, which verbs
// on which targets the caller may not use, and lists them sorted.
func (c *Client) denied(ctx context.Context, targets map[accessTarget]bool, verbs []string) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for t := range targets {
		for _, verb := range verbs {
			g.Go(func() error {
				res, err := c.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Group: t.group, Resource: t.resource, Namespace: t.namespace, Verb: verb,
					}},
				}, metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("SelfSubjectAccessReview: %w", err)
				}
				if !res.Status.Allowed {
					where := t.namespace
					if where == "" {
						where = "cluster-wide"
					}
					mu.Lock()
					out = append(out, fmt.Sprintf("%s %s.%s (%s)", verb, t.resource, t.group, where))
					mu.Unlock()
				}
				return nil
			})
		}
	}
	err := g.Wait()
	sort.Strings(out)
	return out, err
}

// otherInstallations reports control planes of discovery other than the
// one m installs: another revision, or another image of this one.
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
