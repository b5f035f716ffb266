package install

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/internal/testenv"
)

// Issue 15, item 2: bootstrap over an Istio made by istioctl, or by Helm,
// refuses; --take-over installs discovery as a revision beside istiod and
// leaves every object of Istio's as it was (compared with resourceVersion
// and managedFields: not even a no-op apply) through the migration, until
// the user removes istiod; discovery's uninstall, even --purge, leaves
// Istio's CRDs.
func TestBootstrapBesideIstio(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	for name, flavor := range map[string]istioFlavor{
		"istioctl": {pilot: "istioctl (component Pilot)", crds: "istioctl (component Base)", remove: "istioctl uninstall --revision default"},
		"Helm":     {helm: true, pilot: "Helm release istiod", crds: "Helm release istio-base", remove: "helm uninstall istiod -n istio-system"},
	} {
		t.Run("made by "+name, func(t *testing.T) { testBesideIstio(t, flavor) })
	}
}

type istioFlavor struct {
	helm bool
	// pilot and crds are who OwnerOf says made istiod and the CRDs;
	// remove the command that removes istiod.
	pilot, crds, remove string
}

func testBesideIstio(t *testing.T, f istioFlavor) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go playKubelet(ctx, t, env.Client)
	client := testClient(t, env)
	def := mustRender(t, Input{Profile: "default"})
	istio := installFakeIstio(ctx, t, client, def, f)
	want := istioSnapshot(ctx, t, client, istio)

	checks := map[string]CheckResult{}
	for _, r := range client.PreCheck(ctx, def, PreCheckOptions{}) {
		checks[r.Name] = r
	}
	if r := checks["Istio"]; r.OK || !strings.Contains(r.Detail, "Deployment istio-system/istiod (istiod, revision default; made by "+f.pilot+")") ||
		!strings.Contains(r.Detail, "15 CRDs of Istio's groups") || !strings.Contains(r.Detail, f.crds) || !strings.Contains(r.Hint, "--take-over --revision") {
		t.Errorf("pre-check over Istio: %s", r)
	}
	if r := checks["ownership"]; r.OK || !strings.Contains(r.Detail, "Service/istio-system/istiod: exists and was not made by discovery ("+f.pilot+")") {
		t.Errorf("ownership pre-check over Istio: %s", r)
	}
	canary := mustRender(t, Input{Profile: "default", Revision: "canary"})
	for name, m := range map[string]*Manifest{"default": def, "canary": canary} {
		_, err := client.Apply(ctx, m, ApplyOptions{})
		if err == nil || !strings.Contains(err.Error(), "nothing was applied") || !strings.Contains(err.Error(), "CustomResourceDefinition/gateways.networking.istio.io: exists and was not made by discovery") {
			t.Errorf("bootstrap of revision %s over Istio without --take-over: err = %v", name, err)
		}
	}
	if left := snapshot(ctx, t, client, ""); len(left) != 0 {
		t.Errorf("a refused bootstrap left %v", sortedKeys(left))
	}
	assertSame(t, "after the refused bootstraps", want, istioSnapshot(ctx, t, client, istio))

	for _, r := range client.PreCheck(ctx, def, PreCheckOptions{TakeOver: true}) {
		if r.Name == "Istio" && (r.OK || !strings.Contains(r.Detail, "revision default is Istio's")) {
			t.Errorf("--take-over as the default revision: %s", r)
		}
	}
	mig := mustRender(t, Input{Profile: "default", Revision: "discovery"})
	for _, r := range client.PreCheck(ctx, mig, PreCheckOptions{TakeOver: true}) {
		if !r.OK {
			t.Errorf("pre-check of --take-over --revision discovery: %s", r)
		}
	}
	res := mustApply(ctx, t, client, mig, ApplyOptions{Wait: true, ReadinessTimeout: time.Minute, TakeOver: true})
	if len(res.Skipped) != 16 || !strings.Contains(strings.Join(res.Skipped, "\n"), "ClusterRole/istio-reader-clusterrole-istio-system (made by ") {
		t.Errorf("--take-over left to Istio %v, want its 15 CRDs and its reader cluster role", res.Skipped)
	}
	assertSame(t, "after bootstrap --take-over", want, istioSnapshot(ctx, t, client, istio))

	testMigration(ctx, t, client, f, func(when string) { assertSame(t, when, want, istioSnapshot(ctx, t, client, istio)) })

	// helm upgrade of Istio's base chart relabels its CRDs: a bootstrap
	// after it does not label them back.
	for _, n := range CRDNames(def) {
		patch := []byte(`{"metadata":{"labels":{"helm.sh/chart":"base-1.33.0"}}}`)
		if _, err := client.Dynamic.Resource(crdGVR).Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "helm"}); err != nil {
			t.Fatal(err)
		}
	}
	want = istioSnapshot(ctx, t, client, istio)
	if res := mustApply(ctx, t, client, mig, ApplyOptions{TakeOver: true}); !res.NoChange() {
		t.Errorf("bootstrap --take-over again: %+v", res)
	}
	assertSame(t, "after Istio's helm upgrade and another bootstrap", want, istioSnapshot(ctx, t, client, istio))

	// The last step, the user's: istiod removed with Istio's tools. Then
	// discovery's uninstall, even --purge, leaves Istio's CRDs.
	removeFakeIstiod(ctx, t, client, istio)
	if _, err := client.Uninstall(ctx, UninstallOptions{Purge: true}); err != nil {
		t.Fatal(err)
	}
	for _, n := range CRDNames(def) {
		crd, err := client.Dynamic.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
		if err != nil || crd.GetDeletionTimestamp() != nil {
			t.Errorf("Istio's CRD %s after discovery uninstall --purge: %v", n, err)
		}
	}
}

