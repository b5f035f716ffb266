package inject

import (
	"embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

// The built-in templates and values. The discovery Helm chart copies these
// files into the istio-sidecar-injector ConfigMap; they are embedded here
// so the injector works, and is tested, without a chart.
var (
	//go:embed templates/*.yaml
	templateFS embed.FS

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
		b, err := templateFS.ReadFile("templates/" + name + ".yaml")
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
