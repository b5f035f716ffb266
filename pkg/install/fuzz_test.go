package install

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzSetPath: the --set parser never panics, and what it accepts prints
// back to a path that parses to the same steps.
func FuzzSetPath(f *testing.F) {
	for _, s := range []string{
		"values.global.hub=x", "components.ingressGateways.[0].enabled=false",
		"components.ingressGateways.[name:gw].k8s.replicaCount=2", `a.b\.c.d=1`,
		"a..b=1", "a.[", "[0]=1", "a.[k:v:w].b=", "=", `\.=\`, "a.[00].b=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, arg string) {
		sv, err := ParseSet(arg)
		if err != nil {
			return
		}
		again, err := ParsePath(sv.Path.String())
		if err != nil {
			t.Fatalf("%q parsed to %q, which does not parse: %v", arg, sv.Path, err)
		}
		if !reflect.DeepEqual(again, sv.Path) {
			t.Fatalf("%q: %#v printed as %q parses to %#v", arg, sv.Path, sv.Path.String(), again)
		}
		// Applying it to the spec type never panics, whatever the path.
		if typ, rest, err := typeAt(sv.Path); err == nil {
			if rest != nil {
				_ = meshScalar(rest, sv.Value)
			} else {
				_, _ = coerce(sv.Value, typ, sv.Path)
			}
		}
		_, _ = setAt(map[string]any{"components": map[string]any{"ingressGateways": []any{map[string]any{"name": "gw"}}}}, sv.Path, sv.Value)
	})
}

// FuzzMerge: merging never panics or modifies its inputs; an empty
// overlay changes nothing; merging a tree over itself gives itself; and
// validation of the result never panics.
func FuzzMerge(f *testing.F) {
	f.Add(`{"a":{"b":1}}`, `{"a":{"c":[1,2]}}`)
	f.Add(`{"l":[{"name":"x","v":1}]}`, `{"l":[{"name":"x","v":null},{"name":"y"}]}`)
	f.Add(`{"components":{"pilot":{"k8s":{"replicaCount":2}}}}`, `{"components":{"pilot":{"enabled":"yes"}}}`)
	f.Add(`[1,2]`, `null`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var base, over any
		if json.Unmarshal([]byte(a), &base) != nil || json.Unmarshal([]byte(b), &over) != nil {
			return
		}
		baseCopy, overCopy := deepCopy(base), deepCopy(over)
		got := merge(base, over)
		if !reflect.DeepEqual(base, baseCopy) || !reflect.DeepEqual(over, overCopy) {
			t.Fatal("merge modified an input")
		}
		if m, ok := base.(map[string]any); ok && !hasNull(m) {
			if !reflect.DeepEqual(merge(base, map[string]any{}), base) {
				t.Fatal("an empty overlay changed the tree")
			}
			if !hasDuplicateNames(base) && !reflect.DeepEqual(merge(base, base), base) {
				t.Fatalf("merging %s over itself changed it", a)
			}
		}
		_ = validateTree(got, specType, nil)
	})
}

func hasNull(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		for _, e := range x {
			if hasNull(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasNull(e) {
				return true
			}
		}
	}
	return false
}

// hasDuplicateNames reports a named list with a name twice: merging such a
// list over itself folds the duplicates, by design.
func hasDuplicateNames(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if hasDuplicateNames(e) {
				return true
			}
		}
	case []any:
		if namedList(x) {
			seen := map[any]bool{}
			for _, e := range x {
				n := e.(map[string]any)["name"]
				if seen[n] {
					return true
				}
				seen[n] = true
			}
		}
		for _, e := range x {
			if hasDuplicateNames(e) {
				return true
			}
		}
	}
	return false
}
