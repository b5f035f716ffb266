package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Input is what the user asked for: profile < files < --set.
type Input struct {
	// Profile is --profile; a file's spec.profile or --set profile=
	// overrides it. Empty means default.
	Profile string
	// Files are -f files, merged in order.
	Files []string
	// Sets are --set arguments, applied in order after the files.
	Sets []string
	// Revision, when set, is applied last, like --set revision=.
	Revision string
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

// LoadSpec merges the profile, the files and the --set values and checks
// the result strictly. Every problem found is returned at once; on error
// nothing should be applied.
func LoadSpec(fsys fs.FS, in Input) (*Spec, error) {
	var overlays []any
	var errs []error
	profile := in.Profile
	for _, f := range in.Files {
		spec, err := readOperatorFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p, ok := spec["profile"].(string); ok && p != "" {
			profile = p
		}
		overlays = append(overlays, spec)
	}
	sets := make([]SetValue, 0, len(in.Sets)+1)
	for _, arg := range in.Sets {
		sv, err := ParseSet(arg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(sv.Path) > 1 && sv.Path[0].Key == "spec" {
			sv.Path = sv.Path[1:]
		}
		if len(sv.Path) == 1 && sv.Path[0].Key == "profile" {
			profile = sv.Value
		}
		sets = append(sets, sv)
	}
	if in.Revision != "" {
		sets = append(sets, SetValue{Path: Path{keyStep("revision")}, Value: in.Revision, Raw: "--revision " + in.Revision})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	tree, err := profileTree(fsys, profile)
	if err != nil {
		return nil, err
	}
	for _, o := range overlays {
		tree = merge(tree, o)
	}
	for _, sv := range sets {
		if tree, err = applySet(tree, sv); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := errorsWithSource("merged input", validateTree(tree, specType, nil)); err != nil {
		return nil, err
	}
	return decodeSpec(tree)
}

func applySet(tree any, sv SetValue) (any, error) {
	src := "--set " + sv.Raw
	if strings.HasPrefix(sv.Raw, "--") {
		src = sv.Raw
	}
	t, err := typeAt(sv.Path)
	if err != nil {
		return tree, errorsWithSource(src, []error{err})
	}
	v, err := coerce(sv.Value, t, sv.Path)
	if err != nil {
		return tree, errorsWithSource(src, []error{err})
	}
	out, err := setAt(tree, sv.Path, v)
	if err != nil {
		return tree, fmt.Errorf("%s: %w", src, err)
	}
	return out, nil
}

// readOperatorFile reads an IstioOperator file, checks it strictly and
// returns its spec.
func readOperatorFile(name string) (map[string]any, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return parseOperator(name, b)
}

// parseOperator checks an IstioOperator document and returns its spec.
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
	spec, _ := m["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	return spec, nil
}

// profileTree returns the spec of a profile: the default profile, with
// the named profile laid over it.
func profileTree(fsys fs.FS, name string) (any, error) {
	if name == "" {
		name = defaultProfile
	}
	base, err := readProfile(fsys, defaultProfile)
	if err != nil {
		return nil, err
	}
	if name == defaultProfile {
		return base, nil
	}
	over, err := readProfile(fsys, name)
	if err != nil {
		return nil, err
	}
	return merge(base, over), nil
}

func readProfile(fsys fs.FS, name string) (map[string]any, error) {
	b, err := fs.ReadFile(fsys, "profiles/"+name+".yaml")
	if errors.Is(err, fs.ErrNotExist) {
		names, _ := Profiles(fsys)
		msg := fmt.Sprintf("unknown profile %q (profiles: %s)", name, strings.Join(names, ", "))
		if best := closest(name, names); best != "" {
			msg += fmt.Sprintf("; did you mean %q?", best)
		}
		return nil, errors.New(msg)
	}
	if err != nil {
		return nil, fmt.Errorf("profile %q: %w", name, err)
	}
	return parseOperator("profile "+name, b)
}

func decodeSpec(tree any) (*Spec, error) {
	b, err := json.Marshal(tree)
	if err != nil {
		return nil, err
	}
	var s Spec
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode merged input: %w", err)
	}
	return &s, nil
}
