package inject

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Revision tags as Istio makes them (istioctl tag set and Istio's
// revision-tags chart templates): the MutatingWebhookConfiguration
// istio-revision-tag-<tag> (with "-<namespace>" outside istio-system),
// labelled istio.io/tag and istio.io/rev, whose webhooks send pods whose
// namespace or own istio.io/rev is the tag to the revision's injector, and
// the Service istiod-revision-tag-<tag>, which selects the revision's
// Pods. The webhooks' client configuration (Service or URL, and caBundle)
// is the revision's own injector webhook's; the leader of the revision
// keeps the caBundle current after that.

// TagInfo is one revision tag.
type TagInfo struct {
	Tag, Revision string
	// Namespaces are the namespaces labelled istio.io/rev=<tag>.
	Namespaces []string
}

// TagOptions say where the control plane lives and how to change a tag.
type TagOptions struct {
	// Namespace is the control plane's (istio-system).
	Namespace string
	// Overwrite lets Set move an existing tag to another revision.
	Overwrite bool
}

// TagWebhookName is the MutatingWebhookConfiguration of a tag.
func TagWebhookName(tag, namespace string) string {
	if namespace == "" || namespace == "istio-system" {
		return "istio-revision-tag-" + tag
	}
	return "istio-revision-tag-" + tag + "-" + namespace
}

// tagServiceName is the Service of a tag.
func tagServiceName(tag string) string { return "istiod-revision-tag-" + tag }

// ErrNoRevision is returned when no injector webhook of the revision is
// installed.
var ErrNoRevision = errors.New("no MutatingWebhookConfiguration of that revision")

// revisionWebhook finds the revision's own injector configuration: the one
// labelled istio.io/rev=<revision> without istio.io/tag.
func revisionWebhook(ctx context.Context, client kubernetes.Interface, revision string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	list, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{
		LabelSelector: LabelRev + "=" + revisionName(revision) + ",!" + LabelTag,
	})
	if err != nil {
		return nil, fmt.Errorf("list the injector webhooks of revision %s: %w", revisionName(revision), err)
	}
	switch len(list.Items) {
	case 0:
		return nil, fmt.Errorf("revision %s: %w", revisionName(revision), ErrNoRevision)
	case 1:
		return &list.Items[0], nil
	default:
		return nil, fmt.Errorf("revision %s has %d injector MutatingWebhookConfigurations; expected one", revisionName(revision), len(list.Items))
	}
}

// SetTag points tag at revision: it creates (or updates) the tag's
// MutatingWebhookConfiguration and Service from the revision's own.
func SetTag(ctx context.Context, client kubernetes.Interface, tag, revision string, o TagOptions) error {
	if errs := validateTagName(tag); errs != "" {
		return fmt.Errorf("tag %q: %s", tag, errs)
	}
	if tag != DefaultTag && !sameRevision(tag, revision) {
		if _, err := revisionWebhook(ctx, client, tag); err == nil {
			return fmt.Errorf("cannot create tag %q: a control plane revision has that name", tag)
		} else if !errors.Is(err, ErrNoRevision) {
			return err
		}
	}
	canon, err := revisionWebhook(ctx, client, revision)
	if err != nil {
		return err
	}
	want, err := tagWebhook(canon, tag, revisionName(revision))
	if err != nil {
		return err
	}
	want.Name = TagWebhookName(tag, o.Namespace)
	mwcs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	have, err := mwcs.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := mwcs.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("get MutatingWebhookConfiguration %s: %w", want.Name, err)
	default:
		if rev := have.Labels[LabelRev]; !sameRevision(rev, revision) && !o.Overwrite {
			return fmt.Errorf("tag %q points at revision %s; use --overwrite to move it", tag, revisionName(rev))
		}
		want.ResourceVersion = have.ResourceVersion
		if _, err := mwcs.Update(ctx, want, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update MutatingWebhookConfiguration %s: %w", want.Name, err)
		}
	}
	return setTagService(ctx, client, tag, revision, o.Namespace)
}

// tagWebhook builds tag's webhooks from the revision's injector webhook:
// its client configuration and rules, with the tag's selectors.
func tagWebhook(canon *admissionregistrationv1.MutatingWebhookConfiguration, tag, revision string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var base *admissionregistrationv1.MutatingWebhook
	for i := range canon.Webhooks {
		if strings.HasSuffix(canon.Webhooks[i].Name, "sidecar-injector.istio.io") {
			base = &canon.Webhooks[i]
			break
		}
	}
	if base == nil {
		return nil, fmt.Errorf("MutatingWebhookConfiguration %s has no sidecar-injector.istio.io webhook", canon.Name)
	}
	hook := func(prefix string, ns, obj []metav1.LabelSelectorRequirement) admissionregistrationv1.MutatingWebhook {
		w := *base.DeepCopy()
		w.Name = prefix + "sidecar-injector.istio.io"
		w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: ns}
		w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: obj}
		return w
	}
	in := func(k string, v ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: v}
	}
	notIn := func(k string, v ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpNotIn, Values: v}
	}
	absent := func(k string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpDoesNotExist}
	}
	const inject = "sidecar.istio.io/inject"
	hooks := []admissionregistrationv1.MutatingWebhook{
		hook("rev.namespace.", []metav1.LabelSelectorRequirement{in(LabelRev, tag), absent(NamespaceInjectionLabel)},
			[]metav1.LabelSelectorRequirement{notIn(inject, "false")}),
		hook("rev.object.", []metav1.LabelSelectorRequirement{absent(LabelRev), absent(NamespaceInjectionLabel)},
			[]metav1.LabelSelectorRequirement{notIn(inject, "false"), in(LabelRev, tag)}),
	}
	if tag == DefaultTag {
		hooks = append(hooks,
			hook("namespace.", []metav1.LabelSelectorRequirement{in(NamespaceInjectionLabel, "enabled")},
				[]metav1.LabelSelectorRequirement{notIn(inject, "false")}),
			hook("object.", []metav1.LabelSelectorRequirement{absent(NamespaceInjectionLabel), absent(LabelRev)},
				[]metav1.LabelSelectorRequirement{in(inject, "true"), absent(LabelRev)}))
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Labels: tagLabels(tag, revision, "sidecar-injector")},
		Webhooks:   hooks,
	}, nil
}

