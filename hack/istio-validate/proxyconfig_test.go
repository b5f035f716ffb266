package istiovalidate

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/config"
	istiomesh "istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/schema/gvk"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/webhook/inject"
)

// proxyConfigCase is a set of ProxyConfig resources (YAML documents; a
// creationTimestamp orders them), a MeshConfig, and a pod.
type proxyConfigCase struct {
	mesh, resources string
	namespace       string
	labels          map[string]string
	annotation      string
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// proxyConfigCorpus covers istiod's layers and their order: Istio's own
// TestEffectiveProxyConfig cases and more.
var proxyConfigCorpus = map[string]proxyConfigCase{
	"namespace resource": {resources: `
metadata: {name: ns, namespace: test-ns}
spec: {concurrency: 3, image: {imageType: debug}}`},
	"root resource over the mesh's defaultConfig": {mesh: "defaultConfig: {concurrency: 2}\n", namespace: "bar", resources: `
metadata: {name: global, namespace: istio-system}
spec: {concurrency: 3}`},
	"the MeshConfig's rootNamespace": {mesh: "rootNamespace: mesh-root\n", resources: `
metadata: {name: global, namespace: mesh-root}
spec: {concurrency: 4}
---
metadata: {name: not-root, namespace: istio-system}
spec: {concurrency: 9}`},
	"workload over namespace": {labels: map[string]string{"app": "web"}, resources: `
metadata: {name: workload, namespace: test-ns}
spec: {selector: {matchLabels: {app: web}}, concurrency: 3}
---
metadata: {name: ns, namespace: test-ns}
spec: {concurrency: 2}`},
	"workload over annotation": {labels: map[string]string{"app": "web"}, annotation: "concurrency: 5\nproxyMetadata: {FROM: annotation, B: annotation}\n", resources: `
metadata: {name: workload, namespace: test-ns}
spec: {selector: {matchLabels: {app: web}}, concurrency: 3, image: {imageType: debug}, environmentVariables: {B: workload}}`},
	"annotation over namespace": {annotation: "concurrency: 5\n", resources: `
metadata: {name: ns, namespace: test-ns}
spec: {concurrency: 2, environmentVariables: {A: ns}}`},
	"other namespaces ignored": {labels: map[string]string{"app": "web"}, resources: `
metadata: {name: ns, namespace: wrong-ns}
spec: {concurrency: 1}
---
metadata: {name: workload, namespace: wrong-ns}
spec: {selector: {matchLabels: {app: web}}, concurrency: 2}
---
metadata: {name: global, namespace: istio-system}
spec: {concurrency: 3}`},
	"oldest workload resource": {labels: map[string]string{"app": "web"}, resources: `
metadata: {name: c, namespace: test-ns, creationTimestamp: "2026-01-01T01:00:00Z"}
spec: {selector: {matchLabels: {app: web}}, environmentVariables: {C: "3"}}
---
metadata: {name: a, namespace: test-ns, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {selector: {matchLabels: {app: web}}, environmentVariables: {A: "1"}}
---
metadata: {name: b, namespace: test-ns, creationTimestamp: "2026-01-01T01:00:00Z"}
spec: {selector: {matchLabels: {app: web}}, environmentVariables: {B: "2"}}`},
	"oldest namespace resource, then by name": {resources: `
metadata: {name: zz, namespace: test-ns, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {concurrency: 9}
---
metadata: {name: aa, namespace: test-ns, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {concurrency: 1}
---
metadata: {name: old, namespace: test-ns, creationTimestamp: "2025-01-01T00:00:00Z"}
spec: {selector: {matchLabels: {app: nobody}}, concurrency: 7}`},
	"variables merged over every layer": {labels: map[string]string{"app": "web"},
		mesh:       "defaultConfig: {proxyMetadata: {MESH: mesh, ALL: mesh}}\n",
		annotation: "proxyMetadata: {ANNOTATION: annotation, ALL: annotation}\n", resources: `
metadata: {name: global, namespace: istio-system}
spec: {environmentVariables: {ROOT: root, ALL: root}}
---
metadata: {name: ns, namespace: test-ns}
spec: {environmentVariables: {NS: ns, ALL: ns}}
---
metadata: {name: workload, namespace: test-ns}
spec: {selector: {matchLabels: {app: web}}, environmentVariables: {WORKLOAD: workload}}`},
	"a pod of the root namespace": {namespace: "istio-system", labels: map[string]string{"app": "gw"}, resources: `
metadata: {name: global, namespace: istio-system}
spec: {concurrency: 2, environmentVariables: {ROOT: root}}
---
metadata: {name: gw, namespace: istio-system}
spec: {selector: {matchLabels: {app: gw}}, image: {imageType: distroless}}`},
	"an empty selector selects nothing": {labels: map[string]string{"app": "web"}, resources: `
metadata: {name: empty, namespace: test-ns}
spec: {selector: {}, concurrency: 7}`},
	"concurrency 0": {mesh: "defaultConfig: {concurrency: 2}\n", resources: `
metadata: {name: ns, namespace: test-ns}
spec: {concurrency: 0}`},
	"nothing": {mesh: "defaultConfig: {concurrency: 2, image: {imageType: distroless}}\n"},
}

// TestProxyConfigPrecedenceAsIstiod builds each case's proxy
// configuration with istiod's EffectiveProxyConfig and with discovery's
// injector (the PROXY_CONFIG it writes) and compares what ProxyConfig
// resources set: concurrency, image and proxyMetadata.
func TestProxyConfigPrecedenceAsIstiod(t *testing.T) {
	cfg, err := inject.DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	values, err := inject.ParseValues(nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range proxyConfigCorpus {
		t.Run(name, func(t *testing.T) {
			ns := tc.namespace
			if ns == "" {
				ns = "test-ns"
			}
			pcs := parseProxyConfigs(t, tc.resources)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: tc.labels, Annotations: map[string]string{}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
			}
			if tc.annotation != "" {
				pod.Annotations["proxy.istio.io/config"] = tc.annotation
			}

			imc, err := istiomesh.ApplyMeshConfigDefaults(tc.mesh)
			if err != nil {
				t.Fatal(err)
			}
			store := istiomodel.NewFakeStore()
			for _, pc := range pcs {
				if _, err := store.Create(config.Config{
					Meta: config.Meta{GroupVersionKind: gvk.ProxyConfig, Name: pc.Name, Namespace: pc.Namespace, CreationTimestamp: pc.CreationTimestamp.Time},
					Spec: &pc.Spec,
				}); err != nil {
					t.Fatal(err)
				}
			}
			want := istiomodel.GetProxyConfigs(store, imc).EffectiveProxyConfig(
				&istiomodel.NodeMetadata{Namespace: ns, Labels: pod.Labels, Annotations: pod.Annotations}, imc)

			dmc, err := mesh.Parse(tc.mesh)
			if err != nil {
				t.Fatal(err)
			}
			nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"istio-injection": "enabled"}}}
			out, d, err := inject.InjectWith(pod, nsObj, cfg, values, inject.RevisionSelection(""), inject.Env{Mesh: dmc.Proto(), ProxyConfigs: pcs})
			if err != nil || !d.Inject {
				t.Fatalf("inject: %v (%s)", err, d.Reason)
			}
			got := injectedPROXYCONFIG(t, out)
			if w, g := picked(want), picked(got); w != g {
				t.Errorf("istiod:    %s\ndiscovery: %s", w, g)
			}
		})
	}
}

