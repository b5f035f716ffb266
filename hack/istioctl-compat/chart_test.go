package istioctlcompat

import (
	"context"
	"encoding/json"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
)

// What istioctl needs of the installed objects that the chart does not
// carry yet. Each is applied here, in the test's setup, only while the
// chart lacks it, and logged; the report of issue 15 asks for each in the
// chart.

// podLabels are the discovery Pod's labels as the ReplicaSet would copy
// them from the Deployment's template, with app=istiod: istioctl finds
// the control plane's Pods by app=istiod (proxy-status, version,
// x internal-debug) and the revision-tag Services it creates select
// app=istiod,istio.io/rev=<revision>.
func podLabels(t *testing.T, template map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range template {
		out[k] = v
	}
	if out["app"] != "istiod" {
		t.Logf("chart change pending: the discovery Pod template's label app=%s, not app=istiod; the test labels the Pod app=istiod", out["app"])
		out["app"] = "istiod"
	}
	return out
}

// applyPendingChartChanges fixes the installed objects the chart does not
// render as istioctl needs them yet.
func applyPendingChartChanges(t *testing.T, env *testenv.Env) {
	t.Helper()
	injectorValues(t, env)
	webhookRBAC(t, env)
}

// injectorValues gives the istio-sidecar-injector ConfigMap's values
// sidecarInjectorWebhook.enableNamespacesByDefault: istioctl analyze reads
// it as a bool for every namespace and panics when it is missing.
func injectorValues(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	cm, err := env.Client.CoreV1().ConfigMaps(istioNS).Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := json.Unmarshal([]byte(cm.Data["values"]), &values); err != nil {
		t.Fatalf("istio-sidecar-injector values: %v", err)
	}
	if w, ok := values["sidecarInjectorWebhook"].(map[string]any); ok {
		if _, ok := w["enableNamespacesByDefault"].(bool); ok {
			return
		}
	}
	t.Log("chart change pending: istio-sidecar-injector's values lack sidecarInjectorWebhook.enableNamespacesByDefault; the test adds false")
	values["sidecarInjectorWebhook"] = map[string]any{"enableNamespacesByDefault": false}
	b, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["values"] = string(b)
	if _, err := env.Client.CoreV1().ConfigMaps(istioNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// webhookRBAC lets discovery list, watch and patch every
// MutatingWebhookConfiguration, as istiod's ClusterRole does: revision tag
// webhooks have names the chart cannot know, so the caBundle patcher and
// the injector's tag watcher select them by label (istio.io/rev,
// istio.io/tag), which RBAC cannot express.
func webhookRBAC(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	name := "discovery-" + istioNS
	cr, err := env.Client.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cr.Rules {
		if len(r.ResourceNames) == 0 && has(r.Resources, "mutatingwebhookconfigurations") && has(r.Verbs, "list") && has(r.Verbs, "patch") {
			return
		}
	}
	t.Logf("chart change pending: ClusterRole %s restricts mutatingwebhookconfigurations to resourceNames; the test adds get, list, watch, patch on all", name)
	cr.Rules = append(cr.Rules, rbacv1.PolicyRule{
		APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
		Verbs: []string{"get", "list", "watch", "patch"},
	})
	if _, err := env.Client.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
