package main

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
)

// What a user sees, on the real API server, running bootstrap where
// istioctl installed istiod: a refusal saying what was found and what to
// do; then the migration: bootstrap --take-over, discovery migrate.
func TestBootstrapOverIstioRefusesThenMigrates(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kc := env.Client
	labels := map[string]string{
		"app": "istiod", "istio": "pilot", "istio.io/rev": "default",
		"operator.istio.io/component": "Pilot", "install.operator.istio.io/owning-resource": "installed-state",
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"istio-injection": "enabled"}}},
	} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sel := map[string]string{"app": "istiod"}
	istiod := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod", Namespace: "istio-system", Labels: labels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.32.0"}}},
		}},
	}
	if _, err := kc.AppsV1().Deployments("istio-system").Create(ctx, istiod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod", Namespace: "istio-system", Labels: labels},
		Spec:       corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Name: "grpc-xds", Port: 15010}}},
	}
	if _, err := kc.CoreV1().Services("istio-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := "--kubeconfig=" + env.Kubeconfig

	out, errOut, err := runRoot(ctx, "bootstrap", "-y", kubeconfig)
	t.Logf("bootstrap over istioctl's istiod:\n%s%s", errOut, out)
	if err == nil || !strings.Contains(err.Error(), "nothing was applied") || !strings.Contains(err.Error(), "Istio, ownership") {
		t.Errorf("err = %v", err)
	}
	for _, want := range []string{
		"FAIL  Istio: Istio is installed: Deployment istio-system/istiod (istiod, revision default; made by istioctl (component Pilot))",
		"hint: discovery does not install over Istio", "discovery bootstrap --take-over --revision discovery",
		"FAIL  ownership: 1 rendered object belongs to someone else: Service/istio-system/istiod: exists and was not made by discovery (istioctl (component Pilot))",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the refusal lacks %q", want)
		}
	}
	if _, err := kc.AppsV1().Deployments("istio-system").Get(ctx, "discovery", metav1.GetOptions{}); err == nil {
		t.Error("the refused bootstrap installed discovery")
	}

	out, errOut, err = runRoot(ctx, "bootstrap", "-y", "--take-over", "--revision", "discovery", "--wait=false", kubeconfig)
	t.Logf("bootstrap --take-over:\n%s%s", errOut, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Migration from Istio to revision discovery: 0 namespaces moved, 1 still select Istio's injector",
		"kubectl label namespace shop istio-injection- istio.io/rev=discovery --overwrite", "not waited for readiness (--wait=false)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("bootstrap --take-over output lacks %q", want)
		}
	}
	out, _, err = runRoot(ctx, "migrate", "--revision", "discovery", "--all", "-y", kubeconfig)
	t.Logf("migrate --all:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"moved to revision discovery: shop", "Nothing uses Istio's control plane any more", "istioctl uninstall --revision default"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate output lacks %q", want)
		}
	}
	got, err := kc.AppsV1().Deployments("istio-system").Get(ctx, "istiod", metav1.GetOptions{})
	if err != nil || got.ResourceVersion == "" || got.Labels["app.kubernetes.io/managed-by"] != "" {
		t.Errorf("istiod after the migration: %v %v", got.Labels, err)
	}
}
