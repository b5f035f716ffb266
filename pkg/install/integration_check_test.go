package install

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// testCheck runs the post-install checks after bootstrap. No discovery pod
// runs in the test cluster, so first the webhook and injection checks
// must fail with hints; once a root is published and the caBundles are
// patched (as discovery's leader does), the webhook checks pass.
func testCheck(ctx context.Context, t *testing.T, c *Client, m *Manifest) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	opts := CheckOptions{Namespace: "istio-system", CRDs: CRDNames(m)}
	byName := func(rs []CheckResult) map[string]CheckResult {
		out := map[string]CheckResult{}
		for _, r := range rs {
			out[r.Name] = r
		}
		return out
	}
	const mwh, vwh = "MutatingWebhookConfiguration istio-sidecar-injector", "ValidatingWebhookConfiguration istio-validator-istio-system"
	got := byName(c.Check(ctx, opts))
	for _, name := range []string{"CRDs established", "discovery Deployment available"} {
		if !got[name].OK {
			t.Errorf("%s", got[name])
		}
	}
	for _, name := range []string{mwh, vwh, "sidecar injection (dry-run Pod)"} {
		if r := got[name]; r.OK || r.Hint == "" {
			t.Errorf("want a failure with a hint before discovery runs: %s", r)
		}
	}

	root := "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
	_, err := c.Kube.CoreV1().ConfigMaps("istio-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-ca-root-cert", Namespace: "istio-system"},
		Data:       map[string]string{"root-cert.pem": root},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kube.CoreV1().ConfigMaps("istio-system").Delete(context.WithoutCancel(ctx), "istio-ca-root-cert", metav1.DeleteOptions{})
	patchCABundles(ctx, t, c, []byte(root))
	got = byName(c.Check(ctx, opts))
	for _, name := range []string{mwh, vwh} {
		if !got[name].OK {
			t.Errorf("after patching the caBundle: %s", got[name])
		}
	}
	if r := got["sidecar injection (dry-run Pod)"]; r.OK || !strings.Contains(r.Detail, "refused") {
		t.Errorf("no injector runs, yet: %s", r)
	}
}

// patchCABundles sets every webhook's caBundle, as discovery's leader does
// (a JSON patch under another field manager than the installer's).
func patchCABundles(ctx context.Context, t *testing.T, c *Client, root []byte) {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString(root)
	mw, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vw, err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "istio-validator-istio-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(n int) []byte {
		var ops []map[string]any
		for i := 0; i < n; i++ {
			ops = append(ops, map[string]any{"op": "add", "path": "/webhooks/" + strconv.Itoa(i) + "/clientConfig/caBundle", "value": b64})
		}
		b, _ := json.Marshal(ops)
		return b
	}
	opts := metav1.PatchOptions{FieldManager: "discovery-leader"}
	if _, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, mw.Name, types.JSONPatchType, patch(len(mw.Webhooks)), opts); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, vw.Name, types.JSONPatchType, patch(len(vw.Webhooks)), opts); err != nil {
		t.Fatal(err)
	}
}