// picked renders what ProxyConfig resources set, comparably.
func picked(pc *meshconfig.ProxyConfig) string {
	var env []string
	for k, v := range pc.GetProxyMetadata() {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	c := "unset"
	if pc.GetConcurrency() != nil {
		c = fmt.Sprint(pc.GetConcurrency().GetValue())
	}
	return fmt.Sprintf("concurrency %s, image %q, env [%s]", c, pc.GetImage().GetImageType(), strings.Join(env, " "))
}

func parseProxyConfigs(t *testing.T, docs string) []*networkingv1beta1.ProxyConfig {
	t.Helper()
	var out []*networkingv1beta1.ProxyConfig
	for _, doc := range strings.Split(docs, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		pc := &networkingv1beta1.ProxyConfig{}
		if err := yaml.UnmarshalStrict([]byte(doc), pc); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if pc.CreationTimestamp.IsZero() {
			pc.CreationTimestamp = metav1.NewTime(t0)
		}
		out = append(out, pc)
	}
	return out
}

func injectedPROXYCONFIG(t *testing.T, pod *corev1.Pod) *meshconfig.ProxyConfig {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if c.Name == inject.ProxyContainerName && e.Name == "PROXY_CONFIG" {
				pc := &meshconfig.ProxyConfig{}
				if err := protojson.Unmarshal([]byte(e.Value), pc); err != nil {
					t.Fatal(err)
				}
				return pc
			}
		}
	}
	t.Fatal("no PROXY_CONFIG")
	return nil
}
