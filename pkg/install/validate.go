package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// FieldError says what is wrong at one path of the input.
type FieldError struct {
	// Source is where the value came from: a file, "--set ...", a profile.
	Source string
	Path   Path
	Msg    string
}

func (e *FieldError) Error() string {
	p := e.Path.String()
	if p == "" {
		p = "(top)"
	}
	if e.Source == "" {
		return fmt.Sprintf("%s: %s", p, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Source, p, e.Msg)
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	specType        = reflect.TypeFor[Spec]()
)

// fieldKind says how a struct field is checked, from its `install` tag
// (see Values for the verdicts).
type fieldKind string

const (
	kindTyped       fieldKind = ""
	kindFree        fieldKind = "free"
	kindMeshConfig  fieldKind = "meshconfig"
	kindNoEffect    fieldKind = "noeffect"
	kindUnsupported fieldKind = "unsupported"
	kindOnly        fieldKind = "only"
	kindMoved       fieldKind = "moved"
	kindInstaller   fieldKind = "installer"
)

type structField struct {
	name  string
	typ   reflect.Type
	check fieldKind
	// why explains a verdict; only lists the values accepted (kindOnly);
	// moved names the new path (kindMoved).
	why   string
	only  []string
	moved string
	// enum lists the allowed values of a string, pattern a regexp for it
	// (patternDesc says it in words).
	enum                 []string
	pattern, patternDesc string
}

func parseInstallTag(f *structField, tag string) {
	verdict, arg, _ := strings.Cut(tag, "=")
	f.check = fieldKind(verdict)
	switch f.check {
	case kindOnly:
		vals, why, _ := strings.Cut(arg, ";")
		f.only, f.why = strings.Split(vals, "|"), why
	case kindMoved:
		f.moved = arg
	default:
		f.why = arg
	}
}

// fieldsOf lists the JSON fields of struct type t (embedded structs
// flattened, as encoding/json does).
func fieldsOf(t reflect.Type) map[string]structField {
	out := map[string]structField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range fieldsOf(ft) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		sf := structField{name: name, typ: f.Type, pattern: f.Tag.Get("pattern"), patternDesc: f.Tag.Get("patternDesc")}
		parseInstallTag(&sf, f.Tag.Get("install"))
		if e, ok := f.Tag.Lookup("enum"); ok {
			sf.enum = strings.Split(e, "|")
		}
		out[name] = sf
	}
	return out
}

// validateTree checks a decoded JSON value v against Go type t and returns
// one error per problem.
func validateTree(v any, t reflect.Type, path Path) []error {
	if v == nil {
		return nil // null unsets
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return checkUnmarshal(v, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return validateStruct(v, t, path)
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return []error{typeError(path, "an object", v)}
		}
		var errs []error
		for _, k := range sortedKeys(m) {
			errs = append(errs, validateTree(m[k], t.Elem(), path.child(keyStep(k)))...)
		}
		return errs
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			return []error{typeError(path, "a list", v)}
		}
		var errs []error
		for i, e := range l {
			errs = append(errs, validateTree(e, t.Elem(), path.child(indexStep(i)))...)
		}
		return errs
	case reflect.Interface:
		return nil
	}
	return checkScalar(v, t, path)
}

func validateStruct(v any, t reflect.Type, path Path) []error {
	m, ok := v.(map[string]any)
	if !ok {
		return []error{typeError(path, "an object", v)}
	}
	fields := fieldsOf(t)
	var errs []error
	for _, k := range sortedKeys(m) {
		f, ok := fields[k]
		if !ok {
			errs = append(errs, unknownField(path.child(keyStep(k)), k, fields))
			continue
		}
		errs = append(errs, validateField(m[k], f, path.child(keyStep(k)))...)
	}
	return errs
}

// validateField checks the value of one struct field by its verdict.
func validateField(v any, f structField, p Path) []error {
	if v == nil {
		return nil
	}
	switch f.check {
	case kindFree:
		return nil
	case kindMeshConfig:
		return checkMeshConfig(v, p)
	case kindUnsupported:
		return []error{&FieldError{Path: p, Msg: "not supported by discovery: " + f.why}}
	case kindMoved:
		return []error{&FieldError{Path: p, Msg: "no longer read: set " + f.moved}}
	case kindOnly:
		if errs := validateTree(v, f.typ, p); len(errs) > 0 {
			return errs
		}
		if !slices.Contains(f.only, fmt.Sprint(v)) {
			msg := "not supported by discovery: " + f.why
			if len(f.only) > 1 || f.only[0] != "false" {
				msg += fmt.Sprintf(" (it takes only %s)", describeOnly(f.only))
			}
			return []error{&FieldError{Path: p, Msg: msg}}
		}
		return nil
	}
	errs := validateTree(v, f.typ, p)
	if s, ok := v.(string); ok && len(errs) == 0 {
		if f.enum != nil && !slices.Contains(f.enum, s) {
			errs = append(errs, &FieldError{Path: p, Msg: fmt.Sprintf("%q is not one of %s", s, describeOnly(slices.DeleteFunc(slices.Clone(f.enum), func(e string) bool { return e == "" })))})
		}
		if f.pattern != "" && !regexp.MustCompile(f.pattern).MatchString(s) {
			desc := f.patternDesc
			if desc == "" {
				desc = "a string matching " + f.pattern
			}
			errs = append(errs, &FieldError{Path: p, Msg: fmt.Sprintf("%q: want %s", s, desc)})
		}
	}
	return errs
}