// tagLabels are Istio's labels of a tag's objects (not the installer's,
// whose prune would delete what it did not render).
func tagLabels(tag, revision, app string) map[string]string {
	return map[string]string{LabelTag: tag, LabelRev: revision, "app": app, "app.kubernetes.io/part-of": "discovery"}
}

// setTagService creates or updates the tag's Service with the selector and
// ports of the revision's istiod Service; without one it does nothing.
func setTagService(ctx context.Context, client kubernetes.Interface, tag, revision, namespace string) error {
	svcs := client.CoreV1().Services(namespace)
	canon, err := svcs.Get(ctx, "istiod"+revSuffix(revision), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // a remote installation: no Service for the revision
	}
	if err != nil {
		return fmt.Errorf("get Service istiod%s: %w", revSuffix(revision), err)
	}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: tagServiceName(tag), Namespace: namespace, Labels: tagLabels(tag, revisionName(revision), "istiod")},
		Spec:       corev1.ServiceSpec{Selector: canon.Spec.Selector, Ports: canon.Spec.Ports},
	}
	have, err := svcs.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = svcs.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		have.Labels, have.Spec.Selector, have.Spec.Ports = want.Labels, want.Spec.Selector, want.Spec.Ports
		_, err = svcs.Update(ctx, have, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("Service %s: %w", want.Name, err)
	}
	return nil
}

// ListTags returns every revision tag, by tag.
func ListTags(ctx context.Context, client kubernetes.Interface) ([]TagInfo, error) {
	list, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: LabelTag})
	if err != nil {
		return nil, fmt.Errorf("list revision tags: %w", err)
	}
	seen := map[string]bool{}
	var out []TagInfo
	for _, w := range list.Items {
		tag := w.Labels[LabelTag]
		if seen[tag] {
			continue
		}
		seen[tag] = true
		ns, err := TagNamespaces(ctx, client, tag)
		if err != nil {
			return nil, err
		}
		out = append(out, TagInfo{Tag: tag, Revision: w.Labels[LabelRev], Namespaces: ns})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out, nil
}

// TagNamespaces are the namespaces labelled istio.io/rev=<tag>.
func TagNamespaces(ctx context.Context, client kubernetes.Interface, tag string) ([]string, error) {
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelRev + "=" + tag})
	if err != nil {
		return nil, fmt.Errorf("list the namespaces of tag %s: %w", tag, err)
	}
	out := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out, nil
}

// RemoveTag deletes tag's MutatingWebhookConfigurations and Service. It
// reports whether there was anything to delete.
func RemoveTag(ctx context.Context, client kubernetes.Interface, tag, namespace string) (bool, error) {
	sel := metav1.ListOptions{LabelSelector: LabelTag + "=" + tag}
	mwcs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	list, err := mwcs.List(ctx, sel)
	if err != nil {
		return false, fmt.Errorf("list the webhooks of tag %s: %w", tag, err)
	}
	found := false
	for _, w := range list.Items {
		if err := mwcs.Delete(ctx, w.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return found, fmt.Errorf("delete MutatingWebhookConfiguration %s: %w", w.Name, err)
		}
		found = true
	}
	svcs, err := client.CoreV1().Services(namespace).List(ctx, sel)
	if err != nil {
		return found, fmt.Errorf("list the Services of tag %s: %w", tag, err)
	}
	for _, s := range svcs.Items {
		if err := client.CoreV1().Services(namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return found, fmt.Errorf("delete Service %s: %w", s.Name, err)
		}
		found = true
	}
	return found, nil
}

// validateTagName checks that a tag can be a label value and an object
// name; "" means it can.
func validateTagName(tag string) string {
	if tag == "" || len(tag) > 63 {
		return "must be 1 to 63 characters"
	}
	for i, r := range tag {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(tag)-1
		if !ok {
			return "must be lowercase letters, digits and inner dashes"
		}
	}
	return ""
}

func revSuffix(r string) string {
	if isDefaultRevision(r) {
		return ""
	}
	return "-" + r
}