// testMigration moves Istio's namespaces to the discovery revision by
// label; Istio's objects stay as they were until istiod is removed.
func testMigration(ctx context.Context, t *testing.T, c *Client, f istioFlavor, istioUntouched func(when string)) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	for _, ns := range []struct{ name, key, val string }{{"shop", labelIstioInjection, "enabled"}, {"cart", labelRev, "default"}, {"other", "team", "a"}} {
		mustCreate(ctx, t, c, "v1", "Namespace", "", ns.name, map[string]string{ns.key: ns.val}, nil, nil)
	}
	mustCreate(ctx, t, c, "v1", "ServiceAccount", "shop", "default", nil, nil, nil)
	mustCreate(ctx, t, c, "v1", "Pod", "shop", "reviews", map[string]string{labelRev: "default"}, nil,
		map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.k8s.io/pause:3.10"}}}})

	m, err := c.Migration(ctx, "discovery")
	if err != nil {
		t.Fatal(err)
	}
	if m.Pending["shop"] != "istio-injection=enabled" || m.Pending["cart"] != "istio.io/rev=default" || len(m.Pending) != 2 || m.IstioPods["shop"] != 1 {
		t.Errorf("migration before moving: pending %v, Istio's pods %v", m.Pending, m.IstioPods)
	}
	var steps bytes.Buffer
	m.WriteSteps(&steps)
	if !strings.Contains(steps.String(), "kubectl label namespace shop istio-injection- istio.io/rev=discovery --overwrite") || strings.Contains(steps.String(), f.remove) {
		t.Errorf("steps before moving:\n%s", steps.String())
	}
	if err := c.MoveNamespaces(ctx, "discovery", []string{"shop", "cart"}); err != nil {
		t.Fatal(err)
	}
	istioUntouched("after moving the namespaces")
	if err := c.Kube.CoreV1().Pods("shop").Delete(ctx, "reviews", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err) // its restart: the new pod would be discovery's
	}
	if m, err = c.Migration(ctx, "discovery"); err != nil || !m.Done() || len(m.Moved) != 2 {
		t.Fatalf("migration after moving: %+v, %v", m, err)
	}
	ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	if err != nil || ns.Labels[labelRev] != "discovery" || ns.Labels[labelIstioInjection] != "" {
		t.Errorf("namespace shop after the move: %v %v", ns.Labels, err)
	}
	steps.Reset()
	m.WriteSteps(&steps)
	if !strings.Contains(steps.String(), f.remove) || !strings.Contains(steps.String(), "discovery tag set default --revision discovery") {
		t.Errorf("the last step does not say how to remove istiod:\n%s", steps.String())
	}
	istioUntouched("once nothing uses istiod")
}

