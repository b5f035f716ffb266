package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// everyKindObject is one object: an Istio kind in one version its CRD
// serves.
type everyKindObject struct {
	kind    model.Kind
	gvr     schema.GroupVersionResource
	name    string
	doc     string
	version string
}

// everyKindObjects builds one object of every kind the base chart's CRDs
// define, in every version each serves, and checks that the table and
// model.IstioKinds cover the same kinds as the CRDs.
func everyKindObjects(t *testing.T) []everyKindObject {
	t.Helper()
	m, err := Render(renderOpts(), Input{Profile: "default"})
	if err != nil {
		t.Fatal(err)
	}
	var out []everyKindObject
	crdKinds := map[string]bool{}
	for _, o := range m.Objects() {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		crd := &apiextv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd); err != nil {
			t.Fatal(err)
		}
		kind := crd.Spec.Names.Kind
		crdKinds[kind] = true
		spec, ok := kubetest.ValidSpecs[kind]
		if !ok {
			t.Errorf("the chart installs %s, for which this test has no object", kind)
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			name := strings.ToLower(kind) + "-" + v.Name
			out = append(out, everyKindObject{
				kind: model.Kind(kind), version: v.Name, name: name,
				gvr: schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural},
				doc: fmt.Sprintf("apiVersion: %s/%s\nkind: %s\nmetadata: {name: %s, namespace: default}\nspec: %s\n", crd.Spec.Group, v.Name, kind, name, spec),
			})
		}
	}
	for _, k := range model.IstioKinds {
		if !crdKinds[string(k)] {
			t.Errorf("discovery reads %s, whose CRD the chart does not install", k)
		}
	}
	for k := range kubetest.ValidSpecs {
		if !crdKinds[k] {
			t.Errorf("this test has an object of %s, whose CRD the chart does not install", k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// TestEveryIstioKindParsesFromFiles: the file source reads one object of
// every Istio kind in every version its CRD serves, as the kube source
// does (below), with no document refused.
func TestEveryIstioKindParsesFromFiles(t *testing.T) {
	objs := everyKindObjects(t)
	var all strings.Builder
	for _, o := range objs {
		all.WriteString("---\n" + o.doc)
	}
	parsed, errs := file.Parse("every-kind.yaml", []byte(all.String()))
	for _, e := range errs {
		t.Errorf("refused: %v", e)
	}
	got := map[model.Key]bool{}
	for _, p := range parsed {
		got[p.Key] = true
	}
	for _, o := range objs {
		if k := (model.Key{Kind: o.kind, Namespace: "default", Name: o.name}); !got[k] {
			t.Errorf("the file source did not read %s (%s)", k, o.version)
		}
	}
	if len(parsed) != len(objs) {
		t.Errorf("read %d objects of %d", len(parsed), len(objs))
	}
}

// TestIntegrationEveryIstioKindAppliesAndIsRead installs the base chart's
// CRDs on a real API server and server-side applies (as `kubectl apply
// --server-side` does: field manager kubectl, strict field validation)
// one object of every Istio kind in every version its CRD serves; each
// is accepted, applying it again changes nothing, and the kube source
// reads every one.
func TestIntegrationEveryIstioKindAppliesAndIsRead(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	installChartCRDs(ctx, t, env, dyn)
	objs := everyKindObjects(t)
	kinds := map[model.Kind]bool{}
	for _, o := range objs {
		kinds[o.kind] = true
		first := serverSideApply(ctx, t, dyn, o)
		again := serverSideApply(ctx, t, dyn, o)
		if first != "" && again != first {
			t.Errorf("%s: applying it again changed its resourceVersion (%s -> %s)", o.name, first, again)
		}
	}
	if len(kinds) != len(model.IstioKinds) {
		t.Errorf("applied %d kinds, discovery reads %d", len(kinds), len(model.IstioKinds))
	}

	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = src.Start(sctx, store); close(done) }()
	defer func() { stop(); <-done }()
	pollUntil(ctx, t, "every object in the kube source's World", func() bool {
		w := store.World()
		for _, o := range objs {
			if w.Config(o.kind, "default", o.name) == nil {
				return false
			}
		}
		return true
	})
	t.Logf("%d objects of %d kinds applied and read", len(objs), len(kinds))
}

// serverSideApply applies o as kubectl apply --server-side does and
// returns its resourceVersion.
func serverSideApply(ctx context.Context, t *testing.T, dyn dynamic.Interface, o everyKindObject) string {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(o.doc), &obj); err != nil {
		t.Fatalf("%s: %v", o.name, err)
	}
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	force := true
	u, err := dyn.Resource(o.gvr).Namespace("default").Patch(ctx, o.name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: "kubectl", Force: &force, FieldValidation: "Strict"})
	if err != nil {
		t.Errorf("server-side apply of %s %s: %v", o.gvr.GroupVersion(), o.kind, err)
		return ""
	}
	return u.GetResourceVersion()
}
