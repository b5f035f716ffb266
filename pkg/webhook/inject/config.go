package inject

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/template"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Policy says whether pods in a selected namespace are injected when neither
// the pod nor a selector decides.
type Policy string

// Injection policies, as Istio spells them.
const (
	PolicyEnabled  Policy = "enabled"
	PolicyDisabled Policy = "disabled"
)

// Config is the parsed "config" key of the istio-sidecar-injector ConfigMap.
// Build it with ParseConfig; a Config is immutable once built.
type Config struct {
	// Policy applies to pods that say nothing about injection.
	Policy Policy `json:"policy"`
	// AlwaysInjectSelector injects pods whose labels match, unless the pod
	// opts out explicitly.
	AlwaysInjectSelector []metav1.LabelSelector `json:"alwaysInjectSelector,omitempty"`
	// NeverInjectSelector skips pods whose labels match, unless the pod opts
	// in explicitly. It is checked before AlwaysInjectSelector.
	NeverInjectSelector []metav1.LabelSelector `json:"neverInjectSelector,omitempty"`
	// InjectedAnnotations are added to every injected pod (the pod's own
	// value wins).
	InjectedAnnotations map[string]string `json:"injectedAnnotations,omitempty"`
	// DefaultTemplates are rendered when the pod does not name templates in
	// inject.istio.io/templates.
	DefaultTemplates []string `json:"defaultTemplates,omitempty"`
	// Templates are Go text templates that render a partial Pod in YAML.
	Templates map[string]string `json:"templates,omitempty"`
	// Aliases name lists of templates: a pod asking for an alias gets
	// those templates, in order.
	Aliases map[string][]string `json:"aliases,omitempty"`
	// Template is Istio's older single template; it is the "sidecar"
	// template when Templates does not define one.
	Template string `json:"template,omitempty"`

	compiled map[string]*template.Template
	parsed   *parsedCache
	always   []labels.Selector
	never    []labels.Selector
}

// ParseConfig parses and compiles the "config" key. Every template must
// parse and every selector must be valid, or the whole config is refused.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse injection config: %w", err)
	}
	switch c.Policy {
	case "":
		c.Policy = PolicyEnabled
	case PolicyEnabled, PolicyDisabled:
	default:
		return nil, fmt.Errorf("injection config: policy %q is neither %q nor %q", c.Policy, PolicyEnabled, PolicyDisabled)
	}
	if len(c.DefaultTemplates) == 0 {
		c.DefaultTemplates = []string{"sidecar"}
	}
	if _, ok := c.Templates["sidecar"]; !ok && c.Template != "" {
		if c.Templates == nil {
			c.Templates = map[string]string{}
		}
		c.Templates["sidecar"] = c.Template
	}
	if err := c.compile(); err != nil {
		return nil, err
	}
	if _, err := c.resolve(c.DefaultTemplates, "default template"); err != nil {
		return nil, fmt.Errorf("injection config: %w", err)
	}
	for alias, names := range c.Aliases {
		if _, err := c.resolve(names, "template of alias "+alias); err != nil {
			return nil, fmt.Errorf("injection config: %w", err)
		}
	}
	return &c, nil
}

func (c *Config) compile() error {
	c.compiled = make(map[string]*template.Template, len(c.Templates))
	c.parsed = newParsedCache(512)
	for name, text := range c.Templates {
		t, err := template.New(name).Funcs(templateFuncs()).Option("missingkey=zero").Parse(text)
		if err != nil {
			return fmt.Errorf("injection config: template %q: %w", name, err)
		}
		c.compiled[name] = t
	}
	var err error
	if c.always, err = selectors(c.AlwaysInjectSelector); err != nil {
		return fmt.Errorf("injection config: alwaysInjectSelector: %w", err)
	}
	if c.never, err = selectors(c.NeverInjectSelector); err != nil {
		return fmt.Errorf("injection config: neverInjectSelector: %w", err)
	}
	return nil
}

func selectors(in []metav1.LabelSelector) ([]labels.Selector, error) {
	out := make([]labels.Selector, 0, len(in))
	for i := range in {
		s, err := metav1.LabelSelectorAsSelector(&in[i])
		if err != nil {
			return nil, fmt.Errorf("selector %d: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// resolve expands aliases and checks that every template is defined.
func (c *Config) resolve(names []string, what string) ([]string, error) {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if expanded, ok := c.Aliases[n]; ok {
			out = append(out, expanded...)
			continue
		}
		out = append(out, n)
	}
	for _, n := range out {
		if _, ok := c.compiled[n]; !ok {
			return nil, fmt.Errorf("%s %q is not defined (defined: %s)", what, n, strings.Join(c.TemplateNames(), ", "))
		}
	}
	return out, nil
}

// TemplateNames lists the defined templates, sorted.
func (c *Config) TemplateNames() []string {
	names := make([]string, 0, len(c.compiled))
	for n := range c.compiled {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Values are the Helm-style values of the "values" key: global.hub,
// global.tag, global.proxy.*, revision, meshConfig.defaultConfig, ...
// Templates read them as .Values. Values are never modified once built.
type Values map[string]any

// ParseValues parses the "values" key (JSON or YAML) and lays it over the
// built-in defaults, so a ConfigMap that sets only a few values still
// renders. An empty input yields the defaults.
func ParseValues(data []byte) (Values, error) {
	base, err := decodeValues(defaultValuesYAML)
	if err != nil {
		return nil, fmt.Errorf("built-in values: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return base, nil
	}
	over, err := decodeValues(data)
	if err != nil {
		return nil, fmt.Errorf("parse injection values: %w", err)
	}
	return Values(mergeValues(base, over)), nil
}

func decodeValues(data []byte) (Values, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(js, &v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, errors.New("values must be an object")
	}
	return v, nil
}

// mergeValues lays over on base: objects merge key by key, anything else
// in over replaces what base has.
func mergeValues(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = mergeValues(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}

// Get returns the value at a dotted path such as "global.proxy.image", or
// nil when any step is missing.
func (v Values) Get(path string) any {
	var cur any = map[string]any(v)
	for _, step := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[step]
	}
	return cur
}

// String returns the value at path formatted as text, or "" if unset.
func (v Values) String(path string) string {
	x := v.Get(path)
	if x == nil {
		return ""
	}
	return fmt.Sprint(x)
}

// Bool returns the value at path as a bool; "true" strings count as true.
func (v Values) Bool(path string) bool {
	switch x := v.Get(path).(type) {
	case bool:
		return x
	case string:
		return strings.EqualFold(x, "true")
	}
	return false
}

// Revision is the control plane revision these values belong to; "" and
// "default" both mean the default revision.
func (v Values) Revision() string { return v.String("revision") }
