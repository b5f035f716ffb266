package install

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Input is what the user asked for: profile < files < --set.
type Input struct {
	// Profile is --profile; a file's spec.profile (or values.profile) or
	// --set profile= overrides it. Empty means default.
	Profile string
	// Files are -f files, merged in order.
	Files []string
	// Sets are --set arguments, applied in order after the files.
	Sets []string
	// Revision, when set, is applied last, like --set revision=.
	Revision string
}

// Loaded is the input merged, checked and normalized.
type Loaded struct {
	// Spec is the typed form of Tree.
	Spec *Spec
	// Tree is the merged IstioOperator spec, normalized (normalize.go):
	// the charts' values come from it.
	Tree map[string]any
	// Warnings name what was accepted but changes nothing, and the like.
	Warnings []string
}

// defaultProfile is the base every other profile overlays.
const defaultProfile = "default"

// Profiles lists the profile names in fsys (profiles/<name>.yaml), sorted.
func Profiles(fsys fs.FS) ([]string, error) {
	entries, err := fs.ReadDir(fsys, "profiles")
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// LoadSpec is Load without the tree and the warnings.
func LoadSpec(fsys fs.FS, in Input) (*Spec, error) {
	l, err := Load(fsys, in)
	if err != nil {
		return nil, err
	}
	return l.Spec, nil
}

// userInput is one -f file or --set.
type userInput struct {
	source string
	// tree is a file's spec, or what a --set writes (lists stand for the
	// elements its path selects): what the user set, for warnings.
	tree map[string]any
	// set and value are a --set, applied to the merged tree in order.
	set   *SetValue
	value any
	// namespace is a file's metadata.namespace.
	namespace string
}

// Load merges the charts' defaults, the profile, the files and the --set
// values, checks the result strictly and normalizes it. Every problem
// found is returned at once; on error nothing should be applied.
func Load(fsys fs.FS, in Input) (*Loaded, error) {
	var inputs []userInput
	var errs []error
	profile := in.Profile
	for _, f := range in.Files {
		ui, p, err := readOperatorFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p != "" {
			profile = p
		}
		inputs = append(inputs, ui)
	}
	for _, arg := range in.Sets {
		ui, p, err := setInput(arg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p != "" {
			profile = p
		}
		inputs = append(inputs, ui)
	}
	if in.Revision != "" {
		inputs = append(inputs, userInput{source: "--revision " + in.Revision, tree: map[string]any{"revision": in.Revision}})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	tree, err := baseTree(fsys, profile)
	if err != nil {
		return nil, err
	}
	for _, ui := range inputs {
		if ui.set == nil {
			tree = merge(tree, ui.tree).(map[string]any)
			continue
		}
		out, err := setAt(tree, ui.set.Path, ui.value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ui.source, err))
			continue
		}
		tree = out.(map[string]any)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := errorsWithSource("merged input", validateTree(tree, specType, nil)); err != nil {
		return nil, err
	}
	l := &Loaded{Tree: tree}
	for _, ui := range inputs {
		l.Warnings = append(l.Warnings, noEffectWarnings(ui.tree, specType, nil)...)
	}
	if err := normalize(l, inputs); err != nil {
		return nil, err
	}
	if l.Spec, err = decodeSpec(l.Tree); err != nil {
		return nil, err
	}
	warns, err := checkRules(l.Spec, l.Tree)
	if err != nil {
		return nil, err
	}
	l.Warnings = dedupe(append(l.Warnings, warns...))
	return l, nil
}

// setInput turns one --set into a spec tree, typed as its path expects,
// and the profile it names, if it names one.
func setInput(arg string) (userInput, string, error) {
	sv, err := ParseSet(arg)
	if err != nil {
		return userInput{}, "", err
	}
	if len(sv.Path) > 1 && sv.Path[0].IsKey() && sv.Path[0].Key == "spec" {
		sv.Path = sv.Path[1:]
	}
	src := "--set " + sv.Raw
	t, meshRest, err := typeAt(sv.Path)
	if err != nil {
		return userInput{}, "", errorsWithSource(src, []error{err})
	}
	var v any
	if meshRest != nil {
		v = meshScalar(meshRest, sv.Value)
	} else if v, err = coerce(sv.Value, t, sv.Path); err != nil {
		return userInput{}, "", errorsWithSource(src, []error{err})
	}
	profile := ""
	if p := sv.Path.String(); p == "profile" || p == "values.profile" {
		profile = sv.Value
	}
	return userInput{source: src, tree: sparseTree(sv.Path, v).(map[string]any), set: &sv, value: v}, profile, nil
}

// sparseTree is the tree holding only v at p, a list standing for the
// element a list step selects.
func sparseTree(p Path, v any) any {
	if len(p) == 0 {
		return v
	}
	child := sparseTree(p[1:], v)
	if p[0].IsKey() {
		return map[string]any{p[0].Key: child}
	}
	return []any{child}
}

// readOperatorFile reads an IstioOperator file (one object, as istioctl
// requires), checks it strictly and returns its spec and the profile it
// names.
func readOperatorFile(name string) (userInput, string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return userInput{}, "", err
	}
	docs, err := yamlDocuments(b)
	if err != nil {
		return userInput{}, "", fmt.Errorf("%s: not YAML: %w", name, err)
	}
	if len(docs) > 1 {
		return userInput{}, "", fmt.Errorf("%s: holds %d IstioOperator objects; one file holds one (pass each with -f)", name, len(docs))
	}
	if len(docs) == 1 {
		b = docs[0]
	}
	doc, err := parseOperator(name, b)
	if err != nil {
		return userInput{}, "", err
	}
	spec, _ := doc["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	ui := userInput{source: name, tree: spec}
	if md, ok := doc["metadata"].(map[string]any); ok {
		ui.namespace, _ = md["namespace"].(string)
	}
	profile, err := fileProfile(name, spec)
	return ui, profile, err
}

// fileProfile is spec.profile, or Istio's values.profile; the two must
// agree.
func fileProfile(source string, spec map[string]any) (string, error) {
	p, _ := spec["profile"].(string)
	vp := ""
	if v, ok := spec["values"].(map[string]any); ok {
		vp, _ = v["profile"].(string)
	}
	if p != "" && vp != "" && p != vp {
		return "", fmt.Errorf("%s: spec.profile %q and spec.values.profile %q differ; discovery has one set of profiles", source, p, vp)
	}
	if p == "" {
		p = vp
	}
	return p, nil
}

// yamlDocuments splits a YAML stream into its non-empty documents.
func yamlDocuments(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			out = append(out, doc)
		}
	}
}

