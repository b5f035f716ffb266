package install

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
)

// CheckOptions name the installation to check.
type CheckOptions struct {
	Namespace string
	Revision  string
	// CRDs are the names of the CRDs that must be Established.
	CRDs []string
	// Manifest is the revision's rendered install: its objects must be
	// the revision's own (shared ones may be another owner's). Optional.
	Manifest *Manifest
}

// Check runs the checks of an installed control plane, each with a hint
// when it fails.
func (c *Client) Check(ctx context.Context, opts CheckOptions) []CheckResult {
	c.start = time.Now()
	suffix := ""
	if opts.Revision != "" && opts.Revision != "default" {
		suffix = "-" + opts.Revision
	}
	out := []CheckResult{c.checkCRDs(ctx, opts.CRDs)}
	if opts.Manifest != nil {
		out = append(out, c.checkOwnership(ctx, opts.Manifest))
	}
	out = append(out, c.checkDeployment(ctx, opts.Namespace, "discovery"+suffix))
	root, rootErr := c.rootCert(ctx, opts.Namespace)
	out = append(out, c.checkWebhook(ctx, "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "istio-sidecar-injector"+suffix, root, rootErr))
	out = append(out, c.checkWebhook(ctx, "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "istio-validator"+suffix+"-"+opts.Namespace, root, rootErr))
	out = append(out, c.checkInjection(ctx, opts.Revision))
	return out
}

func (c *Client) checkCRDs(ctx context.Context, names []string) CheckResult {
	r := CheckResult{Name: "CRDs established"}
	var bad []string
	for _, n := range names {
		o := &unstructured.Unstructured{}
		o.SetName(n)
		ok, why, err := c.crdEstablished(ctx, o)
		if err != nil {
			why = err.Error()
		}
		if !ok {
			bad = append(bad, n+" ("+why+")")
		}
	}
	if len(bad) > 0 {
		r.Detail = strings.Join(bad, "; ")
		r.Hint = "run discovery bootstrap (it installs the CRDs of the base component)"
		return r
	}
	r.OK, r.Detail = true, fmt.Sprintf("%d CRDs", len(names))
	return r
}

func (c *Client) checkDeployment(ctx context.Context, ns, name string) CheckResult {
	r := CheckResult{Name: "discovery Deployment available"}
	d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		r.Detail = err.Error()
		r.Hint = "run discovery bootstrap, or pass the --namespace and --revision it was installed with"
		return r
	}
	ok, why := DeploymentAvailable(d)
	if !ok {
		r.Detail = fmt.Sprintf("%s/%s: %s", ns, name, why)
		r.Hint = fmt.Sprintf("kubectl -n %s describe deployment %s; kubectl -n %s logs deployment/%s", ns, name, ns, name)
		return r
	}
	r.OK, r.Detail = true, fmt.Sprintf("%s/%s, %d replicas available", ns, name, d.Status.AvailableReplicas)
	return r
}

// checkWebhook checks that the webhook configuration exists and that every
// webhook's caBundle is the mesh root that discovery publishes.
func (c *Client) checkWebhook(ctx context.Context, kind, resource, name string, root []byte, rootErr error) CheckResult {
	r := CheckResult{Name: kind + " " + name}
	gvr := crdGVR
	gvr.Group, gvr.Resource = "admissionregistration.k8s.io", resource
	u, err := c.Dynamic.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		r.Detail = err.Error()
		r.Hint = "run discovery bootstrap"
		return r
	}
	if rootErr != nil {
		r.Detail = "present; no published root to compare its caBundle with: " + rootErr.Error()
		r.Hint = "discovery publishes the ConfigMap istio-ca-root-cert once it runs and leads"
		return r
	}
	hooks, _ := u.Object["webhooks"].([]any)
	for _, h := range hooks {
		hm, _ := h.(map[string]any)
		cc, _ := hm["clientConfig"].(map[string]any)
		bundle, _ := cc["caBundle"].(string)
		decoded, err := decodeBase64(bundle)
		if err != nil || !caBundleMatches(decoded, root) {
			r.Detail = fmt.Sprintf("webhook %v: caBundle is not the mesh root", hm["name"])
			r.Hint = "discovery's leader patches the caBundle: check its logs and that it runs"
			return r
		}
	}
	r.OK, r.Detail = true, fmt.Sprintf("%d webhooks, caBundle is the mesh root", len(hooks))
	return r
}

// checkInjection creates a Pod with server-side dry run in a namespace
// labelled for injection and checks that it comes back injected: the
// whole path API server -> webhook -> discovery -> patch works.
func (c *Client) checkInjection(ctx context.Context, revision string) CheckResult {
	r := CheckResult{Name: "sidecar injection (dry-run Pod)"}
	ns := "discovery-check-injection"
	labels := map[string]string{"istio-injection": "enabled"}
	if revision != "" && revision != "default" {
		ns += "-" + revision
		labels = map[string]string{"istio.io/rev": revision}
	}
	_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		r.Detail = "create namespace " + ns + ": " + err.Error()
		return r
	}
	if err == nil {
		defer func() {
			_ = c.Kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
		}()
	}
	// The injected token volume needs a service account: name the
	// namespace's default one, which the controller manager creates
	// shortly after the namespace (retry while it does not exist yet).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "injection-check", Namespace: ns, Labels: map[string]string{"app": "injection-check"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			Containers:         []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	var got *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "serviceaccount") && strings.Contains(err.Error(), "not found") {
			return false, nil
		}
		return true, err
	})
	if err != nil {
		r.Detail = "dry-run Pod refused: " + err.Error()
		r.Hint = "the API server could not call the injection webhook: check the discovery Service's endpoints and the webhook's caBundle"
		return r
	}
	for _, ctr := range append(got.Spec.InitContainers, got.Spec.Containers...) {
		if ctr.Name == "istio-proxy" {
			r.OK, r.Detail = true, "a Pod created in "+ns+" comes back with istio-proxy"
			return r
		}
	}
	r.Detail = "the dry-run Pod came back without istio-proxy"
	r.Hint = "another webhook may be answering, or the injector config (ConfigMap istio-sidecar-injector) disables injection"
	return r
}

