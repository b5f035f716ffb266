package istioctlcompat

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Istio's istioctl, unchanged, against discovery installed by `discovery
// bootstrap`: every command a user runs to look at an Istio control plane
// finds discovery and says something true about it.
func TestIstioctlAgainstDiscovery(t *testing.T) {
	istioctl := tool(t, "COMPAT_ISTIOCTL", "istioctl", "hack/istioctl.sh")
	agent := tool(t, "COMPAT_PILOT_AGENT", "pilot-agent", "hack/istio-agent.sh")
	m := install(t, istioctl)
	connectProxy(t, m, agent)

	t.Run("analyze --all-namespaces reports on the mesh instead of panicking", func(t *testing.T) { analyze(t, m) })
	t.Run("x precheck runs its checks against the cluster", func(t *testing.T) { precheck(t, m) })
	t.Run("proxy-status finds discovery and shows the connected proxy in sync", func(t *testing.T) { proxyStatus(t, m) })
	t.Run("proxy-status of one proxy compares its config dump with discovery's", func(t *testing.T) { proxyStatusOne(t, m) })
	t.Run("version shows discovery's version and the proxy's", func(t *testing.T) { version(t, m) })
	t.Run("x internal-debug reads discovery's /debug pages over xDS", func(t *testing.T) {
		out, _, err := m.run(t, "x", "internal-debug", "syncz")
		if err != nil || !strings.Contains(out, `"proxy": "`+proxyID+`"`) {
			t.Errorf("istioctl x internal-debug syncz does not show %s (%v)", proxyID, err)
		}
	})
	t.Run("tag set, tag list and injection through the tag", func(t *testing.T) { tags(t, m) })
}

func analyze(t *testing.T, m *mesh) {
	ic, err := istioclient.NewForConfig(m.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "echo-ingress", Namespace: appNS}}
	vs.Spec.Hosts = []string{"echo.example.com"}
	vs.Spec.Gateways = []string{"no-such-gateway"}
	vs.Spec.Http = []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{{Destination: &apinetworking.Destination{Host: "echo"}}}}}
	if _, err := ic.NetworkingV1().VirtualServices(appNS).Create(context.Background(), vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := m.run(t, "analyze", "--all-namespaces")
	if strings.Contains(errOut, "panic:") {
		t.Fatalf("istioctl analyze panicked:\n%s", errOut)
	}
	// An analysis that finds errors exits non-zero; it must have run.
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() == 1) {
		t.Fatalf("istioctl analyze failed to run: %v\n%s", err, errOut)
	}
	all := out + errOut
	for _, want := range []string{
		"IST0101", "no-such-gateway", // the VirtualService's missing Gateway
		"IST0102", "Namespace default", // a namespace without injection
	} {
		if !strings.Contains(all, want) {
			t.Errorf("istioctl analyze does not report %q", want)
		}
	}
}

func precheck(t *testing.T, m *mesh) {
	_, errOut, err := m.run(t, "x", "precheck")
	if err != nil || !strings.Contains(errOut, "No issues found") {
		t.Fatalf("istioctl x precheck on discovery's cluster: %v", err)
	}
	// Its checks read the cluster: an old Gateway API CRD is reported.
	ext, err := apiextensions.NewForConfig(m.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gateways.gateway.networking.k8s.io",
			Annotations: map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api/pull/1538"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "gateway.networking.k8s.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gateways", Singular: "gateway", Kind: "Gateway", ListKind: "GatewayList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha2", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr(true)}}}},
		},
	}
	ctx := context.Background()
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{})
	}()
	out, _, err := m.run(t, "x", "precheck")
	if err == nil || !strings.Contains(out, "IST0156") {
		t.Errorf("istioctl x precheck does not report the v1alpha2-only Gateway API CRD (err %v)", err)
	}
}

// proxyID is how istioctl and istiod name the proxy: <pod>.<namespace>.
const proxyID = appPod + "." + appNS

