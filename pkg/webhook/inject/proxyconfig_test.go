package inject

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingapi "istio.io/api/networking/v1beta1"
	typeapi "istio.io/api/type/v1beta1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newProxyConfig is a ProxyConfig resource created age seconds after epoch.
func newProxyConfig(ns, name string, age int, spec *networkingapi.ProxyConfig) *networkingv1beta1.ProxyConfig {
	pc := &networkingv1beta1.ProxyConfig{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name,
		CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second)),
	}}
	proto.Merge(&pc.Spec, spec)
	return pc
}

func selecting(labels map[string]string) *typeapi.WorkloadSelector {
	return &typeapi.WorkloadSelector{MatchLabels: labels}
}

// TestEffectiveProxyConfigPrecedence checks the layers of istiod's
// EffectiveProxyConfig (pilot/pkg/model/proxy_config_test.go's cases,
// restated): mesh defaultConfig < root namespace < pod's namespace <
// (annotation < resource selecting the pod); the oldest resource of a
// layer applies.
func TestEffectiveProxyConfigPrecedence(t *testing.T) {
	sel := map[string]string{"app": "web"}
	tests := map[string]struct {
		configs    []*networkingv1beta1.ProxyConfig
		mesh       *meshconfig.MeshConfig
		labels     map[string]string
		annotation string
		want       *meshconfig.ProxyConfig // the fields the test looks at
	}{
		"a namespace's resource applies to its pods": {
			configs: []*networkingv1beta1.ProxyConfig{newProxyConfig("test-ns", "ns", 0, &networkingapi.ProxyConfig{
				Concurrency: wrapperspb.Int32(3), Image: &networkingapi.ProxyImage{ImageType: "debug"},
			})},
			want: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(3), Image: &networkingapi.ProxyImage{ImageType: "debug"}},
		},
		"the root namespace's resource wins over the mesh's defaultConfig": {
			configs: []*networkingv1beta1.ProxyConfig{newProxyConfig("istio-system", "global", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(3)})},
			mesh:    &meshconfig.MeshConfig{DefaultConfig: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(2)}},
			want:    &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(3)},
		},
		"the MeshConfig's rootNamespace is the root": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("istio-system", "not-root", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(9)}),
				newProxyConfig("mesh-root", "global", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(4)}),
			},
			mesh: &meshconfig.MeshConfig{RootNamespace: "mesh-root"},
			want: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(4)},
		},
		"the pod's namespace wins over the root namespace": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("istio-system", "global", 0, &networkingapi.ProxyConfig{
					Concurrency: wrapperspb.Int32(3), EnvironmentVariables: map[string]string{"A": "root", "B": "root"},
				}),
				newProxyConfig("test-ns", "ns", 0, &networkingapi.ProxyConfig{
					Concurrency: wrapperspb.Int32(2), EnvironmentVariables: map[string]string{"A": "ns"},
				}),
			},
			want: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(2), ProxyMetadata: map[string]string{"A": "ns", "B": "root"}},
		},
		"a resource selecting the pod wins over its namespace's": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("test-ns", "workload", 0, &networkingapi.ProxyConfig{Selector: selecting(sel), Concurrency: wrapperspb.Int32(3)}),
				newProxyConfig("test-ns", "ns", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(2)}),
			},
			labels: sel,
			want:   &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(3)},
		},
		"a resource selecting other labels does not apply": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("test-ns", "workload", 0, &networkingapi.ProxyConfig{Selector: selecting(map[string]string{"app": "db"}), Concurrency: wrapperspb.Int32(3)}),
				newProxyConfig("test-ns", "ns", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(2)}),
			},
			labels: sel,
			want:   &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(2)},
		},
		"a selector without labels selects nothing and is no namespace default": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("test-ns", "empty", 0, &networkingapi.ProxyConfig{Selector: selecting(nil), Concurrency: wrapperspb.Int32(7)}),
			},
			labels: sel,
			want:   &meshconfig.ProxyConfig{},
		},
		"the resource selecting the pod wins over its annotation": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("test-ns", "workload", 0, &networkingapi.ProxyConfig{
					Selector: selecting(sel), Concurrency: wrapperspb.Int32(3), Image: &networkingapi.ProxyImage{ImageType: "debug"},
				}),
			},
			labels:     sel,
			annotation: `{"concurrency": 5, "proxyMetadata": {"FROM": "annotation"}}`,
			want: &meshconfig.ProxyConfig{
				Concurrency: wrapperspb.Int32(3), Image: &networkingapi.ProxyImage{ImageType: "debug"},
				ProxyMetadata: map[string]string{"FROM": "annotation"},
			},
		},
		"the annotation wins over the namespace's resource": {
			configs:    []*networkingv1beta1.ProxyConfig{newProxyConfig("test-ns", "ns", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(2)})},
			annotation: "concurrency: 5\n",
			want:       &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(5)},
		},
		"resources of other namespaces are ignored": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("wrong-ns", "ns", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(1)}),
				newProxyConfig("wrong-ns", "workload", 0, &networkingapi.ProxyConfig{Selector: selecting(sel), Concurrency: wrapperspb.Int32(2)}),
				newProxyConfig("istio-system", "global", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(3)}),
			},
			labels: sel,
			want:   &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(3)},
		},
		"of several resources selecting the pod, the oldest applies": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("test-ns", "c", 3600, &networkingapi.ProxyConfig{Selector: selecting(sel), EnvironmentVariables: map[string]string{"C": "3"}}),
				newProxyConfig("test-ns", "b", 3600, &networkingapi.ProxyConfig{Selector: selecting(sel), EnvironmentVariables: map[string]string{"B": "2"}}),
				newProxyConfig("test-ns", "a", 0, &networkingapi.ProxyConfig{Selector: selecting(sel), EnvironmentVariables: map[string]string{"A": "1"}}),
			},
			labels: sel,
			want:   &meshconfig.ProxyConfig{ProxyMetadata: map[string]string{"A": "1"}},
		},
		"of resources created in the same second, the first by name applies": {
			configs: []*networkingv1beta1.ProxyConfig{
				newProxyConfig("test-ns", "zz", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(9)}),
				newProxyConfig("test-ns", "aa", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(1)}),
			},
			want: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(1)},
		},
		"concurrency 0 is a value, not unset": {
			configs: []*networkingv1beta1.ProxyConfig{newProxyConfig("test-ns", "ns", 0, &networkingapi.ProxyConfig{Concurrency: wrapperspb.Int32(0)})},
			mesh:    &meshconfig.MeshConfig{DefaultConfig: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(2)}},
			want:    &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(0)},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "test-ns", Name: "p", Labels: tt.labels}}
			if tt.annotation != "" {
				pod.Annotations = map[string]string{"proxy.istio.io/config": tt.annotation}
			}
			base := proto.Clone(tt.mesh.GetDefaultConfig()).(*meshconfig.ProxyConfig)
			if base == nil {
				base = &meshconfig.ProxyConfig{}
			}
			var before []*networkingv1beta1.ProxyConfig
			for _, c := range tt.configs {
				before = append(before, c.DeepCopy())
			}
			got, err := withProxyConfigs(base, Env{Mesh: tt.mesh, ProxyConfigs: tt.configs}, pod)
			if err != nil {
				t.Fatal(err)
			}
			picked := &meshconfig.ProxyConfig{Concurrency: got.Concurrency, Image: got.Image, ProxyMetadata: got.ProxyMetadata}
			if !proto.Equal(picked, tt.want) {
				t.Errorf("got %v\nwant %v", picked, tt.want)
			}
			for i, c := range tt.configs {
				if !proto.Equal(&c.Spec, &before[i].Spec) {
					t.Errorf("ProxyConfig %s was modified", c.Name)
				}
			}
		})
	}
}

