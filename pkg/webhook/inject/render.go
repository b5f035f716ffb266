package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/template"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Proxy identity and ports every template relies on.
const (
	ProxyContainerName = "istio-proxy"
	InitContainerName  = "istio-init"
	ProxyUID           = 1337
	ProxyGID           = 1337
	// proxy ports never redirected inbound: Envoy's Prometheus port, the
	// readiness port and pilot-agent's status port.
	portEnvoyPrometheus = 15090
	portReadiness       = 15021
	portAgentStatus     = 15020
)

// TemplateData is what an injection template sees as ".". Field names
// follow Istio's, so templates written for Istio render here too.
type TemplateData struct {
	ObjectMeta     metav1.ObjectMeta
	Spec           corev1.PodSpec
	DeploymentMeta metav1.ObjectMeta
	ProxyConfig    *meshconfig.ProxyConfig
	// MeshConfig is the MeshConfig in force (nil when the injector has
	// none, as in unit tests).
	MeshConfig *meshconfig.MeshConfig
	Values     map[string]any
	Revision   string
	ProxyImage string
	// ProxyInitImage is istio-init's image: ProxyImage without the
	// ProxyConfig's image type (Istio's ProxyInitImage takes only
	// global.variant and the pod's sidecar.istio.io/proxyImageType).
	ProxyInitImage   string
	ProxyUID         int64
	ProxyGID         int64
	NativeSidecars   bool
	InterceptionMode string
}

// render executes one template and returns its output as a JSON object.
// Whether it is a valid part of a Pod is checked once all templates are
// merged (see fromMap). Pods of one workload usually render the same text,
// so the parsed output is cached by text; callers must not modify it.
func render(t *template.Template, data *TemplateData, cache *parsedCache) (map[string]any, error) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("template %q: %w", t.Name(), err)
	}
	key := t.Name() + "\x00" + buf.String()
	if out, ok := cache.get(key); ok {
		return out, nil
	}
	js, err := yaml.YAMLToJSON(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("template %q rendered invalid YAML: %w", t.Name(), err)
	}
	var out map[string]any
	if err := json.Unmarshal(js, &out); err != nil {
		return nil, fmt.Errorf("template %q rendered invalid JSON: %w", t.Name(), err)
	}
	if out == nil {
		out = map[string]any{}
	}
	cache.put(key, out)
	return out, nil
}

// parsedCache holds parsed template output by rendered text. It is
// bounded: when full it starts over, which is cheap and keeps the working
// set (the workloads being scaled right now).
type parsedCache struct {
	mu      sync.Mutex
	entries map[string]map[string]any
	max     int
}

func newParsedCache(max int) *parsedCache {
	return &parsedCache{entries: make(map[string]map[string]any), max: max}
}

func (c *parsedCache) get(key string) (map[string]any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.entries[key]
	return v, ok
}

func (c *parsedCache) put(key string, v map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
	c.entries[key] = v
}

func templateFuncs() template.FuncMap {
	return template.FuncMap{
		"annotation":          annotationOr,
		"isset":               isset,
		"default":             defaultValue,
		"quote":               func(v any) string { return strconv.Quote(toString(v)) },
		"toJSON":              toJSON,
		"protoToJSON":         protoToJSON,
		"toYaml":              toYaml,
		"indent":              indent,
		"nindent":             func(n int, s string) string { return "\n" + indent(n, s) },
		"join":                strings.Join,
		"lower":               strings.ToLower,
		"contains":            strings.Contains,
		"hasPrefix":           strings.HasPrefix,
		"excludeInboundPorts": excludeInboundPorts,
		"appContainers":       appContainers,
		"podPorts":            podPorts,
	}
}

// annotationOr returns the pod annotation name, or def when it is unset.
func annotationOr(meta metav1.ObjectMeta, name string, def any) string {
	if v, ok := meta.Annotations[name]; ok {
		return v
	}
	return toString(def)
}

func isset(m map[string]string, key string) bool {
	_, ok := m[key]
	return ok
}

// defaultValue is used as `x | default d`: x unless it is empty.
func defaultValue(def, v any) any {
	if v == nil {
		return def
	}
	if s, ok := v.(string); ok && s == "" {
		return def
	}
	if b, ok := v.(bool); ok && !b {
		return def
	}
	return v
}

func toString(v any) string {
	if v == nil {
		return ""
	}
	if f, ok := v.(float64); ok && f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return fmt.Sprint(v)
}

func toJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// protoToJSON renders a proto message as compact JSON. protojson's output
// is deliberately unstable in whitespace; compacting makes it stable.
func protoToJSON(m proto.Message) (string, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return "", err
	}
	return out.String(), nil
}

func toYaml(v any) (string, error) {
	b, err := yaml.Marshal(v)
	return strings.TrimSuffix(string(b), "\n"), err
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// excludeInboundPorts joins the proxy's own ports with the user's list,
// without duplicates, in a stable order.
func excludeInboundPorts(user string) string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		p = strings.TrimSpace(p)
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range []int{portEnvoyPrometheus, portReadiness, portAgentStatus} {
		add(strconv.Itoa(p))
	}
	for _, p := range strings.Split(user, ",") {
		add(p)
	}
	return strings.Join(out, ",")
}

// appContainers names the pod's own containers, comma separated.
func appContainers(spec corev1.PodSpec) string {
	var names []string
	for _, c := range spec.Containers {
		if c.Name != ProxyContainerName {
			names = append(names, c.Name)
		}
	}
	return strings.Join(names, ",")
}

// podPorts is the JSON list of the application's declared container ports,
// as ISTIO_META_POD_PORTS carries them to the control plane.
func podPorts(spec corev1.PodSpec) (string, error) {
	ports := []corev1.ContainerPort{}
	for _, c := range spec.Containers {
		if c.Name != ProxyContainerName {
			ports = append(ports, c.Ports...)
		}
	}
	sort.SliceStable(ports, func(i, j int) bool { return ports[i].ContainerPort < ports[j].ContainerPort })
	return toJSON(ports)
}