// parseOperator checks an IstioOperator document and returns it.
func parseOperator(source string, b []byte) (map[string]any, error) {
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", source, err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an IstioOperator object, got %s", source, describe(doc))
	}
	if m["apiVersion"] != OperatorAPIVersion || m["kind"] != OperatorKind {
		return nil, fmt.Errorf("%s: want apiVersion %s and kind %s, got %v and %v", source, OperatorAPIVersion, OperatorKind, m["apiVersion"], m["kind"])
	}
	if err := errorsWithSource(source, validateTree(m, reflect.TypeFor[IstioOperator](), nil)); err != nil {
		return nil, err
	}
	return m, nil
}

// baseTree is what the input is laid over: the charts' defaults (their
// values.yaml, as spec.values), the default profile, and the profile
// named.
func baseTree(fsys fs.FS, name string) (map[string]any, error) {
	tree := map[string]any{}
	for _, c := range []string{"base", "discovery"} {
		v, err := chartDefaults(fsys, c)
		if err != nil {
			return nil, err
		}
		tree = merge(tree, map[string]any{"values": v}).(map[string]any)
	}
	if name == "" {
		name = defaultProfile
	}
	names := []string{defaultProfile}
	if name != defaultProfile {
		names = append(names, name)
	}
	for _, n := range names {
		p, err := readProfile(fsys, n)
		if err != nil {
			return nil, err
		}
		tree = merge(tree, p).(map[string]any)
	}
	return tree, nil
}

// chartDefaults reads charts/<chart>/values.yaml.
func chartDefaults(fsys fs.FS, chart string) (map[string]any, error) {
	b, err := fs.ReadFile(fsys, "charts/"+chart+"/values.yaml")
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", chart, err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("chart %s: values.yaml: %w", chart, err)
	}
	if v == nil {
		v = map[string]any{}
	}
	return v, nil
}

func readProfile(fsys fs.FS, name string) (map[string]any, error) {
	b, err := fs.ReadFile(fsys, "profiles/"+name+".yaml")
	if errors.Is(err, fs.ErrNotExist) {
		names, _ := Profiles(fsys)
		msg := fmt.Sprintf("unknown profile %q (profiles: %s)", name, strings.Join(names, ", "))
		if why, ok := istioProfiles[name]; ok {
			msg = fmt.Sprintf("profile %q: not supported by discovery: %s; discovery's profiles: %s", name, why, strings.Join(names, ", "))
		} else if best := closest(name, names); best != "" {
			msg += fmt.Sprintf("; did you mean %q?", best)
		}
		return nil, errors.New(msg)
	}
	if err != nil {
		return nil, fmt.Errorf("profile %q: %w", name, err)
	}
	doc, err := parseOperator("profile "+name, b)
	if err != nil {
		return nil, err
	}
	spec, _ := doc["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	return spec, nil
}

// istioProfiles are Istio's profiles that discovery has no counterpart of.
var istioProfiles = map[string]string{
	"ambient":           "discovery has no ambient mode (ztunnel, CNI node agent)",
	"openshift":         "discovery has no CNI node agent, which Istio's OpenShift profile needs",
	"openshift-ambient": "discovery has no ambient mode (ztunnel, CNI node agent)",
	"preview":           "Istio's preview features (DNS capture) are set in meshConfig.defaultConfig.proxyMetadata",
	"stable":            "discovery validates with its webhook only (no ValidatingAdmissionPolicy)",
}

func decodeSpec(tree any) (*Spec, error) {
	b, err := json.Marshal(tree)
	if err != nil {
		return nil, err
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode merged input: %w", err)
	}
	return &s, nil
}

func dedupe(in []string) []string {
	var out []string
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
