package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshplane/discovery/internal/testenv"
)

// After `discovery bootstrap`, `discovery serve` running with the chart's
// own ServiceAccount (impersonated) has every permission it uses: it
// syncs, reads Istio config from the chart's CRDs, publishes the root,
// patches the webhooks' caBundle and holds the Lease; nothing is forbidden.
// With the webhooks pointed at it (by URL, as a remote installation does),
// `discovery check` passes end to end: a dry-run Pod comes back injected,
// and an invalid VirtualService is refused with our message.
func TestServeRunsWithTheChartsServiceAccount(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go playKubelet(ctx, env)
	out, err := exec.CommandContext(ctx, discoveryBinary(t), "bootstrap", "--profile", "minimal", "-y",
		"--kubeconfig", env.Kubeconfig, "--readiness-timeout", "2m").CombinedOutput()
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}

	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:istio-system:discovery"
	}
	asSA := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, asSA); err != nil {
		t.Fatal(err)
	}
	webhookAddr := freePort(t)
	pointWebhooksAt(ctx, t, env, "https://"+webhookAddr)
	p := startServe(t, "--kubeconfig", asSA, "--webhook-address", webhookAddr, "--serving-cert-extra-names", "127.0.0.1")
	p.waitReady(t)

	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject("shop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}
	if _, err := env.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	istio, err := istioclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "reviews-route", Namespace: "shop"}}
	vs.Spec.Hosts = []string{"reviews"}
	vs.Spec.Http = []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{{Destination: &apinetworking.Destination{Host: "reviews"}}}}}
	if _, err := istio.NetworkingV1().VirtualServices("shop").Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	debug := func(path string) string { _, body, _ := httpGet("http://" + p.monitor + path); return body }
	waitFor(t, 20*time.Second, "the Service and the VirtualService served", func() bool {
		return strings.Contains(debug("/debug/registryz"), "reviews.shop.svc.cluster.local") &&
			strings.Contains(debug("/debug/configz"), "reviews-route")
	})
	waitFor(t, 20*time.Second, "istio-ca-root-cert in shop", func() bool {
		_, err := env.Client.CoreV1().ConfigMaps("shop").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		return err == nil
	})
	waitFor(t, 20*time.Second, "the injector's caBundle", func() bool {
		mwc, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
		return err == nil && len(mwc.Webhooks) > 0 && len(mwc.Webhooks[0].ClientConfig.CABundle) > 0
	})
	if _, err := env.Client.CoordinationV1().Leases("istio-system").Get(ctx, "discovery-default", metav1.GetOptions{}); err != nil {
		t.Errorf("lease: %v", err)
	}
	waitFor(t, 20*time.Second, "the validator's caBundle", func() bool {
		vwc, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "istio-validator-istio-system", metav1.GetOptions{})
		return err == nil && len(vwc.Webhooks) > 0 && len(vwc.Webhooks[0].ClientConfig.CABundle) > 0
	})
	check, err := exec.CommandContext(ctx, discoveryBinary(t), "check", "--profile", "minimal", "--kubeconfig", env.Kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(check), "ok    sidecar injection (dry-run Pod)") {
		t.Errorf("discovery check: %v\n%s", err, check)
	}
	bad := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "no-hosts", Namespace: "shop"}}
	_, err = istio.NetworkingV1().VirtualServices("shop").Create(ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "host") {
		t.Errorf("a VirtualService without hosts: %v; want our webhook's refusal", err)
	}
	if !strings.Contains(p.out.String(), "gateway credentials on") {
		t.Error("the chart's RBAC does not let serve read gateway credentials")
	}
	if log := strings.ToLower(p.out.String()); strings.Contains(log, "forbidden") {
		t.Errorf("serve was refused something with the chart's RBAC:\n%s", p.out.String())
	}
}

// pointWebhooksAt makes both webhook configurations call base by URL
// instead of the istiod Service, which has no endpoints in a test cluster.
func pointWebhooksAt(ctx context.Context, t *testing.T, env *testenv.Env, base string) {
	t.Helper()
	adm := env.Client.AdmissionregistrationV1()
	mwc, err := adm.MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range mwc.Webhooks {
		url := base + "/inject"
		mwc.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: &url}
	}
	if _, err := adm.MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vwc, err := adm.ValidatingWebhookConfigurations().Get(ctx, "istio-validator-istio-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		url := base + "/validate"
		vwc.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: &url}
	}
	if _, err := adm.ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// playKubelet marks the installed Deployments available until ctx ends:
// the test cluster runs no controller-manager and no kubelet.
func playKubelet(ctx context.Context, env *testenv.Env) {
	for ctx.Err() == nil {
		list, err := env.Client.AppsV1().Deployments("istio-system").List(ctx, metav1.ListOptions{})
		for i := range list.Items {
			if err != nil {
				break
			}
			d := &list.Items[i]
			n := int32(1)
			if d.Spec.Replicas != nil {
				n = *d.Spec.Replicas
			}
			d.Status = appsv1.DeploymentStatus{
				ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
				Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}},
			}
			_, _ = env.Client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