func describeOnly(vals []string) string {
	var out []string
	for _, v := range vals {
		if v == "" {
			v = `""`
		}
		out = append(out, v)
	}
	return strings.Join(out, ", ")
}

// noEffectWarnings walks an input tree (a file's spec, or one --set) and
// names every value in it that discovery accepts but does not act on.
func noEffectWarnings(v any, t reflect.Type, path Path) []string {
	if v == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	var out []string
	switch t.Kind() {
	case reflect.Struct:
		m, _ := v.(map[string]any)
		fields := fieldsOf(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			p := path.child(keyStep(k))
			switch {
			case !ok || m[k] == nil:
			case f.check == kindNoEffect:
				out = append(out, noEffect(p, f.why))
			case f.check == kindMeshConfig:
				out = append(out, meshWarnings(m[k], p)...)
			case f.check == kindTyped || f.check == kindInstaller:
				out = append(out, noEffectWarnings(m[k], f.typ, p)...)
			}
		}
	case reflect.Map:
		m, _ := v.(map[string]any)
		for _, k := range sortedKeys(m) {
			out = append(out, noEffectWarnings(m[k], t.Elem(), path.child(keyStep(k)))...)
		}
	case reflect.Slice:
		l, _ := v.([]any)
		for i, e := range l {
			out = append(out, noEffectWarnings(e, t.Elem(), path.child(indexStep(i)))...)
		}
	}
	return out
}

func unknownField(path Path, k string, fields map[string]structField) error {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if best := closest(k, names); best != "" {
		sugg := append(Path{}, path[:len(path)-1]...)
		sugg = append(sugg, keyStep(best))
		return &FieldError{Path: path, Msg: fmt.Sprintf("unknown field %q; did you mean %s?", k, sugg)}
	}
	return &FieldError{Path: path, Msg: fmt.Sprintf("unknown field %q; valid fields here: %s", k, strings.Join(names, ", "))}
}

func typeError(path Path, want string, got any) error {
	return &FieldError{Path: path, Msg: fmt.Sprintf("want %s, got %s", want, describe(got))}
}

func describe(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case float64, int64, json.Number:
		return fmt.Sprintf("the number %v", x)
	}
	return fmt.Sprintf("%T", v)
}

// checkScalar checks v against a string, bool, integer or float kind.
func checkScalar(v any, t reflect.Type, path Path) []error {
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return []error{typeError(path, "a string (quote numbers and booleans meant as text)", v)}
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return []error{typeError(path, "a boolean", v)}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return []error{typeError(path, "an integer", v)}
		}
		if t.Kind() <= reflect.Int64 && reflect.New(t).Elem().OverflowInt(int64(f)) {
			return []error{typeError(path, "an integer in range", v)}
		}
		if t.Kind() >= reflect.Uint && (f < 0 || reflect.New(t).Elem().OverflowUint(uint64(f))) {
			return []error{typeError(path, "a non-negative integer in range", v)}
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(float64); !ok {
			return []error{typeError(path, "a number", v)}
		}
	default:
		return []error{&FieldError{Path: path, Msg: fmt.Sprintf("unsupported type %s", t)}}
	}
	return nil
}

// checkUnmarshal validates types that parse themselves (quantities,
// int-or-string) by parsing.
func checkUnmarshal(v any, t reflect.Type, path Path) []error {
	b, err := json.Marshal(v)
	if err != nil {
		return []error{&FieldError{Path: path, Msg: err.Error()}}
	}
	if err := json.Unmarshal(b, reflect.New(t).Interface()); err != nil {
		return []error{&FieldError{Path: path, Msg: fmt.Sprintf("invalid %s: %v", t.Name(), err)}}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// closest returns the candidate nearest to s by edit distance (case
// folded), if it is near enough to be a likely typo.
func closest(s string, candidates []string) string {
	best, bestD := "", -1
	ls := strings.ToLower(s)
	for _, c := range candidates {
		d := editDistance(ls, strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(2, len(s)/3)
	if bestD < 0 || bestD > limit {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// errorsWithSource sets Source on every FieldError in errs.
func errorsWithSource(source string, errs []error) error {
	for _, err := range errs {
		var fe *FieldError
		if errors.As(err, &fe) && fe.Source == "" {
			fe.Source = source
		}
	}
	return errors.Join(errs...)
}
