package inject

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func defaults(t testing.TB) (*Config, Values) {
	t.Helper()
	cfg, err := DefaultConfig()
	if err != nil {
		t.Fatalf("default config: %v", err)
	}
	values, err := ParseValues(nil)
	if err != nil {
		t.Fatalf("default values: %v", err)
	}
	return cfg, values
}

func injectionNamespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "default", Labels: map[string]string{NamespaceInjectionLabel: "enabled"},
	}}
}

func readPod(t testing.TB, path string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pod
}

// TestInjectGolden renders testdata/inject/<case>.yaml into
// <case>.injected.yaml (refresh with -update), and checks that the JSON
// patch built from the two, applied by an independent JSON-patch
// implementation, turns the pod into exactly the injected pod.
func TestInjectGolden(t *testing.T) {
	cfg, values := defaults(t)
	inputs, err := filepath.Glob("testdata/inject/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".injected.yaml") {
			continue
		}
		ran++
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			pod := readPod(t, in)
			before := pod.DeepCopy()
			out, d, err := Inject(pod, injectionNamespace(), cfg, values)
			if err != nil {
				t.Fatalf("inject: %v", err)
			}
			if !equalJSON(t, pod, before) {
				t.Fatal("Inject modified its input pod")
			}
			got, err := yaml.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			// Again, now from the parsed-template cache: same result.
			again, _, err := Inject(pod, injectionNamespace(), cfg, values)
			if err != nil {
				t.Fatal(err)
			}
			if againYAML, _ := yaml.Marshal(again); !bytes.Equal(againYAML, got) {
				t.Fatalf("a second injection differs:\n%s", lineDiff(string(got), string(againYAML)))
			}
			golden := strings.TrimSuffix(in, ".yaml") + ".injected.yaml"
			compareGolden(t, golden, got)
			checkPatch(t, pod, out, d)
		})
	}
	if ran < 8 {
		t.Fatalf("only %d golden cases found", ran)
	}
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the injected pod (run with -update to accept):\n%s", path, lineDiff(string(want), string(got)))
	}
}

// checkPatch verifies the add-only patch against evanphx/json-patch.
func checkPatch(t *testing.T, pod, out *corev1.Pod, d Decision) {
	t.Helper()
	orig, _ := json.Marshal(pod)
	injected, _ := json.Marshal(out)
	ops, err := CreatePatch(orig, injected)
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	if !d.Inject && len(ops) != 0 {
		t.Fatalf("a skipped pod got a patch of %d operations", len(ops))
	}
	for _, op := range ops {
		if op.Op != "add" && (op.Op != "replace" || !strings.HasSuffix(op.Path, "/image")) {
			t.Errorf("patch operation %s %s is not an addition", op.Op, op.Path)
		}
	}
	raw, _ := json.Marshal(ops)
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("decode patch: %v", err)
	}
	applied, err := p.Apply(orig)
	if err != nil {
		t.Fatalf("apply patch: %v", err)
	}
	if !jsonpatch.Equal(applied, injected) {
		t.Errorf("patched pod differs from the injected pod:\n%s", lineDiff(string(injected), string(applied)))
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return bytes.Equal(ab, bb)
}

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			out.WriteString("-" + wl + "\n+" + gl + "\n")
			if shown++; shown > 10 {
				break
			}
		}
	}
	return out.String()
}
