package inject

import (
	"context"
	"fmt"
	"slices"
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
)

// Labels of Istio's revision tags: a tag is a MutatingWebhookConfiguration
// istio-revision-tag-<tag> labelled istio.io/tag=<tag> and istio.io/rev=
// <revision> whose webhooks select namespaces and pods labelled
// istio.io/rev=<tag> and send them to the revision's injector (and, for
// the tag "default", istio-injection=enabled namespaces and
// sidecar.istio.io/inject=true pods too).
const (
	LabelRev = "istio.io/rev"
	LabelTag = "istio.io/tag"
	// DefaultTag is the tag that takes the default revision's selectors.
	DefaultTag = "default"
)

// Selection says which pods are this control plane's to inject, as the
// webhooks route them: those whose istio.io/rev (namespace's, else pod's)
// names its revision or one of the tags that point at it, and those of the
// default revision's selectors when it is the default (the default
// revision, unless the tag "default" points at another revision; or the
// revision the tag "default" points at).
type Selection struct {
	// Revision is the control plane's; "" and "default" are the default
	// revision.
	Revision string
	// Tags are the revision tags that point at Revision.
	Tags []string
	// OtherDefault is set when the tag "default" points at another
	// revision.
	OtherDefault bool
}

// RevisionSelection is the Selection of a revision without tags.
func RevisionSelection(revision string) Selection { return Selection{Revision: revision} }

// IsDefault reports whether istio-injection=enabled namespaces and pods
// that opt in from unlabelled namespaces are this revision's.
func (s Selection) IsDefault() bool {
	return slices.Contains(s.Tags, DefaultTag) || (isDefaultRevision(s.Revision) && !s.OtherDefault)
}

// Selects reports whether an istio.io/rev label value names this revision
// or one of its tags.
func (s Selection) Selects(rev string) bool {
	if slices.Contains(s.Tags, rev) || sameRevision(rev, s.Revision) {
		return true
	}
	return isDefaultRevision(rev) && slices.Contains(s.Tags, DefaultTag)
}

// selectionOf computes the Selection of revision from the tag webhooks.
func selectionOf(revision string, webhooks []*admissionregistrationv1.MutatingWebhookConfiguration) Selection {
	sel := Selection{Revision: revision}
	for _, w := range webhooks {
		tag, rev := w.Labels[LabelTag], w.Labels[LabelRev]
		if tag == "" {
			continue
		}
		switch {
		case sameRevision(rev, revision):
			if !slices.Contains(sel.Tags, tag) {
				sel.Tags = append(sel.Tags, tag)
			}
		case tag == DefaultTag:
			sel.OtherDefault = true
		}
	}
	sort.Strings(sel.Tags)
	return sel
}

// CanWatchWebhooks asks the API server whether this service account may
// list and watch every MutatingWebhookConfiguration, which following
// revision tags (and keeping their caBundle) needs: their names are not
// known in advance, so RBAC cannot grant them by resourceNames.
func CanWatchWebhooks(ctx context.Context, client kubernetes.Interface) (bool, error) {
	for _, verb := range []string{"list", "watch"} {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations",
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("ask whether MutatingWebhookConfigurations may be watched: %w", err)
		}
		if !r.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// TagListOptions narrows the informer of Informers.Tags to the tag
// webhooks.
func TagListOptions(o *metav1.ListOptions) { o.LabelSelector = LabelTag }

// followTags keeps i's Selection current from inf, the tag webhooks'
// informer (TagListOptions); it returns the registration, whose HasSynced
// tells when the tags have been read.
func (i *Injector) followTags(inf cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
	lister := admissionlisters.NewMutatingWebhookConfigurationLister(inf.GetIndexer())
	update := func() {
		list, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		sel := selectionOf(i.opts.Revision, list)
		old := i.sel.Swap(&sel)
		if old == nil || !slices.Equal(old.Tags, sel.Tags) || old.OtherDefault != sel.OtherDefault {
			i.log.Info("revision tags", "revision", revisionName(i.opts.Revision), "tags", sel.Tags, "default", sel.IsDefault())
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(_, _ any) { update() },
		DeleteFunc: func(any) { update() },
	})
	if err != nil {
		return nil, fmt.Errorf("watch revision tags: %w", err)
	}
	return reg, nil
}