func proxyStatus(t *testing.T, m *mesh) {
	// The table: the proxy, its cluster, the discovery Pod it is connected
	// to, its Istio version and the types it subscribes to.
	out, _, err := m.run(t, "proxy-status")
	if err != nil {
		t.Fatalf("istioctl proxy-status: %v", err)
	}
	row := rowOf(out, proxyID)
	if len(row) < 5 || row[1] != "Kubernetes" || row[2] != discoveryPod || !strings.HasPrefix(strings.Join(row[4:], " "), "4 (CDS,LDS,EDS,RDS)") {
		t.Errorf("istioctl proxy-status row for %s: %q, want cluster Kubernetes, ISTIOD %s and the four types", proxyID, row, discoveryPod)
	}
	// Every type in sync, as -v 1 shows it.
	waitFor(t, 30*time.Second, "istioctl proxy-status -v 1 to show every type of "+proxyID+" SYNCED", func() bool {
		o, _, err := m.run(t, "proxy-status", "-v", "1")
		r := strings.Join(rowOf(o, proxyID), " ")
		return err == nil && strings.Count(r, "SYNCED") == 4 && !strings.Contains(r, "STALE") && !strings.Contains(r, "ERROR")
	})
	// The same as JSON: the ClientConfig discovery sent.
	js, _, err := m.run(t, "proxy-status", "-o", "json")
	if err != nil || !strings.Contains(js, `"id": "`+proxyID+`"`) || !strings.Contains(js, "envoy.service.status.v3.ClientConfig") {
		t.Errorf("istioctl proxy-status -o json (%v)", err)
	}
}

// rowOf returns the fields of the table row whose first field is id.
func rowOf(table, id string) []string {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return f
		}
	}
	return nil
}

func proxyStatusOne(t *testing.T, m *mesh) {
	// No Envoy here to ask for its /config_dump: discovery's own dump of
	// what it sent (Envoy's shape) stands in for it.
	resp, err := http.Get("http://" + m.monitor + "/debug/config_dump?proxyID=" + proxyID)
	if err != nil {
		t.Fatal(err)
	}
	dump, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/debug/config_dump?proxyID=%s: %s %s", proxyID, resp.Status, dump)
	}
	file := filepath.Join(t.TempDir(), "config_dump.json")
	if err := os.WriteFile(file, dump, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := m.run(t, "proxy-status", proxyID, "--file", file)
	if err != nil {
		t.Fatalf("istioctl proxy-status %s: %v", proxyID, err)
	}
	for _, want := range []string{"Clusters Match", "Listeners Match", "Routes Match"} {
		if !strings.Contains(out, want) {
			t.Errorf("istioctl proxy-status %s does not say %q", proxyID, want)
		}
	}
}

