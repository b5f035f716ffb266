package istiovalidate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var importPath = regexp.MustCompile(`(?m)^\s*_ "([^"]+)"`)

// TestEnvoyTypesMatchIstio: discovery registers the Envoy extension types
// istiod registers (internal/envoytypes), but for Istio's contrib ones, so
// that an EnvoyFilter's typed_config resolves alike.
func TestEnvoyTypesMatchIstio(t *testing.T) {
	read := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range importPath.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	var want []string
	contrib := 0
	for _, p := range read(filepath.Join(istioModuleDir(t), "pkg/config/xds/filter_types.gen.go")) {
		if strings.HasPrefix(p, "github.com/envoyproxy/go-control-plane/contrib/") {
			contrib++
			continue
		}
		want = append(want, p)
	}
	have := read("../../internal/envoytypes/envoytypes.go")
	if !slices.Equal(have, want) {
		t.Errorf("internal/envoytypes registers %d packages, Istio's list less contrib has %d: regenerate it from Istio's", len(have), len(want))
	}
	t.Logf("%d Envoy packages registered as in istiod; %d contrib packages not", len(have), contrib)
}
