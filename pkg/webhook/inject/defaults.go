package inject

import (
	_ "embed" // the default values
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/manifests"
)

// The built-in templates are the discovery chart's own files
// (manifests/charts/discovery/files/injection), which the chart puts in the
// istio-sidecar-injector ConfigMap: one copy, used by the injector without
// a chart and by the chart. The values are the injector's defaults.
var (
	templateFS  = manifests.FS
	templateDir = "charts/discovery/files/injection/"

	//go:embed templates/values.yaml
	defaultValuesYAML []byte
)

// DefaultTemplateNames are the templates shipped with discovery.
var DefaultTemplateNames = []string{"sidecar", "gateway", "grpc-agent"}

// DefaultConfigYAML returns the "config" key the chart ships: policy
// enabled, the sidecar template by default, and the built-in templates.
func DefaultConfigYAML() ([]byte, error) {
	templates := make(map[string]string, len(DefaultTemplateNames))
	for _, name := range DefaultTemplateNames {
		b, err := templateFS.ReadFile(templateDir + name + ".yaml")
		if err != nil {
			return nil, fmt.Errorf("built-in template %q: %w", name, err)
		}
		templates[name] = string(b)
	}
	return yaml.Marshal(map[string]any{
		"policy":           PolicyEnabled,
		"defaultTemplates": []string{"sidecar"},
		"templates":        templates,
	})
}

// DefaultValuesYAML returns the "values" key the chart ships.
func DefaultValuesYAML() []byte { return append([]byte(nil), defaultValuesYAML...) }

// DefaultConfig parses DefaultConfigYAML.
func DefaultConfig() (*Config, error) {
	b, err := DefaultConfigYAML()
	if err != nil {
		return nil, err
	}
	return ParseConfig(b)
}
