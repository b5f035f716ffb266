package install

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/manifests"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func renderOpts() RenderOptions {
	return RenderOptions{FS: manifests.FS, DefaultTag: "test"}
}

// goldenYAML is the manifest with each CRD's body left out: the CRDs are
// generated and checked by hack/gen-crds, and would drown the rest.
func goldenYAML(t *testing.T, m *Manifest) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, c := range m.Components {
		for _, o := range c.Objects {
			if o.GetKind() == "CustomResourceDefinition" {
				fmt.Fprintf(&buf, "---\n# component: %s\n# CustomResourceDefinition %s (body from crd-all.gen.yaml), labels %v\n", c.Name, o.GetName(), o.GetLabels())
				continue
			}
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&buf, "---\n# component: %s\n", c.Name)
			buf.Write(b)
		}
	}
	return buf.Bytes()
}

func TestManifestGenerateGolden(t *testing.T) {
	tests := map[string]Input{
		"profile-default": {Profile: "default"},
		"profile-demo":    {Profile: "demo"},
		"profile-minimal": {Profile: "minimal"},
		"profile-empty":   {Profile: "empty"},
		"profile-remote":  {Profile: "remote", Sets: []string{"values.global.remotePilotAddress=discovery.mesh.example:15012"}},
		"revision-canary": {Profile: "minimal", Revision: "canary"},
		"set-gateway-off-and-proxy-tag": {Sets: []string{
			"components.ingressGateways.[name:istio-ingressgateway].enabled=false",
			"values.global.proxy.tag=1.32.1",
			"values.sidecarInjectorWebhook.enableNamespacesByDefault=true",
		}},
		"set-index-and-new-gateway": {Sets: []string{
			"components.ingressGateways.[0].k8s.replicaCount=3",
			"values.gateways.istio-ingressgateway.autoscaleEnabled=false",
			"components.egressGateways.[name:istio-egressgateway].enabled=true",
			"meshConfig.accessLogFile=/dev/stdout",
		}},
		"file-overlay": {Files: []string{"testdata/overlay.yaml"}},
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := Render(renderOpts(), in)
			if err != nil {
				t.Fatal(err)
			}
			got := goldenYAML(t, m)
			again, err := Render(renderOpts(), in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, goldenYAML(t, again)) {
				t.Fatal("two renders of the same input differ")
			}
			path := filepath.Join("testdata", "golden", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the render (run go test ./pkg/install -run Golden -update and review the diff); first difference near:\n%s", path, firstDiff(string(want), string(got)))
			}
		})
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d lines", len(al), len(bl))
}