// TestApplyProxyConfig checks istiod's merge of one layer onto another
// (pilot/pkg/model TestMergeWithPrecedence, restated): fields replace
// whole, proxyMetadata merges by key.
func TestApplyProxyConfig(t *testing.T) {
	tests := map[string]struct {
		lower, higher, want *meshconfig.ProxyConfig
	}{
		"the higher layer's concurrency wins": {
			lower: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(2)}, higher: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(1)},
			want: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(1)},
		},
		"an unset concurrency keeps the lower one": {
			lower: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(2)}, higher: &meshconfig.ProxyConfig{},
			want: &meshconfig.ProxyConfig{Concurrency: wrapperspb.Int32(2)},
		},
		"environment variables merge, the higher layer's win": {
			lower:  &meshconfig.ProxyConfig{ProxyMetadata: map[string]string{"a": "z", "b": "y", "c": "d"}},
			higher: &meshconfig.ProxyConfig{ProxyMetadata: map[string]string{"a": "x", "b": "y"}},
			want:   &meshconfig.ProxyConfig{ProxyMetadata: map[string]string{"a": "x", "b": "y", "c": "d"}},
		},
		"an empty map keeps the lower one": {
			lower:  &meshconfig.ProxyConfig{ProxyMetadata: map[string]string{"a": "z"}},
			higher: &meshconfig.ProxyConfig{ProxyMetadata: map[string]string{}},
			want:   &meshconfig.ProxyConfig{ProxyMetadata: map[string]string{"a": "z"}},
		},
		"a message field replaces the lower one whole": {
			lower:  &meshconfig.ProxyConfig{Tracing: &meshconfig.Tracing{Sampling: 50, MaxPathTagLength: 256}},
			higher: &meshconfig.ProxyConfig{Tracing: &meshconfig.Tracing{}},
			want:   &meshconfig.ProxyConfig{Tracing: &meshconfig.Tracing{}},
		},
		"a duration replaces": {
			lower:  &meshconfig.ProxyConfig{TerminationDrainDuration: durationpb.New(5 * time.Second)},
			higher: &meshconfig.ProxyConfig{TerminationDrainDuration: durationpb.New(500 * time.Millisecond)},
			want:   &meshconfig.ProxyConfig{TerminationDrainDuration: durationpb.New(500 * time.Millisecond)},
		},
		"proxyHeaders keep the lower layer's headers the higher one leaves unset": {
			lower: &meshconfig.ProxyConfig{ProxyHeaders: &meshconfig.ProxyConfig_ProxyHeaders{
				Server:    &meshconfig.ProxyConfig_ProxyHeaders_Server{Disabled: wrapperspb.Bool(true)},
				RequestId: &meshconfig.ProxyConfig_ProxyHeaders_RequestId{Disabled: wrapperspb.Bool(true)},
			}},
			higher: &meshconfig.ProxyConfig{ProxyHeaders: &meshconfig.ProxyConfig_ProxyHeaders{
				RequestId: &meshconfig.ProxyConfig_ProxyHeaders_RequestId{Disabled: wrapperspb.Bool(false)},
			}},
			want: &meshconfig.ProxyConfig{ProxyHeaders: &meshconfig.ProxyConfig_ProxyHeaders{
				Server:    &meshconfig.ProxyConfig_ProxyHeaders_Server{Disabled: wrapperspb.Bool(true)},
				RequestId: &meshconfig.ProxyConfig_ProxyHeaders_RequestId{Disabled: wrapperspb.Bool(false)},
			}},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			higher := proto.Clone(tt.higher)
			applyProxyConfig(tt.lower, tt.higher)
			if !proto.Equal(tt.lower, tt.want) {
				t.Errorf("got %v\nwant %v", tt.lower, tt.want)
			}
			if !proto.Equal(tt.higher, higher) {
				t.Error("the higher layer was modified")
			}
		})
	}
}