// checkOwnership checks that every object the revision renders and finds
// is its own: a per-revision object or a gateway labelled for another
// revision, or made by another installer, fails. Shared base objects may
// belong to another revision, or to Istio after --take-over.
func (c *Client) checkOwnership(ctx context.Context, m *Manifest) CheckResult {
	r := CheckResult{Name: "ownership"}
	var bad, shared []string
	found := 0
	for _, o := range m.Objects() {
		live, err := c.getLive(ctx, o)
		if err != nil {
			bad = append(bad, objectKey(o)+": "+err.Error())
			continue
		}
		if live == nil {
			continue
		}
		found++
		owner := OwnerOf(live)
		switch {
		case owner.Discovery && owner.Revision == m.Revision:
		case o.GetLabels()[LabelComponent] == ComponentBase,
			strings.HasPrefix(owner.Other, "Helm") && live.GetLabels()["app.kubernetes.io/part-of"] == "discovery":
			// shared, or discovery's chart installed with plain Helm
			shared = append(shared, objectKey(o)+" ("+owner.String()+")")
		default:
			bad = append(bad, objectKey(o)+" is owned by "+owner.String())
		}
	}
	if len(bad) > 0 {
		r.Detail = fmt.Sprintf("revision %s expects its own objects: %s", m.Revision, strings.Join(bad, "; "))
		r.Hint = "another revision's install (or an older installer, which relabelled shared objects) or another tool wrote them: " +
			"bootstrap of this revision names each and refuses to take them; remove them with what made them, then bootstrap again"
		return r
	}
	r.OK, r.Detail = true, fmt.Sprintf("%d objects found, all of revision %s", found, m.Revision)
	if len(shared) > 0 {
		r.Detail = fmt.Sprintf("%d objects found: %d of revision %s, %d of another owner where that is expected (shared, or Helm's): %s",
			found, found-len(shared), m.Revision, len(shared), abbreviate(shared, 2))
	}
	return r
}
