package inject

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// revisionObjects are what the chart installs for revision rev: its
// injector MutatingWebhookConfiguration and its istiod Service.
func revisionObjects(rev string) []runtime.Object {
	url := "https://discovery.example:15017/inject"
	name := "istio-sidecar-injector" + revSuffix(rev)
	return []runtime.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelRev: revisionName(rev), "app": "discovery"}},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:         "rev.namespace.sidecar-injector.istio.io",
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("ROOT")},
			}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "istiod" + revSuffix(rev), Namespace: "istio-system", Labels: map[string]string{LabelRev: revisionName(rev)}},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "discovery", LabelRev: revisionName(rev)}, Ports: []corev1.ServicePort{{Name: "https-dns", Port: 15012}}},
		},
	}
}

func TestRevisionTags(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(append(revisionObjects(""), revisionObjects("canary")...)...)
	opts := TagOptions{Namespace: "istio-system"}
	if err := SetTag(ctx, client, "prod", "default", opts); err != nil {
		t.Fatal(err)
	}
	mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-revision-tag-prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mwc.Labels[LabelTag] != "prod" || mwc.Labels[LabelRev] != "default" || mwc.Labels["app.kubernetes.io/managed-by"] != "" {
		t.Errorf("labels %v", mwc.Labels)
	}
	var names []string
	for _, w := range mwc.Webhooks {
		names = append(names, w.Name)
		if w.ClientConfig.URL == nil || *w.ClientConfig.URL != "https://discovery.example:15017/inject" || string(w.ClientConfig.CABundle) != "ROOT" {
			t.Errorf("%s: client config %+v, want the revision's", w.Name, w.ClientConfig)
		}
	}
	if !slices.Equal(names, []string{"rev.namespace.sidecar-injector.istio.io", "rev.object.sidecar-injector.istio.io"}) {
		t.Errorf("webhooks %v", names)
	}
	if got := mwc.Webhooks[0].NamespaceSelector.MatchExpressions[0]; got.Key != LabelRev || got.Values[0] != "prod" {
		t.Errorf("namespace selector %+v, want istio.io/rev In [prod]", got)
	}
	svc, err := client.CoreV1().Services("istio-system").Get(ctx, "istiod-revision-tag-prod", metav1.GetOptions{})
	if err != nil || svc.Spec.Selector["app"] != "discovery" || svc.Labels[LabelTag] != "prod" {
		t.Errorf("tag Service %v (%v)", svc, err)
	}

	refused := map[string]struct {
		tag, rev string
		opts     TagOptions
		want     string
	}{
		"a tag named as a revision":             {"canary", "default", opts, "a control plane revision has that name"},
		"a tag moved without overwrite":         {"prod", "canary", opts, "--overwrite"},
		"a tag of a revision that is not there": {"qa", "1-99", opts, "no MutatingWebhookConfiguration"},
		"a tag that is not a label value":       {"Prod!", "default", opts, "lowercase"},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			if err := SetTag(ctx, client, tc.tag, tc.rev, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SetTag: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if err := SetTag(ctx, client, "prod", "canary", TagOptions{Namespace: "istio-system", Overwrite: true}); err != nil {
		t.Fatalf("moving with overwrite: %v", err)
	}
	if err := SetTag(ctx, client, "default", "canary", opts); err != nil {
		t.Fatal(err)
	}
	def, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-revision-tag-default", metav1.GetOptions{})
	if def == nil || len(def.Webhooks) != 4 {
		t.Errorf("the tag default has %d webhooks, want the revision's two and the default's two", len(def.Webhooks))
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{LabelRev: "prod"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tags, err := ListTags(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) != 2 || tags[1].Tag != "prod" || tags[1].Revision != "canary" || !slices.Equal(tags[1].Namespaces, []string{"shop"}) {
		t.Errorf("ListTags = %+v", tags)
	}
	if found, err := RemoveTag(ctx, client, "prod", "istio-system"); err != nil || !found {
		t.Fatalf("RemoveTag: %v %v", found, err)
	}
	if _, err := client.CoreV1().Services("istio-system").Get(ctx, "istiod-revision-tag-prod", metav1.GetOptions{}); err == nil {
		t.Error("the tag's Service is left")
	}
	if found, _ := RemoveTag(ctx, client, "prod", "istio-system"); found {
		t.Error("removing a removed tag found something")
	}
}