func TestWithImageType(t *testing.T) {
	tests := map[string]struct{ tag, imageType, want string }{
		"no type leaves the tag":           {"1.32.0", "", "1.32.0"},
		"a type is appended":               {"1.32.0", "distroless", "1.32.0-distroless"},
		"a known type on the tag replaced": {"1.32.0-distroless", "debug", "1.32.0-debug"},
		"default removes a known type":     {"1.32.0-debug", "default", "1.32.0"},
		"an unknown suffix stays":          {"1.32.0-asm.17", "distroless", "1.32.0-asm.17-distroless"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := withImageType(tt.tag, tt.imageType); got != tt.want {
				t.Errorf("withImageType(%q, %q) = %q, want %q", tt.tag, tt.imageType, got, tt.want)
			}
		})
	}
}

// TestInjectProxyConfigGolden injects the pod of each
// testdata/proxyconfig/<case>.yaml with the ProxyConfig resources of the
// same file into <case>.injected.yaml (refresh with -update), and checks
// the parts a ProxyConfig sets: the image, PROXY_CONFIG's concurrency and
// the environment variables.
func TestInjectProxyConfigGolden(t *testing.T) {
	cfg, values := defaults(t)
	inputs, err := filepath.Glob("testdata/proxyconfig/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string]func(t *testing.T, out *corev1.Pod){
		"layered": func(t *testing.T, out *corev1.Pod) {
			t.Helper()
			proxy := container(t, out.Spec.Containers, ProxyContainerName)
			if want := "docker.io/istio/proxyv2:1.32.0-distroless"; proxy.Image != want {
				t.Errorf("image %q, want %q", proxy.Image, want)
			}
			// Istio's istio-init image takes no ProxyConfig image type.
			if init, want := container(t, out.Spec.InitContainers, InitContainerName), "docker.io/istio/proxyv2:1.32.0"; init.Image != want {
				t.Errorf("istio-init image %q, want %q", init.Image, want)
			}
			if c := injectedProxyConfig(t, out).GetConcurrency(); c.GetValue() != 4 {
				t.Errorf("PROXY_CONFIG concurrency %v, want 4", c)
			}
			for _, c := range []corev1.Container{proxy, container(t, out.Spec.InitContainers, InitContainerName)} {
				if env := envOf(c); env["MESH_WIDE"] != "root" || env["OVERRIDDEN"] != "workload" {
					t.Errorf("%s env %v", c.Name, env)
				}
			}
		},
		"image-type-annotation": func(t *testing.T, out *corev1.Pod) {
			t.Helper()
			proxy := container(t, out.Spec.Containers, ProxyContainerName)
			if want := "docker.io/istio/proxyv2:1.32.0-debug"; proxy.Image != want {
				t.Errorf("image %q, want %q", proxy.Image, want)
			}
			if env := envOf(proxy); env["FROM_NAMESPACE"] != "yes" || env["FROM_ANNOTATION"] != "yes" {
				t.Errorf("env %v", env)
			}
		},
	}
	ran := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".injected.yaml") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		check, ok := checks[name]
		if !ok {
			t.Errorf("%s has no check", in)
			continue
		}
		ran++
		t.Run(name, func(t *testing.T) {
			pod, pcs := readProxyConfigCase(t, in)
			out, d, err := InjectWith(pod, injectionNamespace(), cfg, values, RevisionSelection(""), Env{ProxyConfigs: pcs})
			if err != nil {
				t.Fatalf("inject: %v", err)
			}
			if !d.Inject {
				t.Fatalf("not injected: %s", d.Reason)
			}
			check(t, out)
			got, err := yaml.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".injected.yaml", got)
		})
	}
	if ran != len(checks) {
		t.Fatalf("%d cases ran, %d have checks", ran, len(checks))
	}
}