// installFakeIstio creates what istioctl install (or Helm's base, istiod
// and gateway charts) would, labelled as they label it, and returns the
// objects' keys. Nothing runs: only the objects matter here.
func installFakeIstio(ctx context.Context, t *testing.T, c *Client, def *Manifest, f istioFlavor) []*unstructured.Unstructured {
	t.Helper()
	mustCreate(ctx, t, c, "v1", "Namespace", "", "istio-system", nil, nil, nil)
	var out []*unstructured.Unstructured
	add := func(component, release, apiVersion, kind, ns, name string, labels map[string]string, body map[string]any) {
		l, a := istioLabels(f, component, release)
		for k, v := range labels {
			l[k] = v
		}
		out = append(out, mustCreate(ctx, t, c, apiVersion, kind, ns, name, l, a, body))
	}
	for _, o := range def.Components[0].Objects {
		if o.GetKind() == "CustomResourceDefinition" {
			add("Base", "istio-base", o.GetAPIVersion(), o.GetKind(), "", o.GetName(), nil, map[string]any{"spec": o.Object["spec"]})
		}
	}
	pilot := map[string]string{"app": "istiod", "istio": "pilot", labelRev: "default"}
	add("Pilot", "istiod", "v1", "ServiceAccount", "istio-system", "istiod", pilot, nil)
	add("Pilot", "istiod", "rbac.authorization.k8s.io/v1", "ClusterRole", "", "istiod-clusterrole-istio-system", pilot, map[string]any{"rules": []any{}})
	add("Pilot", "istiod", "rbac.authorization.k8s.io/v1", "ClusterRole", "", "istio-reader-clusterrole-istio-system", pilot, map[string]any{"rules": []any{}})
	add("Pilot", "istiod", "v1", "ConfigMap", "istio-system", "istio", pilot, map[string]any{"data": map[string]any{"mesh": "trustDomain: cluster.local\n"}})
	add("Pilot", "istiod", "v1", "ConfigMap", "istio-system", "istio-sidecar-injector", pilot, map[string]any{"data": map[string]any{"values": "{}"}})
	add("Pilot", "istiod", "v1", "Service", "istio-system", "istiod", pilot, map[string]any{"spec": map[string]any{
		"selector": map[string]any{"app": "istiod", "istio": "pilot"},
		"ports":    []any{map[string]any{"name": "https-webhook", "port": 443, "targetPort": 15017}, map[string]any{"name": "grpc-xds", "port": 15010}},
	}})
	add("Pilot", "istiod", "apps/v1", "Deployment", "istio-system", "istiod", pilot, fakeDeployment("istiod", "docker.io/istio/pilot:1.32.0"))
	hook := func(name, path string, ns map[string]any) map[string]any {
		return map[string]any{
			"name": name, "clientConfig": map[string]any{"service": map[string]any{"name": "istiod", "namespace": "istio-system", "path": path}},
			"failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": []any{"v1"}, "namespaceSelector": ns,
			"rules": []any{map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}}},
		}
	}
	injected := map[string]any{"matchLabels": map[string]any{labelIstioInjection: "enabled"}}
	add("Pilot", "istiod", "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "istio-sidecar-injector",
		map[string]string{"app": "sidecar-injector", labelRev: "default"}, map[string]any{"webhooks": []any{hook("namespace.sidecar-injector.istio.io", "/inject", injected)}})
	add("Pilot", "istiod", "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "istio-validator-istio-system",
		map[string]string{"app": "istiod", labelRev: "default"}, map[string]any{"webhooks": []any{hook("rev.validation.istio.io", "/validate", map[string]any{})}})
	add("Base", "istio-base", "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "istiod-default-validator",
		map[string]string{"app": "istiod", labelRev: "default"}, map[string]any{"webhooks": []any{hook("validation.istio.io", "/validate", map[string]any{})}})
	gw := map[string]string{"app": "istio-ingressgateway", "istio": "ingressgateway", labelRev: "default"}
	add("IngressGateways", "istio-ingress", "apps/v1", "Deployment", "istio-system", "istio-ingressgateway", gw, fakeDeployment("istio-ingressgateway", "docker.io/istio/proxyv2:1.32.0"))
	add("IngressGateways", "istio-ingress", "v1", "Service", "istio-system", "istio-ingressgateway", gw, map[string]any{"spec": map[string]any{
		"selector": map[string]any{"istio": "ingressgateway"}, "ports": []any{map[string]any{"name": "http2", "port": 80, "targetPort": 8080}},
	}})
	return out
}