func version(t *testing.T, m *mesh) {
	raw, err := exec.Command(discoveryBinary(t), "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var dv struct{ Version string }
	if err := json.Unmarshal(raw, &dv); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := m.run(t, "version")
	if err != nil || strings.Contains(out+errOut, "Istio is not present") {
		t.Fatalf("istioctl version does not find discovery: %v", err)
	}
	if !strings.Contains(out, "control plane version: "+dv.Version+"\n") {
		t.Errorf("istioctl version does not show discovery's version %s", dv.Version)
	}
	if !regexp.MustCompile(`data plane version: \S+ \(1 proxies\)`).MatchString(out) {
		t.Errorf("istioctl version does not show the connected proxy's version")
	}
}

func tags(t *testing.T, m *mesh) {
	ctx := context.Background()
	kc := m.env.Client
	out, _, err := m.run(t, "tag", "list")
	if err != nil || !regexp.MustCompile(`(?m)^\s+default\s*$`).MatchString(out) {
		t.Errorf("istioctl tag list does not show the default revision (%v)", err)
	}
	if _, _, err := m.run(t, "tag", "set", "canary", "--revision", "default", "-y"); err != nil {
		t.Fatalf("istioctl tag set canary: %v", err)
	}
	d, err := exec.Command(discoveryBinary(t), "tag", "list", "--kubeconfig", m.env.Kubeconfig).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^canary\s+default`).Match(d) {
		t.Errorf("discovery tag list does not show istioctl's tag canary (%v):\n%s", err, d)
	}

	// A Pod in a namespace labelled with the tag goes through the tag's
	// webhook to discovery, which injects it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tagged", Labels: map[string]string{"istio.io/rev": "canary"}}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	var lastErr error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "tagged"},
			Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		pod, lastErr = kc.CoreV1().Pods("tagged").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if lastErr == nil && hasContainer(pod, "istio-proxy") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a Pod in the namespace labelled istio.io/rev=canary is not injected within 20s (last: %v, containers %v)", lastErr, containerNames(pod))
		}
	}

	// discovery's own tag commands make Istio's objects: istioctl lists
	// and removes them.
	if d, err := exec.Command(discoveryBinary(t), "tag", "set", "prod", "--revision", "default", "--kubeconfig", m.env.Kubeconfig).CombinedOutput(); err != nil {
		t.Fatalf("discovery tag set prod: %v\n%s", err, d)
	}
	mwc, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-revision-tag-prod", metav1.GetOptions{})
	if err != nil || mwc.Labels["istio.io/tag"] != "prod" || mwc.Labels["istio.io/rev"] != "default" {
		t.Fatalf("discovery tag set prod: the MutatingWebhookConfiguration istio-revision-tag-prod: %v %v", err, mwc.GetLabels())
	}
	out, _, _ = m.run(t, "tag", "list")
	if !regexp.MustCompile(`(?m)^prod\s+default`).MatchString(out) {
		t.Errorf("istioctl tag list does not show discovery's tag prod")
	}

	// The leader keeps the tags' caBundles, as istiod does for every
	// webhook configuration of its revision.
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.CABundle = nil
	}
	if _, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := meshRoot(t, m)
	waitFor(t, 20*time.Second, "the caBundle of istio-revision-tag-prod to be the mesh root again", func() bool {
		got, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-revision-tag-prod", metav1.GetOptions{})
		if err != nil || len(got.Webhooks) == 0 {
			return false
		}
		for _, w := range got.Webhooks {
			if strings.TrimSpace(string(w.ClientConfig.CABundle)) != strings.TrimSpace(root) {
				return false
			}
		}
		return true
	}, m.serve)

	if _, _, err := m.run(t, "tag", "remove", "prod", "-y"); err != nil {
		t.Errorf("istioctl tag remove prod: %v", err)
	}
	// The namespace tagged still selects canary: removing it asks for -y.
	if d, err := exec.Command(discoveryBinary(t), "tag", "remove", "canary", "--kubeconfig", m.env.Kubeconfig).CombinedOutput(); err == nil || !strings.Contains(string(d), "tagged") {
		t.Errorf("discovery tag remove canary with a namespace on it: %v\n%s", err, d)
	}
	if d, err := exec.Command(discoveryBinary(t), "tag", "remove", "canary", "-y", "--kubeconfig", m.env.Kubeconfig).CombinedOutput(); err != nil {
		t.Errorf("discovery tag remove canary -y: %v\n%s", err, d)
	}
	out, _, _ = m.run(t, "tag", "list")
	if strings.Contains(out, "prod") || strings.Contains(out, "canary") {
		t.Errorf("tags left after removal")
	}
}

func meshRoot(t *testing.T, m *mesh) string {
	t.Helper()
	cm, err := m.env.Client.CoreV1().ConfigMaps(istioNS).Get(context.Background(), "istio-ca-root-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["root-cert.pem"]
}

func hasContainer(p *corev1.Pod, name string) bool {
	if p == nil {
		return false
	}
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

func containerNames(p *corev1.Pod) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		out = append(out, c.Name)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
