package install

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Component is the rendered objects of one component, sorted.
type Component struct {
	// Name is base, discovery or gateway-<name>.
	Name    string
	Objects []*unstructured.Unstructured
}

// Manifest is a whole rendered installation, in apply order.
type Manifest struct {
	Spec       *Spec
	Revision   string
	Components []Component
	// Warnings name what the input set that changes nothing, and the
	// like: the commands print them.
	Warnings []string
	// Notes say what the installer chose not to render, and why.
	Notes []string

	scope installScope
}

// installScope is what one bootstrap answers for: prune removes its
// revision's objects of these components that it no longer renders.
type installScope struct {
	// controlPlane: the input enables the discovery component.
	controlPlane bool
	// base: the input enables the base component.
	base bool
	// gateways are the gateway components the input lists, enabled or not.
	gateways map[string]bool
}

// Governs reports whether the install answers for the component's objects
// of its revision. A control plane install answers for its discovery and
// base components and, for the default revision, for the revision's
// gateways; an install without the control plane (gateways installed on
// their own) answers only for the gateways it lists, and for base if it
// enables it.
func (m *Manifest) Governs(component string) bool {
	s := m.scope
	switch {
	case component == ComponentDiscovery:
		return s.controlPlane
	case component == ComponentBase:
		return s.controlPlane || s.base
	case s.controlPlane:
		return m.Revision == defaultRevision
	default:
		return s.gateways[component]
	}
}

// RenderOptions say where charts come from and what fills the gaps.
type RenderOptions struct {
	// FS holds charts/ and profiles/ (manifests.FS, or a directory given
	// with --manifests).
	FS fs.FS
	// DefaultTag is the image tag when the spec has none: the build's.
	DefaultTag string
}

// Render loads the input, checks it, and renders every enabled component.
func Render(opts RenderOptions, in Input) (*Manifest, error) {
	l, err := Load(opts.FS, in)
	if err != nil {
		return nil, err
	}
	return RenderLoaded(opts, l)
}

// RenderLoaded renders a loaded input: each chart with its values, then
// components.*.k8s laid over the objects (patch.go).
func RenderLoaded(opts RenderOptions, l *Loaded) (*Manifest, error) {
	spec := l.Spec
	m := &Manifest{Spec: spec, Revision: RevisionName(spec.Revision), Warnings: append([]string(nil), l.Warnings...)}
	m.scope = scopeOf(spec)
	charts := map[string]*chart.Chart{}
	js, notes := jobs(l)
	m.Notes = notes
	for _, j := range js {
		c, ok := charts[j.chart]
		if !ok {
			var err error
			if c, err = loadChart(opts.FS, j.chart); err != nil {
				return nil, err
			}
			if opts.DefaultTag != "" {
				// discovery's image tag when none is set: the build's.
				c.Metadata.AppVersion = opts.DefaultTag
			}
			charts[j.chart] = c
		}
		objs, err := renderChart(c, j)
		if err != nil {
			return nil, fmt.Errorf("render chart %q for %s: %w", j.chart, j.component, err)
		}
		warns, err := applyK8s(objs, j, componentPath(j, spec))
		if err != nil {
			return nil, err
		}
		m.Warnings = append(m.Warnings, warns...)
		for _, o := range objs {
			addInstallLabels(o, j.component, m.Revision)
		}
		sortObjects(objs)
		m.Components = append(m.Components, Component{Name: j.component, Objects: objs})
	}
	m.Warnings = dedupe(m.Warnings)
	return m, nil
}

// componentPath is where a job's components.*.k8s is in the input.
func componentPath(j chartJob, s *Spec) string {
	switch j.chart {
	case "base":
		return "components.base.k8s"
	case "discovery":
		return "components.pilot.k8s"
	}
	for _, g := range allGateways(s) {
		if gatewayPrefix+g.Name == j.component {
			return g.path + ".k8s"
		}
	}
	return j.component
}

func scopeOf(s *Spec) installScope {
	sc := installScope{
		controlPlane: enabledOr(s.Values.Pilot.Enabled, true),
		base:         enabledOr(s.Components.Base.Enabled, true),
		gateways:     map[string]bool{},
	}
	for _, g := range allGateways(s) {
		sc.gateways[gatewayPrefix+g.Name] = true
	}
	return sc
}

// WriteWarnings prints each warning and note on a line of its own.
func (m *Manifest) WriteWarnings(w io.Writer) {
	for _, s := range m.Warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
	for _, s := range m.Notes {
		fmt.Fprintf(w, "note: %s\n", s)
	}
}

// loadChart reads charts/<name> from fsys.
func loadChart(fsys fs.FS, name string) (*chart.Chart, error) {
	root := path.Join("charts", name)
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(p, root+"/"), Data: b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read chart %q: %w", name, err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load chart %q: %w", name, err)
	}
	return c, nil
}

func renderChart(c *chart.Chart, j chartJob) ([]*unstructured.Unstructured, error) {
	vals, err := chartutil.ToRenderValues(c, j.values, chartutil.ReleaseOptions{
		Name: j.component, Namespace: j.namespace, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Engine{Strict: false}.Render(c, vals)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, n := range names {
		if path.Base(n) == "NOTES.txt" || strings.HasPrefix(path.Base(n), "_") {
			continue
		}
		docs, err := splitObjects([]byte(out[n]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

// splitObjects parses a multi-document YAML stream into objects, skipping
// empty documents.
func splitObjects(b []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("parse rendered YAML: %w\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("rendered object without apiVersion, kind or name:\n%s", doc)
		}
		out = append(out, u)
	}
}

func addInstallLabels(o *unstructured.Unstructured, component, revision string) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[LabelManagedBy] = ManagedByValue
	l[LabelComponent] = component
	l[LabelRevision] = revision
	o.SetLabels(l)
}

// kindOrder is the order objects are applied in within a component:
// definitions and identities before what uses them, webhooks last so that
// they never point at a server that does not exist yet.
var kindOrder = map[string]int{
	"CustomResourceDefinition": 0, "Namespace": 1, "ServiceAccount": 2,
	"ClusterRole": 3, "ClusterRoleBinding": 4, "Role": 5, "RoleBinding": 6,
	"ConfigMap": 7, "Secret": 8, "Service": 9, "Deployment": 10,
	"PodDisruptionBudget": 11, "HorizontalPodAutoscaler": 12,
	"ValidatingWebhookConfiguration": 13, "MutatingWebhookConfiguration": 14,
}

func sortObjects(objs []*unstructured.Unstructured) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		ka, oka := kindOrder[a.GetKind()]
		kb, okb := kindOrder[b.GetKind()]
		if !oka {
			ka = len(kindOrder)
		}
		if !okb {
			kb = len(kindOrder)
		}
		if ka != kb {
			return ka < kb
		}
		if a.GetKind() != b.GetKind() {
			return a.GetKind() < b.GetKind()
		}
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
}

// Objects returns every object in apply order.
func (m *Manifest) Objects() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, c := range m.Components {
		out = append(out, c.Objects...)
	}
	return out
}

// YAML writes every object as one multi-document stream, each preceded by
// a comment naming its component.
func (m *Manifest) YAML() ([]byte, error) {
	var buf bytes.Buffer
	for _, c := range m.Components {
		for _, o := range c.Objects {
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&buf, "---\n# component: %s\n", c.Name)
			buf.Write(b)
		}
	}
	return buf.Bytes(), nil
}
