package install

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Trees are decoded JSON: map[string]any, []any, string, float64, bool and
// nil. They are never modified in place: merge and set return new trees.

// merge lays over on base. Objects merge key by key (a null in over removes
// the key); lists whose elements all carry a "name" merge element by
// element, matched by name; anything else in over replaces base.
func merge(base, over any) any {
	switch o := over.(type) {
	case map[string]any:
		b, ok := base.(map[string]any)
		if !ok {
			return deepCopy(o)
		}
		out := make(map[string]any, len(b)+len(o))
		for k, v := range b {
			out[k] = deepCopy(v)
		}
		for k, v := range o {
			if v == nil {
				delete(out, k)
				continue
			}
			out[k] = merge(out[k], v)
		}
		return out
	case []any:
		if b, ok := base.([]any); ok && namedList(b) && namedList(o) {
			return mergeNamed(b, o)
		}
		return deepCopy(o)
	}
	return deepCopy(over)
}

// namedList reports whether every element is an object with a string name.
func namedList(l []any) bool {
	for _, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		if _, ok := m["name"].(string); !ok {
			return false
		}
	}
	return true
}

func mergeNamed(base, over []any) []any {
	out := deepCopy(base).([]any)
	for _, e := range over {
		name := e.(map[string]any)["name"]
		found := false
		for i, b := range out {
			if b.(map[string]any)["name"] == name {
				out[i] = merge(b, e)
				found = true
				break
			}
		}
		if !found {
			out = append(out, deepCopy(e))
		}
	}
	return out
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// typeAt walks the Spec type along p. It returns the Go type expected at
// p, or nil where the tree is free-form (metadata, meshConfig: rest is
// then the part of p inside meshConfig), and an error naming the first
// step that does not exist, with a suggestion.
func typeAt(p Path) (t reflect.Type, meshRest Path, err error) {
	t = specType
	for i, st := range p {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		here := p[:i+1]
		switch {
		case st.IsKey() && t.Kind() == reflect.Struct:
			fields := fieldsOf(t)
			f, ok := fields[st.Key]
			if !ok {
				return nil, nil, unknownField(here, st.Key, fields)
			}
			switch f.check {
			case kindMeshConfig:
				return nil, p[i+1:], nil
			case kindFree:
				return nil, nil, nil
			}
			t = f.typ
		case st.IsKey() && t.Kind() == reflect.Map:
			t = t.Elem()
		case !st.IsKey() && t.Kind() == reflect.Slice:
			t = t.Elem()
		case t.Kind() == reflect.Interface:
			return nil, nil, nil
		case st.IsKey():
			return nil, nil, &FieldError{Path: here, Msg: fmt.Sprintf("%s has no fields (it is %s)", p[:i], kindName(t))}
		default:
			return nil, nil, &FieldError{Path: here, Msg: fmt.Sprintf("%s is not a list (it is %s)", p[:i], kindName(t))}
		}
	}
	return t, nil, nil
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "a list"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	}
	return "a number"
}

var tagType = reflect.TypeFor[Tag]()

// coerce turns a --set value into the type expected at its path.
func coerce(raw string, t reflect.Type, path Path) (any, error) {
	if t == nil {
		return inferScalar(raw), nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var v any
	switch {
	case t == tagType:
		return raw, nil // a tag is text, even 1.30
	case reflect.PointerTo(t).Implements(unmarshalerType):
		v = inferScalar(raw)
	case t.Kind() == reflect.String:
		return raw, nil
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return nil, &FieldError{Path: path, Msg: fmt.Sprintf("want a boolean (true or false), got %q", raw)}
		}
		return b, nil
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return nil, &FieldError{Path: path, Msg: fmt.Sprintf("want an integer, got %q", raw)}
		}
		v = float64(n)
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return nil, &FieldError{Path: path, Msg: fmt.Sprintf("want a number, got %q", raw)}
		}
		return f, nil
	case t.Kind() == reflect.Interface:
		return inferScalar(raw), nil
	default: // objects and lists, written in YAML flow style
		if err := yaml.Unmarshal([]byte(raw), &v); err != nil {
			return nil, &FieldError{Path: path, Msg: fmt.Sprintf("want %s in YAML or JSON, got %q: %v", kindName(t), raw, err)}
		}
	}
	if errs := validateTree(v, t, path); len(errs) > 0 {
		return nil, errs[0]
	}
	return v, nil
}

// inferScalar reads an untyped --set value: true/false, a number, an
// object or list in flow style, else the text itself.
func inferScalar(raw string) any {
	if b, err := strconv.ParseBool(raw); err == nil && (raw == "true" || raw == "false") {
		return b
	}
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return float64(n)
	}
	if f, err := strconv.ParseFloat(raw, 64); err == nil && !strings.ContainsAny(raw, "xXpP_") {
		return f
	}
	if strings.HasPrefix(raw, "{") || strings.HasPrefix(raw, "[") {
		var v any
		if err := yaml.Unmarshal([]byte(raw), &v); err == nil {
			return v
		}
	}
	return raw
}

// setAt returns tree with value placed at p, creating objects on the way.
// [i] may name an existing element or the one after the last (which it
// adds); [k:v] and [:v] must select an existing element, as in istioctl.
func setAt(tree any, p Path, value any) (any, error) {
	if len(p) == 0 {
		return value, nil
	}
	st := p[0]
	if st.IsKey() {
		m, ok := tree.(map[string]any)
		if tree != nil && !ok {
			return nil, fmt.Errorf("%s: not an object", st)
		}
		out := map[string]any{}
		if ok {
			out = deepCopy(m).(map[string]any)
		}
		child, err := setAt(out[st.Key], p[1:], value)
		if err != nil {
			return nil, err
		}
		out[st.Key] = child
		return out, nil
	}
	l, ok := tree.([]any)
	if tree != nil && !ok {
		return nil, fmt.Errorf("%s: not a list", st)
	}
	out := deepCopy(l).([]any)
	i := st.Index
	if st.Index < 0 {
		if i = selectElement(out, st); i < 0 {
			return nil, fmt.Errorf("%s selects no element (%s); to add one, use the index [%d]", st, describeElements(out, st), len(out))
		}
	}
	switch {
	case i < len(out):
	case i == len(out):
		out = append(out, nil)
	default:
		return nil, fmt.Errorf("%s: the list has %d elements", st, len(out))
	}
	child, err := setAt(out[i], p[1:], value)
	if err != nil {
		return nil, err
	}
	out[i] = child
	return out, nil
}

// selectElement returns the index of the element st selects, or -1.
func selectElement(l []any, st Step) int {
	for j, e := range l {
		if st.MatchSelf {
			if _, isObj := e.(map[string]any); !isObj && e != nil && fmt.Sprint(e) == st.MatchValue {
				return j
			}
			continue
		}
		if m, ok := e.(map[string]any); ok && m[st.MatchKey] != nil && fmt.Sprint(m[st.MatchKey]) == st.MatchValue {
			return j
		}
	}
	return -1
}

func describeElements(l []any, st Step) string {
	if len(l) == 0 {
		return "the list is empty"
	}
	var have []string
	for _, e := range l {
		if st.MatchSelf {
			have = append(have, fmt.Sprint(e))
		} else if m, ok := e.(map[string]any); ok && m[st.MatchKey] != nil {
			have = append(have, fmt.Sprint(m[st.MatchKey]))
		}
	}
	if len(have) == 0 {
		return fmt.Sprintf("no element has %s", st.MatchKey)
	}
	what := "elements"
	if !st.MatchSelf {
		what = st.MatchKey + "s"
	}
	return what + ": " + strings.Join(have, ", ")
}
