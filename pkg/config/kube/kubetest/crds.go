// Package kubetest helps tests that need Istio's CustomResourceDefinitions
// in an API server: real ones (internal/testenv) or client-go fakes. The
// CRDs it builds are minimal: they serve v1 and accept any spec
// (x-kubernetes-preserve-unknown-fields), which is enough to store and
// watch Istio objects. The validating, generated CRDs are the installer's.
package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/model"
)

// CRD returns a minimal CustomResourceDefinition for an Istio kind: named
// <plural>.<group>, namespaced, serving and storing v1 with a schema that
// keeps any field. It panics if kind is not an Istio kind (a test bug).
func CRD(kind model.Kind) *apiextv1.CustomResourceDefinition {
	if !kind.IsIstio() {
		panic(fmt.Sprintf("kubetest.CRD: %q is not an Istio kind", kind))
	}
	gvr := kind.GroupVersionResource()
	preserve := true
	return &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: gvr.Resource + "." + gvr.Group},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: gvr.Group,
			Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{
				Plural:   gvr.Resource,
				Singular: strings.ToLower(string(kind)),
				Kind:     string(kind),
				ListKind: string(kind) + "List",
			},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name:    gvr.Version,
				Served:  true,
				Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{
					Type:                   "object",
					XPreserveUnknownFields: &preserve,
				}},
				Subresources: &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
}

// IstioCRDs returns CRD(k) for every kind in model.IstioKinds.
func IstioCRDs() []*apiextv1.CustomResourceDefinition {
	out := make([]*apiextv1.CustomResourceDefinition, 0, len(model.IstioKinds))
	for _, k := range model.IstioKinds {
		out = append(out, CRD(k))
	}
	return out
}

// MarkEstablished sets the conditions an API server sets on a CRD it
// serves, for tests against a fake clientset, where nobody else does. It
// returns crd.
func MarkEstablished(crd *apiextv1.CustomResourceDefinition) *apiextv1.CustomResourceDefinition {
	crd.Status.AcceptedNames = crd.Spec.Names
	crd.Status.Conditions = []apiextv1.CustomResourceDefinitionCondition{
		{Type: apiextv1.NamesAccepted, Status: apiextv1.ConditionTrue, Reason: "NoConflicts"},
		{Type: apiextv1.Established, Status: apiextv1.ConditionTrue, Reason: "InitialNamesAccepted"},
	}
	return crd
}

// InstallCRDs creates the CRDs of kinds (every Istio kind if none are
// named) and waits until the API server reports each Established. CRDs
// that exist already are left as they are.
func InstallCRDs(ctx context.Context, t testing.TB, c apiextclient.Interface, kinds ...model.Kind) {
	t.Helper()
	if len(kinds) == 0 {
		kinds = model.IstioKinds
	}
	for _, k := range kinds {
		_, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, CRD(k), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create CRD for %s: %v", k, err)
		}
	}
	for _, k := range kinds {
		if err := WaitEstablished(ctx, c, CRD(k).Name, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// WaitEstablished polls until the CRD name is Established, or timeout.
func WaitEstablished(ctx context.Context, c apiextclient.Interface, name string, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		crd, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return true, nil
			}
		}
		last = fmt.Errorf("not established: %+v", crd.Status.Conditions)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s: %w (last: %w)", name, err, last)
	}
	return nil
}

// GatewayAPICRDs reads the Gateway API's standard-channel CRDs from the
// sigs.k8s.io/gateway-api module this build uses (config/crd/standard),
// as a user would install them.
func GatewayAPICRDs(t testing.TB) []*apiextv1.CustomResourceDefinition {
	t.Helper()
	return GatewayAPIChannelCRDs(t, "standard")
}

// GatewayAPIChannelCRDs reads one channel's CRDs ("standard" or
// "experimental") from the sigs.k8s.io/gateway-api module of the current
// directory's module.
func GatewayAPIChannelCRDs(t testing.TB, channel string) []*apiextv1.CustomResourceDefinition {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("locate sigs.k8s.io/gateway-api: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", channel, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Gateway API CRD files: %v", err)
	}
	var crds []*apiextv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			var crd apiextv1.CustomResourceDefinition
			if err := sigsyaml.Unmarshal([]byte(doc), &crd); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if crd.Kind == "CustomResourceDefinition" {
				crds = append(crds, &crd)
			}
		}
	}
	return crds
}

// InstallGatewayAPICRDs creates GatewayAPICRDs and waits until each is
// Established.
func InstallGatewayAPICRDs(ctx context.Context, t testing.TB, c apiextclient.Interface) {
	t.Helper()
	InstallCRDObjects(ctx, t, c, GatewayAPICRDs(t))
}

// InstallCRDObjects creates crds and waits until each is Established.
func InstallCRDObjects(ctx context.Context, t testing.TB, c apiextclient.Interface, crds []*apiextv1.CustomResourceDefinition) {
	t.Helper()
	for _, crd := range crds {
		if _, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create CRD %s: %v", crd.Name, err)
		}
	}
	for _, crd := range crds {
		if err := WaitEstablished(ctx, c, crd.Name, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}