// istioLabels are the labels and annotations istioctl or Helm put on an
// object of an Istio component (operator/pkg/manifest; the charts'
// istio.labels; Helm's release annotations).
func istioLabels(f istioFlavor, component, release string) (map[string]string, map[string]string) {
	if !f.helm {
		return map[string]string{
			istioctlComponentLabel: component, istioctlOwnerLabel: "installed-state",
			"operator.istio.io/managed": "Reconcile", "operator.istio.io/version": "1.32.0",
		}, nil
	}
	l := map[string]string{LabelManagedBy: helmManagedBy, "app.kubernetes.io/instance": release, "app.kubernetes.io/part-of": "istio", "helm.sh/chart": release + "-1.32.0"}
	if component != "Base" {
		l[istioctlComponentLabel], l[istioctlOwnerLabel] = component, "unknown"
	}
	return l, map[string]string{helmReleaseAnnotation: release, helmNamespaceAnnot: "istio-system"}
}

func fakeDeployment(app, image string) map[string]any {
	sel := map[string]any{"app": app}
	return map[string]any{"spec": map[string]any{
		"selector": map[string]any{"matchLabels": sel},
		"template": map[string]any{
			"metadata": map[string]any{"labels": sel},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": image}}},
		},
	}}
}

func mustCreate(ctx context.Context, t *testing.T, c *Client, apiVersion, kind, ns, name string, labels, annotations map[string]string, body map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range body {
		u.Object[k] = v
	}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	u.SetNamespace(ns)
	u.SetLabels(labels)
	u.SetAnnotations(annotations)
	c.Mapper.Reset()
	ri, err := c.resourceFor(u)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return u
	}
	if err != nil {
		b, _ := yaml.Marshal(u.Object)
		t.Fatalf("create %s: %v\n%s", objectKey(u), err, b)
	}
	return got
}

// istioSnapshot reads Istio's objects whole: any write, even an apply
// that changes nothing, would show in resourceVersion or managedFields.
func istioSnapshot(ctx context.Context, t *testing.T, c *Client, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		live, err := c.getLive(ctx, o)
		if err != nil || live == nil {
			t.Fatalf("Istio's %s: %v (gone: %v)", objectKey(o), err, live == nil)
		}
		if o.GetKind() == "Deployment" {
			delete(live.Object, "status") // the test's kubelet plays only for discovery's
		}
		b, _ := json.Marshal(live.Object)
		out[objectKey(o)] = string(b)
	}
	return out
}

// removeFakeIstiod is the user's last step: everything of Istio's but its
// CRDs (and the base chart's validator) goes, as helm uninstall istiod or
// istioctl uninstall without --purge do.
func removeFakeIstiod(ctx context.Context, t *testing.T, c *Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || o.GetName() == "istiod-default-validator" {
			continue
		}
		ri, err := c.resourceFor(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", objectKey(o), err)
		}
	}
}
