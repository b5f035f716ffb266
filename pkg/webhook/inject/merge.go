package inject

import "reflect"

// mergeKeys names, for each list field of a Pod, the member that identifies
// an element; lists not named here are replaced as a whole.
var mergeKeys = map[string]string{
	"containers":          "name",
	"initContainers":      "name",
	"ephemeralContainers": "name",
	"volumes":             "name",
	"env":                 "name",
	"imagePullSecrets":    "name",
	"ports":               "containerPort",
	"volumeMounts":        "mountPath",
}

// imagePlaceholder is the container image a gateway Deployment writes for
// the injector to fill in, as Istio defines it.
const imagePlaceholder = "auto"

// overlay lays over on base and returns the result; neither input is
// changed. Objects merge member by member; keyed lists merge element by
// element, over's elements first in over's order, then the elements only
// base has in base's order; anything else in over wins. Nulls in base are
// dropped, so a template's empty field never adds a null. The one value of
// over that base replaces is the gateway image placeholder "auto".
func overlay(base, over any, field string) any {
	if over == nil {
		return dropNulls(base)
	}
	switch o := over.(type) {
	case map[string]any:
		b, ok := base.(map[string]any)
		if !ok {
			return o
		}
		out := make(map[string]any, len(b)+len(o))
		for k, v := range b {
			if v != nil {
				out[k] = dropNulls(v)
			}
		}
		for k, v := range o {
			out[k] = overlay(b[k], v, k)
		}
		return out
	case []any:
		key, keyed := mergeKeys[field]
		b, ok := base.([]any)
		if !keyed || !ok {
			return o
		}
		return overlayList(b, o, key)
	case string:
		if field == "image" && o == imagePlaceholder {
			if s, ok := base.(string); ok && s != "" {
				return s
			}
		}
	}
	return over
}

func overlayList(base, over []any, key string) []any {
	out := make([]any, 0, len(base)+len(over))
	used := make([]bool, len(base))
	for _, oe := range over {
		i := findKeyed(base, used, oe, key)
		if i < 0 {
			out = append(out, oe)
			continue
		}
		used[i] = true
		out = append(out, overlay(base[i], oe, ""))
	}
	for i, be := range base {
		if !used[i] {
			out = append(out, dropNulls(be))
		}
	}
	return out
}

func findKeyed(list []any, used []bool, elem any, key string) int {
	m, ok := elem.(map[string]any)
	if !ok {
		return -1
	}
	want, ok := m[key]
	if !ok {
		return -1
	}
	for i, x := range list {
		if xm, ok := x.(map[string]any); ok && !used[i] && reflect.DeepEqual(xm[key], want) {
			return i
		}
	}
	return -1
}

func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if e != nil {
				out[k] = dropNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			out = append(out, dropNulls(e))
		}
		return out
	}
	return v
}

// moveFirst moves the elements of list whose names are in names to the
// front, keeping their relative order and the order of the rest.
func moveFirst[T any](list []T, name func(T) string, names map[string]bool) []T {
	out := make([]T, 0, len(list))
	for _, e := range list {
		if names[name(e)] {
			out = append(out, e)
		}
	}
	for _, e := range list {
		if !names[name(e)] {
			out = append(out, e)
		}
	}
	return out
}
