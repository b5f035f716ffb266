package inject

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

func tagConfig(tag, rev string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: "istio-revision-tag-" + tag, Labels: map[string]string{LabelTag: tag, LabelRev: rev},
	}}
}

func TestSelectionOfTagWebhooks(t *testing.T) {
	cases := map[string]struct {
		revision     string
		webhooks     []*admissionregistrationv1.MutatingWebhookConfiguration
		tags         []string
		isDefault    bool
		selects, not []string
	}{
		"the default revision without tags is the default": {
			isDefault: true, selects: []string{"default", ""}, not: []string{"canary"},
		},
		"a tag pointing at this revision selects it": {
			revision: "1-32", webhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{tagConfig("stable", "1-32"), tagConfig("canary", "1-33")},
			tags: []string{"stable"}, selects: []string{"1-32", "stable"}, not: []string{"canary", "default"},
		},
		"the tag default pointing at this revision makes it the default": {
			revision: "1-32", webhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{tagConfig("default", "1-32")},
			tags: []string{"default"}, isDefault: true, selects: []string{"default", "1-32"},
		},
		"the tag default pointing elsewhere takes the default away from the default revision": {
			webhooks:  []*admissionregistrationv1.MutatingWebhookConfiguration{tagConfig("default", "1-33")},
			isDefault: false, selects: []string{"default"},
		},
		"the revision default and a tag labelled istio.io/rev=default are the same": {
			revision: "", webhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{tagConfig("prod", "default")},
			tags: []string{"prod"}, isDefault: true, selects: []string{"prod"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sel := selectionOf(tc.revision, tc.webhooks)
			if !slices.Equal(sel.Tags, tc.tags) || sel.IsDefault() != tc.isDefault {
				t.Fatalf("selection %+v (default %v), want tags %v, default %v", sel, sel.IsDefault(), tc.tags, tc.isDefault)
			}
			for _, r := range tc.selects {
				if !sel.Selects(r) {
					t.Errorf("istio.io/rev=%s not selected", r)
				}
			}
			for _, r := range tc.not {
				if sel.Selects(r) {
					t.Errorf("istio.io/rev=%s selected", r)
				}
			}
		})
	}
}

// The injector follows tag webhooks as they come and go.
func TestInjectorFollowsRevisionTags(t *testing.T) {
	client := fake.NewClientset()
	i, err := New(Options{Namespace: "istio-system"}, client, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(TagListOptions))
	inf := tf.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()
	reg, err := i.followTags(inf)
	if err != nil {
		t.Fatal(err)
	}
	tf.Start(ctx.Done())
	defer func() { cancel(); tf.Shutdown() }()
	synced := reg.HasSynced
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("the tag informer to sync", synced)
	mwcs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mwcs.Create(ctx, tagConfig("canary", "default"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the tag canary", func() bool { return slices.Equal(i.Selection().Tags, []string{"canary"}) })
	if err := mwcs.Delete(ctx, "istio-revision-tag-canary", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the tag canary to go", func() bool { return len(i.Selection().Tags) == 0 })
}