// readProxyConfigCase reads a file of ProxyConfig documents and one Pod.
func readProxyConfigCase(t *testing.T, path string) (*corev1.Pod, []*networkingv1beta1.ProxyConfig) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	var pcs []*networkingv1beta1.ProxyConfig
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch meta.Kind {
		case "Pod":
			pod = &corev1.Pod{}
			if err := yaml.UnmarshalStrict([]byte(doc), pod); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		case "ProxyConfig":
			pc := &networkingv1beta1.ProxyConfig{}
			if err := yaml.Unmarshal([]byte(doc), pc); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			pcs = append(pcs, pc)
		default:
			t.Fatalf("%s: unexpected kind %q", path, meta.Kind)
		}
	}
	if pod == nil {
		t.Fatalf("%s has no Pod", path)
	}
	return pod, pcs
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

// envOf is a container's environment as Kubernetes resolves it: of two
// entries of one name, the later wins.
func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// TestHandlerAppliesProxyConfigs checks that the webhook reads the
// ProxyConfig resources SetProxyConfigs gives it at each request, and
// matches them by the request's namespace (a pod being created often has
// none of its own).
func TestHandlerAppliesProxyConfigs(t *testing.T) {
	i, _ := newTestInjector(t, namespaces()...)
	var pcs []*networkingv1beta1.ProxyConfig
	i.SetProxyConfigs(func() []*networkingv1beta1.ProxyConfig { return pcs })
	injected := func() corev1.Container {
		pod := appPod(map[string]string{"app": "web"})
		_, body := post(t, i.Handler(), podReview(t, "mesh", pod))
		resp := decodeResponse(t, body)
		p, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(pod)
		patched, err := p.Apply(raw)
		if err != nil {
			t.Fatal(err)
		}
		got := &corev1.Pod{}
		if err := json.Unmarshal(patched, got); err != nil {
			t.Fatal(err)
		}
		return container(t, got.Spec.Containers, ProxyContainerName)
	}
	if env := envOf(injected()); env["FROM_PROXYCONFIG"] != "" {
		t.Fatalf("env %v before any ProxyConfig", env)
	}
	pcs = []*networkingv1beta1.ProxyConfig{
		newProxyConfig("mesh", "ns", 0, &networkingapi.ProxyConfig{EnvironmentVariables: map[string]string{"FROM_PROXYCONFIG": "mesh"}}),
		newProxyConfig("plain", "other", 0, &networkingapi.ProxyConfig{EnvironmentVariables: map[string]string{"FROM_PROXYCONFIG": "plain"}}),
	}
	proxy := injected()
	if env := envOf(proxy); env["FROM_PROXYCONFIG"] != "mesh" {
		t.Errorf("env %v, want FROM_PROXYCONFIG=mesh", env)
	}
}
